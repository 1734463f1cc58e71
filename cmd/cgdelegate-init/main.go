// Command cgdelegate-init makes a delegated, writable /sys/fs/cgroup
// usable inside a container. It is a thin layer over package
// github.com/cgdelegate/cgdelegate/delegate.
//
//	cgdelegate-init [--controllers cpu,memory,pids,cpuset] [--leaf init] -- CMD [ARGS]
//	cgdelegate-init run --cgroup NAME [--cpu QTY] [--memory QTY] [--pids N] [--cpuset LIST] [--keep] [--leaf init] -- CMD [ARGS]
//	cgdelegate-init tree
//	cgdelegate-init check
//	cgdelegate-init --version
//
// Without a subcommand it is an entrypoint: it moves the container's
// processes into the leaf, enables the controllers, and runs CMD as its
// child with PID 1 duties (reaping, signal forwarding). run starts CMD in
// a new cgroup with limits and removes it afterwards. Errors are one line
// on stderr, "cgdelegate-init: ...", and exit 1; otherwise the exit status
// is CMD's. -h prints the usage and exits 0.
//
// check also prints the container's AppArmor profile and seccomp mode. When
// a runtime's default AppArmor profile (cri-containerd.apparmor.d,
// docker-default) confines a container holding CAP_SYS_ADMIN, every mount
// is denied: check and the entrypoint say so, and name the profile that
// allows them (appArmorProfile Localhost cgdelegate-engines,
// docs/engine-profiles.md).
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"strings"
	"syscall"
	"text/tabwriter"

	"golang.org/x/sys/unix"

	"github.com/cgdelegate/cgdelegate/delegate"
	"github.com/cgdelegate/cgdelegate/internal/logging"
	"github.com/cgdelegate/cgdelegate/internal/version"
)

const prog = "cgdelegate-init"

const usage = `usage: cgdelegate-init [--controllers cpu,memory,pids,cpuset] [--leaf init] -- CMD [ARGS]
       cgdelegate-init run --cgroup NAME [--cpu QTY] [--memory QTY] [--pids N] [--cpuset LIST] [--keep] [--leaf init] -- CMD [ARGS]
       cgdelegate-init tree
       cgdelegate-init check
       cgdelegate-init --version
`

func main() {
	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, unix.SIGTERM, unix.SIGINT, unix.SIGHUP, unix.SIGQUIT, unix.SIGUSR1, unix.SIGUSR2, unix.SIGWINCH)
	os.Exit(realMain(args{argv: os.Args[1:], opts: delegate.DefaultOptions(), stdout: os.Stdout, stderr: os.Stderr, sigs: sigs}))
}

// args is what a run of the command gets from its process.
type args struct {
	argv           []string
	opts           delegate.Options
	stdout, stderr io.Writer
	sigs           <-chan os.Signal
}

func realMain(a args) int {
	var code int
	var err error
	sub := ""
	if len(a.argv) > 0 {
		sub = a.argv[0]
	}
	switch sub {
	case "run":
		code, err = runCmd(a, a.argv[1:])
	case "tree":
		err = treeCmd(a, a.argv[1:])
	case "check":
		code, err = checkCmd(a, a.argv[1:])
	case "--version", "-version":
		fmt.Fprintln(a.stdout, prog, version.String())
	default:
		code, err = entrypoint(a, a.argv)
	}
	switch {
	case errors.Is(err, flag.ErrHelp):
		fmt.Fprint(a.stderr, usage)
		return 0
	case err != nil:
		logging.ErrorLine(a.stderr, prog, err)
		return 1
	}
	return code
}

func newFlagSet(name string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	return fs
}

// parse parses argv and returns the command after --, which it requires
// when wantCmd, and refuses otherwise.
func parse(fs *flag.FlagSet, argv []string, wantCmd bool) ([]string, error) {
	if err := fs.Parse(argv); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil, err
		}
		return nil, fmt.Errorf("%w; see %s -h", err, prog)
	}
	rest := fs.Args()
	switch {
	case wantCmd && len(rest) == 0:
		return nil, fmt.Errorf("no command to run: give it after --, as in %s -- /app/server; see %s -h", prog, prog)
	case !wantCmd && len(rest) > 0:
		return nil, fmt.Errorf("unexpected arguments %q; see %s -h", rest, prog)
	}
	return rest, nil
}

// entrypoint prepares the root and runs the command in the leaf with PID 1
// duties.
func entrypoint(a args, argv []string) (int, error) {
	fs := newFlagSet(prog)
	controllers := fs.String("controllers", "", "controllers to enable in the root, comma-separated (default: those of cpu,cpuset,memory,pids the root has)")
	leaf := fs.String("leaf", delegate.DefaultLeaf, "cgroup the root's processes move into")
	command, err := parse(fs, argv, true)
	if err != nil {
		return 0, err
	}
	var ctrls []string
	if *controllers != "" {
		ctrls = strings.Split(*controllers, ",")
	}
	r := delegate.New(a.opts)
	if err := r.Prepare(*leaf, ctrls); err != nil {
		return 0, err
	}
	// A nested runtime or systemd as CMD fails on its first mount under a
	// runtime's default AppArmor profile, with a bare EACCES: say why first.
	if c, err := r.Confinement(); err == nil && c.MountsDenied() {
		fmt.Fprintf(a.stderr, "%s: note: %s\n", prog, c.MountsDeniedHint())
	}
	if os.Getpid() != 1 {
		// Not PID 1: orphans still come to us to reap.
		_ = unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
	}
	cmd := newCommand(command)
	if err := cmd.Start(); err != nil {
		return 0, fmt.Errorf("start %s: %w", command[0], err)
	}
	return delegate.Reap(cmd, a.sigs)
}

