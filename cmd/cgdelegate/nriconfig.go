package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	sddbus "github.com/coreos/go-systemd/v22/dbus"

	"github.com/cgdelegate/cgdelegate/internal/config"
	"github.com/cgdelegate/cgdelegate/internal/host"
	"github.com/cgdelegate/cgdelegate/internal/logging"
)

const installNRIConfigUsage = `usage: cgdelegate install-nri-config [-runtime auto|containerd|cri-o] [-restart=false] [flags]

Installs cgdelegate's NRI drop-in for the node's runtime, so that the
runtime runs NRI with its default validator on: a pod annotated
required-plugins.noderesource.dev: '["cgdelegate"]' is refused while
cgdelegate is not connected, other pods are not affected (docs/deploying.md,
"Fail closed, per pod"). The chart's install-nri-config init container runs
it (runtimeConfig.install). Running it again changes nothing.

  containerd 2.x: /etc/containerd/conf.d/cgdelegate.toml; with no
                  /etc/containerd/config.toml it writes one that imports
                  conf.d (containerd reads no drop-in without it); one that
                  does not import the drop-in is an error naming the fix
                  (the file is never edited)
  CRI-O:          /etc/crio/crio.conf.d/10-cgdelegate.conf

It then reads the runtime's config as the runtime does and fails unless the
default validator is on with it. With -restart (the default) it restarts the
runtime's systemd unit (containerd.service, crio.service) through systemd's
private socket /run/systemd/private, as root, when the runtime started before
the drop-in was last written: running containers keep running (their shims
survive), pods being created wait for the runtime to come back. -runtime auto
asks systemd which of the two units is active.

Exits 0 when the drop-in is in place and in force (or will be at the next
restart, with -restart=false), 1 when it is not, 2 for a command line that
can not run.

flags:
`

// defaultNRIConfigTimeout bounds the install with the restart: containerd
// restarts in seconds, slower under emulation.
const defaultNRIConfigTimeout = 2 * time.Minute

// nriConfigFlags is the install-nri-config command line.
type nriConfigFlags struct {
	runtime string
	restart bool
	root    string
	timeout time.Duration
	level   slog.Level
	format  logging.Format
}

func parseNRIConfigFlags(args []string, stderr io.Writer) (nriConfigFlags, error) {
	const prog = "cgdelegate install-nri-config"
	fs := newFlagSet(prog, installNRIConfigUsage, stderr)
	f := nriConfigFlags{}
	var lf logFlags
	fs.StringVar(&f.runtime, "runtime", "auto", "the node's runtime: auto (ask systemd), containerd or cri-o")
	fs.BoolVar(&f.restart, "restart", true, "restart the runtime's systemd unit when it started before the drop-in was written")
	fs.StringVar(&f.root, "root", "/", "where the node's /etc is (tests)")
	fs.DurationVar(&f.timeout, "timeout", defaultNRIConfigTimeout, "give up after this long, e.g. 30s or 2m")
	lf.register(fs)
	if err := fs.Parse(args); err != nil {
		return nriConfigFlags{}, err
	}
	var errs []error
	var err error
	switch f.runtime {
	case "auto", string(config.RuntimeContainerd), string(config.RuntimeCRIO):
	default:
		errs = append(errs, fmt.Errorf("-runtime %q: want auto, containerd or cri-o", f.runtime))
	}
	if f.runtime == "auto" && !f.restart {
		errs = append(errs, errors.New("-runtime auto asks systemd, as -restart does: with -restart=false name the runtime"))
	}
	if !filepath.IsAbs(f.root) {
		errs = append(errs, fmt.Errorf("-root %q: want an absolute path", f.root))
	}
	if f.timeout <= 0 {
		errs = append(errs, fmt.Errorf("-timeout %q: must be more than 0", f.timeout))
	}
	f.level, f.format, err = lf.finish(fs, "install-nri-config takes only flags", errs)
	if err != nil {
		logging.ErrorLine(stderr, prog, fmt.Errorf("%w (see cgdelegate install-nri-config -h)", err))
		return nriConfigFlags{}, err
	}
	return f, nil
}

// unitManager is the part of systemd install-nri-config uses.
type unitManager interface {
	// Active returns which of units is active; "" when none.
	Active(ctx context.Context, units ...string) (string, error)
	// ActiveSince is when unit last became active.
	ActiveSince(ctx context.Context, unit string) (time.Time, error)
	// Restart restarts unit and waits for the job.
	Restart(ctx context.Context, unit string) error
	Close()
}

// runInstallNRIConfig is `cgdelegate install-nri-config`, talking to
// systemd through connect.
func runInstallNRIConfig(args []string, stderr io.Writer, connect func(context.Context) (unitManager, error)) int {
	f, err := parseNRIConfigFlags(args, stderr)
	if err != nil {
		return usageExit(err)
	}
	log := logging.New(stderr, f.level, f.format)
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	ctx, cancel := context.WithTimeout(ctx, f.timeout)
	defer cancel()
	if err := installNRIConfig(ctx, f, connect, log); err != nil {
		log.Error("the runtime's NRI drop-in is not in force", "error", err)
		return 1
	}
	return 0
}

// ErrNoRuntime means systemd runs neither containerd nor CRI-O (or both).
var ErrNoRuntime = errors.New("cannot tell the node's runtime")

