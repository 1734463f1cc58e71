// Package status builds the node readiness report that `cgdelegate status`
// prints and the running plugin publishes.
//
// The running plugin knows what only it can see (the runtime name and
// version from Configure, the allocation table) and writes a Report to the
// status file; the status command re-runs the host checks live and merges
// the two. Nothing here talks to NRI or writes cgroupfs.
package status

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"slices"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/cgdelegate/cgdelegate/internal/config"
	"github.com/cgdelegate/cgdelegate/internal/cpumanager/policy"
	"github.com/cgdelegate/cgdelegate/internal/host"
)

// Runtime identifies the container runtime seen in Configure.
type Runtime struct {
	Name    string `json:"name"`
	Version string `json:"version"`
}

// Report is the node readiness report.
type Report struct {
	// Supported is the node's supports_cgroup_options value.
	Supported bool `json:"supportsCgroupOptions"`
	// Problems says why not, one sentence each.
	Problems []string `json:"problems,omitempty"`
	// Reason is why not in one stable word (the first problem's), one of
	// Reasons; empty while supported.
	Reason Reason `json:"reason,omitempty"`
	// Warnings are what an admin should look at that does not make the node
	// unsupported, one sentence each.
	Warnings []string `json:"warnings,omitempty"`
	// Host is what the mount table says about the cgroup root.
	Host host.Status `json:"host"`
	// MountCheck is how the running plugin reads the host's verdict on
	// every writable container: "statmount" (the kernel's answer about the
	// cgroup root alone) or "mountinfo" (the whole mount table), with why
	// not statmount.
	MountCheck string `json:"mountCheck,omitempty"`
	// Runtime is the runtime the plugin is attached to, if known.
	Runtime *Runtime `json:"runtime,omitempty"`
	// FailClosed says whether the runtime enforces the pod annotation
	// required-plugins.noderesource.dev (nil before the plugin published
	// one). Not enforced is a warning, not a problem: the node still
	// supports writable cgroups, but an opted-in pod can start without
	// them while the plugin is down.
	FailClosed *FailClosed `json:"failClosed,omitempty"`
	// PluginPID and UpdatedAt identify the publishing plugin process.
	PluginPID int       `json:"pluginPID,omitempty"`
	UpdatedAt time.Time `json:"updatedAt,omitzero"`
	// Config is the configuration in force.
	Config config.Config `json:"config"`
	// RestartPending are the keys that need a restart whose change a
	// reload asked for and was refused: the config file says one value,
	// the plugin runs with the other until it restarts.
	RestartPending []config.Change `json:"restartPending,omitempty"`
	// Pinning describes the pod-level resource manager (nil when off).
	Pinning *Pinning `json:"pinning,omitempty"`
	// NodeLabel is the last request about the label on the Node object
	// (nil when the plugin does not label its node).
	NodeLabel *NodeLabel `json:"nodeLabel,omitempty"`
	// Delegation is the node's writable pods and containers as the
	// plugin last saw them (nil before the plugin published one).
	Delegation *Delegation `json:"delegation,omitempty"`
}

// Delegation is what the node's writable pods hold of the cgroup tree: the
// node budget of delegated cgroups (nodeMaxDelegatedCgroups), what the
// writable pods reserve of it, the dying cgroups, and the writable
// containers that run on a host no longer safe for them.
type Delegation struct {
	// Budget is nodeMaxDelegatedCgroups; 0 when the budget is off.
	Budget int `json:"budget"`
	// Reserved is the sum of the writable pods' caps: each holds its live
	// and dying cgroups together.
	Reserved int `json:"reserved"`
	// DyingInPods is the sum of the writable pods' nr_dying_descendants:
	// removed cgroups the kernel still keeps, which
	// cgroup.max.descendants does not count. Each pod's count within its
	// cap, the rest in InUse.
	DyingInPods int `json:"dyingInWritablePods"`
	// InUse is what the budget counts: Reserved, what the writable pods
	// hold past their caps, and the node's dying cgroups outside them.
	InUse int `json:"inUse"`
	// Node is the cgroup root's cgroup.stat: every cgroup of the node,
	// live and dying; nil when it could not be read (Errors says why).
	Node *host.CgroupStat `json:"node,omitempty"`
	// Pods are the live writable pods.
	Pods []DelegatedPod `json:"pods,omitempty"`
	// Unsafe are the writable containers running while the host is not
	// safe for writable cgroups (no cgroup2 with nsdelegate): a container
	// without a user namespace can then raise its own limits.
	Unsafe []WritableContainer `json:"unsafeContainers,omitempty"`
	// Errors are the reads that failed, one sentence each.
	Errors []string `json:"errors,omitempty"`
}