// newCommand is the command with the process's stdio.
func newCommand(argv []string) *exec.Cmd {
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{}
	return cmd
}

// runFlags are run's flags.
type runFlags struct {
	cgroup, cpu, memory, pids, cpuset, leaf string
	keep                                    bool
}

func (f *runFlags) limits() (delegate.Limits, error) {
	var l delegate.Limits
	var err error
	if f.cpu != "" {
		if l.CPUMilli, err = delegate.ParseCPU(f.cpu); err != nil {
			return l, err
		}
	}
	if f.memory != "" {
		if l.MemoryBytes, err = delegate.ParseMemory(f.memory); err != nil {
			return l, err
		}
	}
	if f.pids != "" {
		if l.Pids, err = delegate.ParsePids(f.pids); err != nil {
			return l, err
		}
	}
	if f.cpuset != "" {
		if l.Cpuset, err = delegate.ParseCpuset(f.cpuset); err != nil {
			return l, err
		}
	}
	return l, nil
}

// runCmd runs the command in a new cgroup with limits.
func runCmd(a args, argv []string) (code int, err error) {
	var f runFlags
	fs := newFlagSet(prog + " run")
	fs.StringVar(&f.cgroup, "cgroup", "", "cgroup to run in, relative to the root (a/b makes parents)")
	fs.StringVar(&f.cpu, "cpu", "", "CPU limit, a Kubernetes quantity (500m, 2)")
	fs.StringVar(&f.memory, "memory", "", "memory limit, a Kubernetes quantity (256Mi)")
	fs.StringVar(&f.pids, "pids", "", "pids limit")
	fs.StringVar(&f.cpuset, "cpuset", "", "CPUs, inside the container's cpuset.cpus.effective (0-3)")
	fs.StringVar(&f.leaf, "leaf", delegate.DefaultLeaf, "cgroup the root's processes move into")
	fs.BoolVar(&f.keep, "keep", false, "keep the cgroup when the command ends")
	command, err := parse(fs, argv, true)
	if err != nil {
		return 0, err
	}
	if f.cgroup == "" {
		return 0, fmt.Errorf("run needs --cgroup NAME, such as --cgroup w1; see %s -h", prog)
	}
	l, err := f.limits()
	if err != nil {
		return 0, err
	}
	r := delegate.New(a.opts)
	if err := r.Prepare(f.leaf, []string{}); err != nil {
		return 0, err
	}
	g, err := r.Create(f.cgroup, l)
	if err != nil {
		return 0, err
	}
	if !f.keep {
		defer func() {
			if rmErr := g.Remove(); rmErr != nil {
				err = errors.Join(err, rmErr)
			}
		}()
	}
	before, err := g.OOMKills()
	if err != nil {
		return 0, err
	}
	cmd := newCommand(command)
	if err := g.Start(cmd); err != nil {
		return 0, fmt.Errorf("start %s in %s: %w", command[0], g.Dir(), err)
	}
	code, err = delegate.Wait(cmd, a.sigs)
	if err != nil {
		return code, err
	}
	after, err := g.OOMKills()
	if err != nil {
		return code, err
	}
	if after > before {
		fmt.Fprintf(a.stderr, "%s: OOM: the worker in cgroup %s was OOM-killed (memory.events oom_kill %d -> %d) at its memory limit memory.max=%d (--memory %s); raise --memory\n",
			prog, f.cgroup, before, after, l.MemoryBytes, f.memory)
		if code == 0 {
			code = 1
		}
	}
	return code, nil
}

// treeCmd prints the sub-cgroups with their limits and usage.
func treeCmd(a args, argv []string) error {
	if _, err := parse(newFlagSet(prog+" tree"), argv, false); err != nil {
		return err
	}
	stats, err := delegate.New(a.opts).Tree()
	tw := tabwriter.NewWriter(a.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "CGROUP\tCPU.MAX\tMEMORY.MAX\tPIDS.MAX\tCPUSET\tCPU USAGE (us)\tMEMORY\tPIDS\tOOM KILLS")
	for _, s := range stats {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%d\t%d\t%d\t%d\n", s.Name, dash(s.CPUMax), dash(s.MemoryMax), dash(s.PidsMax), dash(s.Cpuset),
			s.CPUUsageUsec, s.MemoryCurrent, s.PidsCurrent, s.OOMKills)
	}
	if ferr := tw.Flush(); err == nil {
		err = ferr
	}
	return err
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// checkCmd says whether delegation is available; exit 1 when it is not.
func checkCmd(a args, argv []string) (int, error) {
	if _, err := parse(newFlagSet(prog+" check"), argv, false); err != nil {
		return 0, err
	}
	rep := delegate.New(a.opts).Check()
	if rep.OK() {
		fmt.Fprintln(a.stdout, "delegation: available")
	} else {
		fmt.Fprintln(a.stdout, "delegation: not available")
	}
	for _, p := range rep.Problems {
		fmt.Fprintln(a.stdout, "problem: "+p)
	}
	for _, n := range rep.Notes {
		fmt.Fprintln(a.stdout, "note: "+n)
	}
	if !rep.OK() {
		return 1, nil
	}
	return 0, nil
}
