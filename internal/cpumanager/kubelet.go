package cpumanager

// The kubelet's CPU manager checkpoint (/var/lib/kubelet/cpu_manager_state)
// tells whether the kubelet's static CPU manager is active on the node.
// When it is, it and cgdelegate would both write cpusets and fight over
// them, so the Manager reads it before pinning and watches it while it pins.
// Only the policy name is read; the kubelet's assignments are not
// interpreted. A missing file means the kubelet runs no CPU manager
// checkpoint at all. stateWatcher tells, for one stat, whether the file
// changed and must be read again.

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
)

// kubeletPolicyStatic is the kubelet's static CPU manager policy name.
const kubeletPolicyStatic = "static"

// errKubeletState marks a state file that is not the kubelet's JSON checkpoint.
var errKubeletState = errors.New("malformed kubelet cpu manager state")

// kubeletState is the part of the kubelet's checkpoint cgdelegate reads.
type kubeletState struct {
	// PolicyName is "none" or "static".
	PolicyName string `json:"policyName"`
	// DefaultCPUSet is the kubelet's shared pool, for messages.
	DefaultCPUSet string `json:"defaultCpuSet,omitempty"`
}

// Static reports whether the kubelet's static CPU manager is active.
func (s kubeletState) Static() bool { return s.PolicyName == kubeletPolicyStatic }

// parseKubeletState reads a checkpoint from r.
func parseKubeletState(r io.Reader) (kubeletState, error) {
	var s kubeletState
	if err := json.NewDecoder(r).Decode(&s); err != nil {
		return kubeletState{}, fmt.Errorf("%w: %w", errKubeletState, err)
	}
	if s.PolicyName == "" {
		return kubeletState{}, fmt.Errorf("%w: no policyName", errKubeletState)
	}
	return s, nil
}

// readKubeletState reads the checkpoint at path. A missing file is no CPU manager
// state: found is false and err is nil.
func readKubeletState(path string) (s kubeletState, found bool, err error) {
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return kubeletState{}, false, nil
	}
	if err != nil {
		return kubeletState{}, false, fmt.Errorf("read kubelet cpu manager state: %w", err)
	}
	defer f.Close()
	s, err = parseKubeletState(f)
	if err != nil {
		return kubeletState{}, true, fmt.Errorf("kubelet cpu manager state %s: %w", path, err)
	}
	return s, true, nil
}

// kubeletConflict returns why the kubelet's CPU manager forbids cgdelegate to pin
// CPUs, or "" when it does not. The state file at path is read each call.
// allowStatic (the allowKubeletStaticCPUManager setting) overrides a static
// policy and an unreadable file.
func kubeletConflict(path string, allowStatic bool) string {
	if allowStatic {
		return ""
	}
	st, found, err := readKubeletState(path)
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
