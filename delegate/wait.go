package delegate

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"syscall"

	"golang.org/x/sys/unix"
)

// Wait waits for a started cmd, forwarding every signal received on sigs
// to it, and returns its exit status the way a shell reports it: the exit
// code, or 128 plus the signal that killed it. The error is for a wait
// that failed, not for a non-zero status.
func Wait(cmd *exec.Cmd, sigs <-chan os.Signal) (int, error) {
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	for {
		select {
		case s := <-sigs:
			forward(cmd.Process, s)
		case err := <-done:
			var exitErr *exec.ExitError
			if err != nil && !errors.As(err, &exitErr) {
				return 0, fmt.Errorf("wait for %s: %w", cmd.Path, err)
			}
			return status(cmd.ProcessState.Sys().(syscall.WaitStatus)), nil
		}
	}
}

// Reap is Wait for a process acting as PID 1 (or as a child subreaper,
// prctl PR_SET_CHILD_SUBREAPER): it also reaps every other child, the
// orphans the kernel hands it, until cmd exits. Only one goroutine of the
// process may wait for children while it runs, and cmd's Stdin, Stdout and
// Stderr must be nil or *os.File (Reap does not call cmd.Wait).
func Reap(cmd *exec.Cmd, sigs <-chan os.Signal) (int, error) {
	type exit struct {
		pid int
		ws  unix.WaitStatus
		err error
	}
	main := cmd.Process.Pid
	exits := make(chan exit)
	go func() {
		for {
			var ws unix.WaitStatus
			pid, err := unix.Wait4(-1, &ws, 0, nil)
			if errors.Is(err, unix.EINTR) {
				continue
			}
			exits <- exit{pid, ws, err}
			if err != nil || pid == main {
				return
			}
		}
	}()
	defer func() { _ = cmd.Process.Release() }()
	for {
		select {
		case s := <-sigs:
			forward(cmd.Process, s)
		case e := <-exits:
			switch {
			case e.err != nil:
				return 0, fmt.Errorf("wait for %s: %w", cmd.Path, e.err)
			case e.pid == main:
				return status(syscall.WaitStatus(e.ws)), nil
			}
		}
	}
}

// forward sends s to p; SIGCHLD is ours, not the child's.
func forward(p *os.Process, s os.Signal) {
	if s == unix.SIGCHLD {
		return
	}
	_ = p.Signal(s) // the child may have exited already
}

func status(ws syscall.WaitStatus) int {
	if ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	return ws.ExitStatus()
}