// DelegatedPod is one writable pod in the node budget.
type DelegatedPod struct {
	// Pod is namespace/name.
	Pod string `json:"pod"`
	// Cgroup is the pod cgroup, relative to the cgroup root.
	Cgroup string `json:"cgroup"`
	// Reserved is its cap, what it holds of the budget.
	Reserved int `json:"reserved"`
	// Bound is its cgroup.max.descendants: the cap less its dying
	// cgroups, at least 0; -1 (max) for a pod cgdelegate did not bound.
	Bound int `json:"bound"`
	// Live and Dying are its cgroup.stat counts (nr_descendants,
	// nr_dying_descendants) at the last look.
	Live  int `json:"live"`
	Dying int `json:"dying"`
	// Containers are its writable containers that run (or are created).
	Containers []WritableContainer `json:"containers,omitempty"`
}

// WritableContainer is one container with writable cgroups.
type WritableContainer struct {
	// Pod is namespace/name.
	Pod       string `json:"pod"`
	Container string `json:"container"`
	ID        string `json:"id"`
	// UserNamespace reports a container in a user namespace: its root is
	// not the host's, so it can not write its limits even without
	// nsdelegate.
	UserNamespace bool `json:"userNamespace,omitempty"`
}

// NodeLabel is the outcome of the last request about the
// cgdelegate.io/supports-cgroup-options label on the plugin's Node.
type NodeLabel struct {
	// Node is the Node object's name.
	Node string `json:"node"`
	// Want is the label value wanted: "true", or "absent".
	Want string `json:"want"`
	// FailClosed is the value of the annotation cgdelegate.io/fail-closed
	// wanted beside the label (a FailClosed state, or "absent" at the
	// withdrawal); empty when the plugin does not write it.
	FailClosed string `json:"failClosed,omitempty"`
	// Reason is the value of the annotation
	// cgdelegate.io/supports-cgroup-options-reason wanted beside the label
	// (a Reason, or "absent" while the label is "true"); empty when the
	// plugin does not write it.
	Reason string `json:"reason,omitempty"`
	// Applied says whether the API has accepted Want.
	Applied bool `json:"applied"`
	// Error is the last request's error, if it failed.
	Error string `json:"error,omitempty"`
	// At is when the last request ended; zero before the first.
	At time.Time `json:"at,omitzero"`
}

// Pinning is the CPU pinning state.
type Pinning struct {
	// Active reports whether cgdelegate pins CPUs.
	Active bool `json:"active"`
	// Reason explains an inactive manager.
	Reason string `json:"reason,omitempty"`
	// Allocations is the allocation table: pods, bubbles, slices, pools;
	// nil before pinning has one.
	Allocations *policy.Status `json:"allocations,omitempty"`
}

// Evaluate turns a host check into a report for cfg. With CPU pinning on
// (and allowKubeletStaticCPUManager off) a missing kubelet CPU manager state
// file is a warning.
func Evaluate(cfg config.Config, host host.Status, readErr error) Report {
	r := Report{Host: host, Config: cfg, Supported: true}
	switch {
	case readErr != nil:
		r.Unsupport(hostReason(host, readErr), readErr.Error())
	case host.Err() != nil:
		r.Unsupport(hostReason(host, nil), host.Err().Error())
	}
	if cfg.CPUPinning && !cfg.AllowKubeletStaticCPUManager {
		if w := kubeletStateMissing(cfg.KubeletCPUManagerState); w != "" {
			r.Warnings = append(r.Warnings, w)
		}
	}
	return r
}

// kubeletStateMissing returns a warning when the state file at path does not exist, or
// "" when it does (or can not be looked at: the CPU manager refuses to pin then). Every
// kubelet writes the file, whatever its CPU manager policy, so on a node
// that runs a kubelet a missing file means the kubelet keeps its state
// elsewhere (--root-dir), or the file's directory is not mounted into
// cgdelegate's container; cgdelegate can then not see a static CPU manager.
func kubeletStateMissing(path string) string {
	if _, err := os.Stat(path); !errors.Is(err, fs.ErrNotExist) {
		return ""
	}
	return fmt.Sprintf("the kubelet's CPU manager state %s does not exist, so cgdelegate pins CPUs without knowing whether "+
		"the kubelet's static CPU manager is active: mount the kubelet's directory (read-only) into cgdelegate's container, "+
		"or set kubeletCPUManagerState to the kubelet's --root-dir", path)
}