func installNRIConfig(ctx context.Context, f nriConfigFlags, connect func(context.Context) (unitManager, error), log *slog.Logger) error {
	var sd unitManager
	if f.restart {
		var err error
		if sd, err = connect(ctx); err != nil {
			return fmt.Errorf("connect to systemd (/run/systemd/private): %w", err)
		}
		defer sd.Close()
	}
	rt := config.Runtime(f.runtime)
	if f.runtime == "auto" {
		ctd, _ := config.DropInFor(config.RuntimeContainerd)
		crio, _ := config.DropInFor(config.RuntimeCRIO)
		unit, err := sd.Active(ctx, ctd.Unit, crio.Unit)
		switch {
		case err != nil:
			return fmt.Errorf("%w: %w", ErrNoRuntime, err)
		case unit == ctd.Unit:
			rt = config.RuntimeContainerd
		case unit == crio.Unit:
			rt = config.RuntimeCRIO
		default:
			return fmt.Errorf("%w: neither %s nor %s is active (name it with -runtime)", ErrNoRuntime, ctd.Unit, crio.Unit)
		}
	}
	d, _ := config.DropInFor(rt)
	path := filepath.Join(f.root, d.Path)
	changed, err := writeIfChanged(path, d.Text)
	if err != nil {
		return err
	}
	log.Info("NRI drop-in", "runtime", rt, "path", d.Path, "written", changed)
	if rt == config.RuntimeContainerd {
		main := filepath.Join(f.root, config.ContainerdMainConfig)
		if _, err := os.Stat(main); errors.Is(err, fs.ErrNotExist) {
			if err := host.WriteFileAtomic(main, []byte(config.MinimalContainerdConfig), 0o644); err != nil {
				return fmt.Errorf("write %s: %w", config.ContainerdMainConfig, err)
			}
			log.Info("containerd had no config file: wrote one with its defaults that imports conf.d", "path", config.ContainerdMainConfig)
		}
	}
	if err := d.CheckDropIn(f.root); err != nil {
		return err
	}
	if !f.restart {
		log.Info("the drop-in takes effect when the runtime restarts (-restart=false)", "unit", d.Unit)
		return nil
	}
	st, err := os.Stat(path)
	if err != nil {
		return err
	}
	since, err := sd.ActiveSince(ctx, d.Unit)
	if err != nil {
		return fmt.Errorf("when did %s start: %w", d.Unit, err)
	}
	if since.After(st.ModTime()) {
		log.Info("the runtime runs with the drop-in: no restart", "unit", d.Unit, "activeSince", since.UTC(), "written", st.ModTime().UTC())
		return nil
	}
	log.Info("restarting the runtime to load the drop-in", "unit", d.Unit, "activeSince", since.UTC(), "written", st.ModTime().UTC())
	if err := sd.Restart(ctx, d.Unit); err != nil {
		return fmt.Errorf("restart %s: %w", d.Unit, err)
	}
	log.Info("runtime restarted", "unit", d.Unit)
	return nil
}

// writeIfChanged writes text at path (atomically, mode 0644, its directory
// created) unless the file already says it; it reports whether it wrote.
func writeIfChanged(path, text string) (bool, error) {
	old, err := os.ReadFile(path)
	if err == nil && bytes.Equal(old, []byte(text)) {
		return false, nil
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return false, fmt.Errorf("write the drop-in: %w", err)
	}
	if err := host.WriteFileAtomic(path, []byte(text), 0o644); err != nil {
		return false, fmt.Errorf("write the drop-in: %w", err)
	}
	return true, nil
}

// systemd is unitManager over systemd's private socket.
type systemd struct{ c *sddbus.Conn }

func connectSystemd(ctx context.Context) (unitManager, error) {
	c, err := sddbus.NewSystemdConnectionContext(ctx)
	if err != nil {
		return nil, err
	}
	return systemd{c}, nil
}

func (s systemd) Close() { s.c.Close() }

func (s systemd) Active(ctx context.Context, units ...string) (string, error) {
	st, err := s.c.ListUnitsByNamesContext(ctx, units)
	if err != nil {
		return "", err
	}
	var active []string
	for _, u := range st {
		if u.ActiveState == "active" {
			active = append(active, u.Name)
		}
	}
	if len(active) > 1 {
		return "", fmt.Errorf("both %v are active", active)
	}
	if len(active) == 0 {
		return "", nil
	}
	return active[0], nil
}

func (s systemd) ActiveSince(ctx context.Context, unit string) (time.Time, error) {
	p, err := s.c.GetUnitPropertyContext(ctx, unit, "ActiveEnterTimestamp")
	if err != nil {
		return time.Time{}, err
	}
	us, ok := p.Value.Value().(uint64)
	if !ok {
		return time.Time{}, fmt.Errorf("ActiveEnterTimestamp of %s is %v, not a time", unit, p.Value)
	}
	return time.UnixMicro(int64(us)), nil //nolint:gosec // microseconds since the epoch fit
}

func (s systemd) Restart(ctx context.Context, unit string) error {
	done := make(chan string, 1)
	if _, err := s.c.RestartUnitContext(ctx, unit, "replace", done); err != nil {
		return err
	}
	select {
	case r := <-done:
		if r != "done" {
			return fmt.Errorf("the restart job ended %q", r)
		}
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
