//go:build integration_vm

package vm

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"strings"
	"sync"
	"time"
)

// bootSpec is one qemu invocation.
type bootSpec struct {
	Kernel, Initramfs string
	Cmdline           string
	SMP               int
	NUMA              bool // two NUMA nodes, CPUs and memory split evenly
	// Net gives the guest a virtio-net NIC on qemu's user network (the
	// host is 10.0.2.2 there, and reaches the host's loopback); without it
	// the guest has no NIC.
	Net bool
	// Tap, instead, connects the guest's virtio-net NIC, with address MAC,
	// to the host's tap device of that name (a cluster's pod network:
	// integration/internal/podnet), which must exist.
	Tap, MAC    string
	MemoryMiB   int
	Accel       string // qemu -accel value; empty means TCG
	LogPath     string // full console log
	BootTimeout time.Duration
	Timeout     time.Duration
}

var (
	errBootTimeout = errors.New("VM did not reach CGD-BOOT in time")
	errTimeout     = errors.New("VM did not finish in time")
)

func (s bootSpec) args() []string {
	accel := s.Accel
	if accel == "" {
		accel = "tcg,thread=multi"
	}
	args := []string{
		"-accel", accel, "-cpu", "max",
		"-m", fmt.Sprint(s.MemoryMiB), "-smp", fmt.Sprint(s.SMP),
		"-nographic", "-no-reboot",
		"-kernel", s.Kernel, "-initrd", s.Initramfs,
		"-append", s.Cmdline,
	}
	switch {
	case s.Tap != "":
		args = append(args, "-netdev", "tap,id=n0,ifname="+s.Tap+",script=no,downscript=no",
			"-device", "virtio-net-pci,netdev=n0,mac="+s.MAC)
	case s.Net:
		args = append(args, "-netdev", "user,id=n0", "-device", "virtio-net-pci,netdev=n0")
	default:
		args = append(args, "-nic", "none")
	}
	if s.NUMA {
		half := s.MemoryMiB / 2
		cpus := s.SMP / 2
		args = append(args,
			"-object", fmt.Sprintf("memory-backend-ram,id=m0,size=%dM", half),
			"-object", fmt.Sprintf("memory-backend-ram,id=m1,size=%dM", s.MemoryMiB-half),
			"-numa", fmt.Sprintf("node,nodeid=0,cpus=0-%d,memdev=m0", cpus-1),
			"-numa", fmt.Sprintf("node,nodeid=1,cpus=%d-%d,memdev=m1", cpus, s.SMP-1),
		)
	}
	return args
}

// boot runs qemu until the guest powers off, a timeout, or ctx ends, and
// returns what the console reported. A non-nil error means the boot itself
// failed; the report is returned in every case for diagnostics.
func boot(ctx context.Context, log *slog.Logger, s bootSpec, onLine func(string)) (*consoleReport, error) {
	rep := newConsoleReport()
	logf, err := os.Create(s.LogPath) //nolint:forbidigo // console log in our own work dir
	if err != nil {
		return rep, fmt.Errorf("console log: %w", err)
	}
	defer logf.Close()

	ctx, cancel := context.WithTimeout(ctx, s.Timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, "qemu-system-x86_64", s.args()...)
	cmd.Stdin = nil
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return rep, fmt.Errorf("qemu: %w", err)
	}
	cmd.WaitDelay = 5 * time.Second
	start := time.Now()
	if err := cmd.Start(); err != nil {
		return rep, fmt.Errorf("qemu: %w", err)
	}
	log.Info("qemu started", "pid", cmd.Process.Pid, "cmdline", s.Cmdline)

	var mu sync.Mutex
	booted := make(chan struct{})
	readDone := make(chan error, 1)
	go func() {
		br := bufio.NewReaderSize(stdout, 64<<10)
		var once sync.Once
		for {
			line, err := br.ReadString('\n')
			if line != "" {
				_, _ = logf.WriteString(line)
				l := strings.TrimRight(line, "\r\n")
				mu.Lock()
				rep.Feed(l)
				isBooted := rep.Booted
				mu.Unlock()
				if isBooted {
					once.Do(func() { close(booted) })
				}
				if onLine != nil {
					onLine(l)
				}
			}
			if err != nil {
				if errors.Is(err, io.EOF) {
					err = nil
				}
				readDone <- err
				return
			}
		}
	}()

	var (
		bootErr, rerr error
		readOver      bool
	)
	select {
	case <-booted:
		log.Info("guest booted", "after", time.Since(start).Round(100*time.Millisecond))
	case <-time.After(s.BootTimeout):
		bootErr = fmt.Errorf("%w (%s)", errBootTimeout, s.BootTimeout)
		cancel()
	case <-ctx.Done():
		bootErr = fmt.Errorf("%w: %w", errTimeout, ctx.Err())
	case rerr = <-readDone:
		readOver = true // qemu closed its console before the guest booted
	}
	if !readOver {
		rerr = <-readDone
	}
	werr := cmd.Wait()
	mu.Lock()
	defer mu.Unlock()
	if ps := cmd.ProcessState; ps != nil {
		rep.QemuCPU = ps.UserTime() + ps.SystemTime()
	}
	log.Info("qemu exited", "after", time.Since(start).Round(100*time.Millisecond), "cpu", rep.QemuCPU.Round(100*time.Millisecond), "err", werr)
	switch {
	case bootErr != nil:
		return rep, bootErr
	case ctx.Err() != nil && rep.Done == nil:
		return rep, fmt.Errorf("%w (%s)", errTimeout, s.Timeout)
	case rerr != nil:
		return rep, fmt.Errorf("console: %w", rerr)
	case werr != nil && rep.Done == nil:
		return rep, fmt.Errorf("qemu: %w: %s", werr, strings.TrimSpace(stderr.String()))
	case !rep.Booted:
		return rep, fmt.Errorf("guest never printed %s: %s", markBoot, strings.TrimSpace(stderr.String()))
	case rep.Done == nil:
		return rep, errors.New("guest test binary never finished (no CGD-DONE): the VM died or init failed")
	}
	return rep, nil
}