// Marshal renders r as indented JSON with a trailing newline.
func (r Report) Marshal() []byte {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetIndent("", "  ")
	if err := enc.Encode(r); err != nil {
		// Report holds only plain data; failing here is a programming error
		// that must still not crash the plugin.
		return []byte(fmt.Sprintf("{\"error\": %q}\n", err.Error()))
	}
	return b.Bytes()
}

// FileMode is the status file's mode: the report names every pod with
// pinned CPUs (its namespace and name), so only its owner (root, the
// plugin) and `cgdelegate status` as root read it.
const FileMode = 0o600

// Publish writes r to path atomically, with FileMode, whatever the mode of
// the file it replaces. An empty path does nothing.
func Publish(path string, r Report) error {
	if path == "" {
		return nil
	}
	if err := host.WriteFileAtomic(path, r.Marshal(), FileMode); err != nil {
		return fmt.Errorf("publish status: %w", err)
	}
	return nil
}

// Parse decodes a published report.
func Parse(rd io.Reader) (Report, error) {
	var r Report
	if err := json.NewDecoder(rd).Decode(&r); err != nil {
		return Report{}, fmt.Errorf("decode status: %w", err)
	}
	return r, nil
}

// ErrNoPlugin means no running plugin has published a report.
var ErrNoPlugin = errors.New("no running cgdelegate plugin has published a status")

// ReadPublished reads the report a running plugin published at path.
func ReadPublished(path string) (Report, error) {
	if path == "" {
		return Report{}, fmt.Errorf("%w: statusFile is not configured", ErrNoPlugin)
	}
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return Report{}, fmt.Errorf("%w: %q does not exist", ErrNoPlugin, path)
	}
	if errors.Is(err, fs.ErrPermission) {
		return Report{}, fmt.Errorf("open status %q: %w; it is readable by root only (its owner, the plugin): run cgdelegate status as root", path, err)
	}
	if err != nil {
		return Report{}, fmt.Errorf("open status %q: %w", path, err)
	}
	defer f.Close()
	r, err := Parse(f)
	if err != nil {
		return Report{}, fmt.Errorf("status %q: %w", path, err)
	}
	return r, nil
}

// ErrStale means the published report can not be trusted: its plugin is
// gone, or it has not been refreshed for too long.
var ErrStale = errors.New("the published status is stale")

// CheckFresh returns an error wrapping ErrStale when pub is older than
// maxAge at now, or when alive says its publisher (PluginPID) is not
// running; nil when it is fresh.
func CheckFresh(pub Report, now time.Time, maxAge time.Duration, alive func(pid int) bool) error {
	switch {
	case pub.PluginPID <= 0:
		return fmt.Errorf("%w: it names no plugin PID", ErrStale)
	case !alive(pub.PluginPID):
		return fmt.Errorf("%w: the plugin that published it (PID %d) is not running", ErrStale, pub.PluginPID)
	case pub.UpdatedAt.IsZero():
		return fmt.Errorf("%w: it has no updatedAt", ErrStale)
	}
	if age := now.Sub(pub.UpdatedAt); age > maxAge {
		return fmt.Errorf("%w: last updated at %s, %s ago (more than %s): the plugin (PID %d) has stopped refreshing it",
			ErrStale, pub.UpdatedAt.UTC().Format(time.RFC3339), age.Round(time.Second), maxAge, pub.PluginPID)
	}
	return nil
}

// PIDAlive reports whether a process with pid exists in the caller's PID
// namespace (signal 0). The DaemonSet runs the plugin with hostPID, so a
// status command on the host or in the plugin's pod sees the same PIDs.
func PIDAlive(pid int) bool {
	err := unix.Kill(pid, 0)
	return err == nil || errors.Is(err, unix.EPERM)
}

