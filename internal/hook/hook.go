package hook

import (
	"context"
	"fmt"
	"io"
	"path/filepath"
	"strconv"

	"github.com/cgdelegate/cgdelegate/internal/host"
	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// run is one hook invocation: its inputs and what earlier checks found.
type run struct {
	opts  Options
	state specs.State
	fs    *host.FS
	// pidDir is <proc>/<pid> of the container init.
	pidDir string
	// cgroup is the container's cgroup relative to the cgroup root, set by
	// checkBounds.
	cgroup string
}

// check is one step of the hook, run in order; the first error stops it.
type check func(*run) error

// checks is the hook, in order. Each step may rely on the ones before it.
var checks = []check{
	checkNsdelegate,
	checkCgroupNS,
	checkBounds,
	delegateUserNS,
}

// Run is the hook: it reads the OCI state from stdin, verifies the host and
// the container, and chowns the container cgroup for a user-namespaced
// container. It returns nil when the container may start, or an error that
// names the cause, what was found and the fix.
func Run(ctx context.Context, opts Options, stdin io.Reader) error {
	if err := opts.Validate(); err != nil {
		return err
	}
	st, err := ReadState(stdin)
	if err != nil {
		return err
	}
	r := &run{
		opts:   opts,
		state:  st,
		fs:     host.NewFS(opts.CgroupRoot, opts.SysfsRoot),
		pidDir: filepath.Join(opts.ProcRoot, strconv.Itoa(st.Pid)),
	}
	for _, c := range checks {
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("container %q: %w", st.ID, err)
		}
		if err := c(r); err != nil {
			return err
		}
	}
	return nil
}
