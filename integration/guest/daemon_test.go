//go:build integration_guest

package guest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"
)

// daemon is a long-running process of the VM (containerd or the external
// plugin) with its output appended to a log file.
type daemon struct {
	name, path string
	args       []string
	logPath    string

	mu     sync.Mutex
	cmd    *exec.Cmd
	exited chan struct{}
}

// Start starts the daemon; it is an error if it is already running.
func (d *daemon) Start() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.cmd != nil {
		select {
		case <-d.exited:
		default:
			return fmt.Errorf("%s: already running (pid %d)", d.name, d.cmd.Process.Pid)
		}
	}
	logf, err := os.OpenFile(d.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("%s: log: %w", d.name, err)
	}
	fmt.Fprintf(logf, "===== %s starting at %s =====\n", d.name, time.Now().Format(time.RFC3339Nano))
	cmd := exec.Command(d.path, d.args...)
	cmd.Stdout = logf
	cmd.Stderr = logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return fmt.Errorf("%s: start: %w", d.name, err)
	}
	exited := make(chan struct{})
	go func() {
		err := cmd.Wait()
		fmt.Fprintf(logf, "===== %s exited: %v =====\n", d.name, err)
		logf.Close()
		close(exited)
	}()
	d.cmd, d.exited = cmd, exited
	return nil
}

// Pid returns the running process id, or 0.
func (d *daemon) Pid() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.cmd == nil {
		return 0
	}
	select {
	case <-d.exited:
		return 0
	default:
		return d.cmd.Process.Pid
	}
}

// Running reports whether the daemon process is alive.
func (d *daemon) Running() bool { return d.Pid() != 0 }

// Stop sends SIGTERM to the daemon only (not its children: containerd's
// shims must survive a restart), then SIGKILL after timeout.
func (d *daemon) Stop(timeout time.Duration) error {
	d.mu.Lock()
	cmd, exited := d.cmd, d.exited
	d.mu.Unlock()
	if cmd == nil {
		return nil
	}
	select {
	case <-exited:
		return nil
	default:
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("%s: SIGTERM: %w", d.name, err)
	}
	select {
	case <-exited:
		return nil
	case <-time.After(timeout):
	}
	if err := cmd.Process.Kill(); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("%s: SIGKILL: %w", d.name, err)
	}
	<-exited
	return nil
}

// Kill sends SIGKILL to the daemon only (a crash: no clean shutdown) and
// waits for it to exit.
func (d *daemon) Kill() error {
	d.mu.Lock()
	cmd, exited := d.cmd, d.exited
	d.mu.Unlock()
	if cmd == nil {
		return fmt.Errorf("%s: not started", d.name)
	}
	if err := cmd.Process.Kill(); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("%s: SIGKILL: %w", d.name, err)
	}
	<-exited
	return nil
}

func fileSize(path string) int64 {
	st, err := os.Stat(path)
	if err != nil {
		return 0
	}
	return st.Size()
}

func fileTail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Sprintf("(%v)", err)
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// waitLog polls the file at path, from byte offset from, until a line
// satisfies match, alive reports an error, or the timeout passes.
func waitLog(ctx context.Context, path string, from int64, timeout time.Duration, match func(string) bool, alive func() error) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	for {
		if b, err := os.ReadFile(path); err == nil && int64(len(b)) > from {
			for _, l := range bytes.Split(b[from:], []byte("\n")) {
				if match(string(l)) {
					return nil
				}
			}
		}
		if err := alive(); err != nil {
			return err
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for %s: %w", path, ctx.Err())
		case <-time.After(200 * time.Millisecond):
		}
	}
}