// Live combines a fresh host check (live) with what a running plugin
// published (pub, possibly missing). The host facts and the verdict are
// always the live ones; the runtime and allocations come from the plugin.
func Live(live Report, pub Report, pubErr error) Report {
	out := live
	if pubErr != nil {
		out.Unsupport(ReasonPluginStopped, pubErr.Error())
		return out
	}
	out.Runtime = pub.Runtime
	out.FailClosed = pub.FailClosed
	out.MountCheck = pub.MountCheck
	out.PluginPID = pub.PluginPID
	out.UpdatedAt = pub.UpdatedAt
	out.Pinning = pub.Pinning
	out.NodeLabel = pub.NodeLabel
	out.Delegation = pub.Delegation
	out.RestartPending = pub.RestartPending
	// What the plugin saw from its own mount namespace, e.g. a kubelet
	// directory not mounted into its container.
	out.Warnings = slices.Clone(live.Warnings)
	for _, w := range pub.Warnings {
		if !slices.Contains(out.Warnings, w) {
			out.Warnings = append(out.Warnings, w)
		}
	}
	if l := pub.NodeLabel; l != nil && !l.Applied && l.Error != "" {
		out.Warnings = append(out.Warnings, fmt.Sprintf("the label on node %q is not what the plugin wants (%s): %s", l.Node, l.Want, l.Error))
	}
	if d := pub.Delegation; d != nil && len(d.Unsafe) > 0 {
		out.Unsupport(ReasonUnsafeContainers, UnsafeProblem(d.Unsafe))
	}
	if pub.Runtime == nil {
		out.Unsupport(ReasonNotConfigured, ErrNotConfigured.Error())
	}
	return out
}

// ErrNotReady is wrapped by every reason Ready gives.
var ErrNotReady = errors.New("the plugin is not ready")

// Ready is the pod's readiness (the chart's readiness probe, `cgdelegate
// status -ready`), decided from what the running plugin published: pub and
// pubErr as ReadPublished and CheckFresh return them. It is nil when a live
// plugin has been configured by its runtime over NRI and has checked the
// host. A node that does not support writable cgroups (no cgroup2, no
// nsdelegate) is ready all the same: the plugin works there, keeps the
// node unadvertised and refuses the pods that ask, saying why. Readiness
// means "working", not "supports writable cgroups" (that is Supported).
func Ready(pub Report, pubErr error) error {
	switch {
	case pubErr != nil:
		return fmt.Errorf("%w: %w", ErrNotReady, pubErr)
	case pub.Runtime == nil:
		return fmt.Errorf("%w: no runtime has configured it over NRI yet (is NRI enabled in the node's runtime, and its socket mounted at the plugin's?)", ErrNotReady)
	case pub.Host.CgroupRoot == "" && len(pub.Problems) == 0:
		return fmt.Errorf("%w: its status holds no host check", ErrNotReady)
	}
	return nil
}

// ReadyLine is what `cgdelegate status -ready` prints for a ready pub: the
// runtime, the node's support and whether it fails closed (the reason too
// when it does not). Readiness does not depend on the last: a node whose
// runtime does not enforce required-plugins still runs the plugin, which
// delegates there; failing the probe would only hold back helm --wait and
// the DaemonSet's rollout on such nodes, while the pods it is about start
// either way.
func ReadyLine(pub Report) string {
	line := "ready: configured by"
	if pub.Runtime != nil {
		line += " " + pub.Runtime.Name + " " + pub.Runtime.Version
	}
	line += fmt.Sprintf("; supportsCgroupOptions %t", pub.Supported)
	switch fc := pub.FailClosed; {
	case fc == nil:
		line += "; fail-closed not reported"
	case fc.Enforced():
		line += "; fail-closed " + fc.State
	default:
		line += "; fail-closed " + fc.State + " (" + fc.Reason + ")"
	}
	return line
}

// RestartWarning is the warning for a key whose change waits for a
// restart of the plugin.
func RestartWarning(c config.Change) string {
	return fmt.Sprintf("config key %s: the config file asks %s, the plugin runs with %s until it restarts (a %s key, which a reload does not change)",
		c.Key, c.New, c.Old, c.Part)
}

// UnsafeProblem is the readiness problem of writable containers running on
// an unsafe host: how many, the first few by name, and what to do.
func UnsafeProblem(cs []WritableContainer) string {
	const named = 5
	var names []string
	for i, c := range cs {
		if i == named {
			names = append(names, fmt.Sprintf("and %d more", len(cs)-named))
			break
		}
		names = append(names, c.Pod+"/"+c.Container)
	}
	return fmt.Sprintf("%d writable containers run on this host, which is no longer safe for writable cgroups (%s): "+
		"without nsdelegate a container without a user namespace can raise its own limits; delete their pods, "+
		"or remount cgroup2 with nsdelegate (see delegation.unsafeContainers)", len(cs), strings.Join(names, ", "))
}
