// Package kubeletcpu reads the kubelet's CPU manager checkpoint
// (/var/lib/kubelet/cpu_manager_state) to tell whether the kubelet's static
// CPU manager is active on the node.
//
// Use it before pinning CPUs: when the kubelet's static policy is active, it
// and cgdelegate would both write cpusets and fight over them. It only reads
// the policy name; it does not interpret the kubelet's assignments. A missing
// file means the kubelet runs no CPU manager checkpoint at all. Watcher
// tells, for one stat, whether the file changed and must be read again.
package kubeletcpu

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
)

// PolicyStatic is the kubelet's static CPU manager policy name.
const PolicyStatic = "static"

// ErrMalformed marks a state file that is not the kubelet's JSON checkpoint.
var ErrMalformed = errors.New("malformed kubelet cpu manager state")

// State is the part of the kubelet's checkpoint cgdelegate reads.
type State struct {
	// PolicyName is "none" or "static".
	PolicyName string `json:"policyName"`
	// DefaultCPUSet is the kubelet's shared pool, for messages.
	DefaultCPUSet string `json:"defaultCpuSet,omitempty"`
}

// Static reports whether the kubelet's static CPU manager is active.
func (s State) Static() bool { return s.PolicyName == PolicyStatic }

// Parse reads a checkpoint from r.
func Parse(r io.Reader) (State, error) {
	var s State
	if err := json.NewDecoder(r).Decode(&s); err != nil {
		return State{}, fmt.Errorf("%w: %w", ErrMalformed, err)
	}
	if s.PolicyName == "" {
		return State{}, fmt.Errorf("%w: no policyName", ErrMalformed)
	}
	return s, nil
}

// Read reads the checkpoint at path. A missing file is no CPU manager
// state: found is false and err is nil.
func Read(path string) (s State, found bool, err error) {
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return State{}, false, nil
	}
	if err != nil {
		return State{}, false, fmt.Errorf("read kubelet cpu manager state: %w", err)
	}
	defer f.Close()
	s, err = Parse(f)
	if err != nil {
		return State{}, true, fmt.Errorf("kubelet cpu manager state %s: %w", path, err)
	}
	return s, true, nil
}

// Conflict returns why the kubelet's CPU manager forbids cgdelegate to pin
// CPUs, or "" when it does not. The state file at path is read each call.
// allowStatic (the allowKubeletStaticCPUManager setting) overrides a static
// policy and an unreadable file.
func Conflict(path string, allowStatic bool) string {
	if allowStatic {
		return ""
	}
	st, found, err := Read(path)
	switch {
	case err != nil:
		return fmt.Sprintf("cannot tell whether the kubelet's static CPU manager is active (%v); "+
			"set allowKubeletStaticCPUManager: true to pin anyway", err)
	case found && st.Static():
		return fmt.Sprintf("the kubelet's static CPU manager is active (policyName %q in %s): it and cgdelegate would fight over cpusets; "+
			"set the kubelet's cpuManagerPolicy to none, or allowKubeletStaticCPUManager: true to pin anyway", st.PolicyName, path)
	}
	return ""
}
