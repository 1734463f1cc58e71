package config

import (
	"k8s.io/utils/cpuset"
)

// GuardMode says what to do with containers that arrive with a read-write
// /sys/fs/cgroup from the runtime itself (containerd's cgroup_writable,
// CRI-O's annotation) on a host where that is unsafe.
type GuardMode string

const (
	// GuardEnforce refuses such containers with an error.
	GuardEnforce GuardMode = "enforce"
	// GuardWarn logs a warning and lets them through.
	GuardWarn GuardMode = "warn"
	// GuardOff ignores them.
	GuardOff GuardMode = "off"
)

// TopologyScope selects how pod-level budgets map onto CPUs.
type TopologyScope string

const (
	// ScopePod gives every pod with a pod-level budget its own NUMA-aligned
	// bubble; Guaranteed containers get exclusive slices inside it.
	ScopePod TopologyScope = "pod"
	// ScopeContainer gives Guaranteed containers exclusive CPUs from the node
	// pool; the pod budget still bounds the sum.
	ScopeContainer TopologyScope = "container"
)

// NodeLabelMode says whether the plugin keeps the node advertisement as a
// label on its own Node object, through the Kubernetes API (nodeLabel), and
// whether it posts Events on pods (podEvents).
type NodeLabelMode string

const (
	// NodeLabelAuto labels the node when the plugin runs in a pod that can
	// reach the API: NODE_NAME, KUBERNETES_SERVICE_HOST and
	// KUBERNETES_SERVICE_PORT are set and the service-account token and CA
	// are in ServiceAccountDir. Otherwise (under systemd on the host, a
	// static pod) it labels nothing.
	NodeLabelAuto NodeLabelMode = "auto"
	// NodeLabelOn labels the node, and refuses to start without what
	// NodeLabelAuto looks for.
	NodeLabelOn NodeLabelMode = "on"
	// NodeLabelOff never touches the Node object.
	NodeLabelOff NodeLabelMode = "off"
)

// Default values.
const (
	DefaultCgroupRoot     = "/sys/fs/cgroup"
	DefaultMountinfoPath  = "/proc/1/mountinfo"
	DefaultProcRoot       = "/proc"
	DefaultSysfsRoot      = "/sys"
	DefaultHookPath       = "/usr/local/bin/cgdelegate-hook"
	DefaultMaxDescendants = 250
	DefaultMaxDepth       = 50
	// DefaultNodeMaxDelegatedCgroups is the node budget of delegated
	// cgroups: 40 writable pods at the default maxDescendants, a quarter
	// of the ~42,000 cgroups at which a node was seen going NotReady, so
	// the kubelet's, the runtime's and systemd's own cgroups keep their
	// room.
	DefaultNodeMaxDelegatedCgroups = 10000
	DefaultFeatureFile             = "/etc/kubernetes/node-feature-discovery/features.d/cgdelegate"
	DefaultStatusFile              = "/run/cgdelegate/status.json"
	DefaultKubeletCPUState         = "/var/lib/kubelet/cpu_manager_state"
	DefaultContainerdConfig        = "/etc/containerd/config.toml"
	DefaultCRIOConfig              = "/etc/crio/crio.conf"
	DefaultCRIOConfigDir           = "/etc/crio/crio.conf.d"
	DefaultHookTimeout             = 10
	// DefaultServiceAccountDir is where the kubelet mounts a pod's
	// service-account token and the cluster CA.
	DefaultServiceAccountDir = "/var/run/secrets/kubernetes.io/serviceaccount"
	// Disabled turns off an optional file (featureFile, statusFile,
	// containerdConfig, crioConfig, crioConfigDir).
	Disabled = "none"
)

// Config is the whole plugin configuration. Every field has a default, so an
// empty file is a valid config. A field's YAML key is its json tag name, and
// a key that is present replaces the default with the value as written.
//
// The keys are grouped in three parts by when they take effect; the YAML
// is flat all the same (a part's keys are top-level keys):
//   - Reloadable: put in force by every Configure from the runtime and by a
//     reload (SIGHUP);
//   - Pinning: the CPU pinning settings, put in force when the runtime
//     configures the plugin (at start and when it reconnects), never by a
//     reload;
//   - StartOnly: read once, when the plugin starts.
//
// A reload that changes a key of Pinning or StartOnly is refused
// (RestartChanges), and RestartKeys lists those keys.
type Config struct {
	Reloadable
	Pinning
	StartOnly
}

// Reloadable holds the keys a reload (SIGHUP) or a Configure puts in force:
// the host paths of the writable check, the hook, the guard, the bounds,
// the node budget, the published files, the opt-in policy and the runtime
// config files read for the validator settings.
type Reloadable struct {
	// CgroupRoot is the host's cgroup2 mount point. Writable cgroups need it
	// to be a cgroup2 (unified) mount with nsdelegate.
	CgroupRoot string `json:"cgroupRoot,omitempty"`
	// MountinfoPath is the host mount table used to check nsdelegate,
	// normally /proc/1/mountinfo.
	MountinfoPath string `json:"mountinfoPath,omitempty"`
	// ProcRoot is the host /proc, used by the hook to compare namespaces.
	ProcRoot string `json:"procRoot,omitempty"`
	// HookPath is the cgdelegate-hook binary injected into writable
	// containers, as seen by the runtime.
	HookPath string `json:"hookPath,omitempty"`
	// HookTimeout is the OCI hook timeout in seconds.
	HookTimeout int `json:"hookTimeout,omitempty"`
	// Guard is what to do with containers that the runtime already made
	// writable on an unsafe host: enforce (refuse), warn or off.
	Guard GuardMode `json:"guard,omitempty"`
	// MaxDescendants is the node-level cap written to the pod cgroup's
	// cgroup.max.descendants. A pod annotation may lower it, never raise it.
	MaxDescendants int `json:"maxDescendants,omitempty"`
	// MaxDepth is the node-level cap written to the pod cgroup's
	// cgroup.max.depth. A pod annotation may lower it, never raise it.
	MaxDepth int `json:"maxDepth,omitempty"`
	// NodeMaxDelegatedCgroups is the node budget of delegated cgroups: the
	// sum of the cgroup.max.descendants cgdelegate put on the pod cgroups of
	// the node's live writable pods, plus the dying cgroups seen in them at
	// the last refresh of the node advertisement, may not exceed it. A new
	// writable pod whose bound would take the sum over it is refused (cause
	// node_budget); a pod already admitted is never refused by it. 0 turns
	// the budget off (the ledger, status and metrics stay).
	NodeMaxDelegatedCgroups int `json:"nodeMaxDelegatedCgroups,omitempty"`
	// FeatureFile is the Node Feature Discovery local feature file kept up to
	// date with cgdelegate.io/supports-cgroup-options. "none" disables it.
	FeatureFile string `json:"featureFile,omitempty"`
	// StatusFile is where the running plugin publishes its readiness and
	// allocation table for `cgdelegate status`. "none" disables it.
	StatusFile string `json:"statusFile,omitempty"`
	// OptIn is the node's opt-in policy: which pods may have writable
	// cgroups at all. Empty allows every pod that asks.
	OptIn OptIn `json:"optIn,omitzero"`
	// ContainerdConfig is containerd's config file, read (with its imports)
	// for NRI's default validator settings: a container whose adjustment
	// the validator is set to refuse (reject_oci_hook_adjustment,
	// reject_namespace_adjustment) is refused by cgdelegate first, with an
	// error naming the setting. Missing or "none": nothing is read.
	ContainerdConfig string `json:"containerdConfig,omitempty"`
	// CRIOConfig is CRI-O's main config file (crio --config), read for
	// the same settings under [crio.nri.default_validator]
	// (nri_validator_reject_oci_hook_adjustment,
	// nri_validator_reject_namespace_adjustment) when the runtime is CRI-O.
	// Missing or "none": nothing is read from it.
	CRIOConfig string `json:"crioConfig,omitempty"`
	// CRIOConfigDir is CRI-O's drop-in directory (crio --config-dir),
	// read after CRIOConfig as CRI-O reads it: every file in it and below,
	// in lexical order, each overriding the keys it sets. Missing or
	// "none": nothing is read from it.
	CRIOConfigDir string `json:"crioConfigDir,omitempty"`
}

// Pinning holds the CPU pinning settings. The pinning state is built from
// them when the runtime configures the plugin, and filled by the runtime's
// Synchronize that follows; a reload can not rebuild it, so a change needs
// a restart (or a reconnect of the runtime).
type Pinning struct {
	// CPUPinning enables the pod-level resource manager (exclusive cpusets
	// and memory nodes from pod budgets).
	CPUPinning bool `json:"cpuPinning,omitempty"`
	// TopologyScope is pod (default) or container.
	TopologyScope TopologyScope `json:"topologyScope,omitempty"`
	// ReservedCPUs is a Linux cpuset list (e.g. "0,1"), the kubelet's
	// reservedSystemCPUs: never in a pod bubble or an exclusive slice.
	ReservedCPUs string `json:"reservedCPUs,omitempty"`
	// StrictCPUReservation keeps ReservedCPUs out of the node shared pool
	// too, like the kubelet's strict-cpu-reservation policy option. The
	// default (false) is the kubelet's: reserved CPUs stay in the node
	// shared pool, where pods without a CPU budget run.
	StrictCPUReservation bool `json:"strictCPUReservation,omitempty"`
	// ReservedMemory is memory the pod bubbles (and, in container scope,
	// the exclusive containers) never get, per NUMA node, in the form of
	// the kubelet's --reserved-memory flag (its KubeletConfiguration
	// reservedMemory): "0:memory=1Gi;1:memory=512Mi". Each node's MemTotal
	// minus its reservation is what the bubbles may hold there. Empty (the
	// default) reserves nothing: the kubelet has no default either, its
	// static memory manager refuses to start without one.
	ReservedMemory string `json:"reservedMemory,omitempty"`
	// SysfsRoot is the host /sys, used for /sys/kernel/cgroup/delegate and
	// CPU topology discovery.
	SysfsRoot string `json:"sysfsRoot,omitempty"`
	// KubeletCPUManagerState is the kubelet cpu_manager_state file. When it
	// names the static policy, cgdelegate refuses to pin CPUs.
	KubeletCPUManagerState string `json:"kubeletCPUManagerState,omitempty"`
	// AllowKubeletStaticCPUManager overrides that refusal.
	AllowKubeletStaticCPUManager bool `json:"allowKubeletStaticCPUManager,omitempty"`
}

// StartOnly holds the keys read once, when the plugin starts: the metrics
// server's address and profiling, and the node label. A change needs a
// restart.
type StartOnly struct {
	// MetricsAddress is the host:port where the plugin serves Prometheus
	// metrics at /metrics, e.g. "127.0.0.1:9767"; empty (the default)
	// serves none. It is read from the config file at start-up.
	MetricsAddress string `json:"metricsAddress,omitempty"`
	// Profiling serves Go's runtime profiles (net/http/pprof) at
	// /debug/pprof/ on MetricsAddress, which it needs on a loopback
	// address (127.0.0.1, [::1] or localhost): CPU, heap, goroutines, for
	// finding what the plugin spends its time on. Off by default: anyone
	// who reaches the address can take a profile, which holds the
	// plugin's memory and command line. It is read at start-up.
	Profiling bool `json:"profiling,omitempty"`
	// NodeLabel keeps the advertisement as the label
	// cgdelegate.io/supports-cgroup-options on the plugin's own Node object
	// (named by $NODE_NAME), set to "true" while the node supports writable
	// cgroups and removed when it does not or the plugin stops: auto (the
	// default: on when running in a pod with $NODE_NAME, the API server's
	// address and a service-account token, off otherwise), on (a start-up
	// error when any of those is missing) or off. It is read at start-up.
	NodeLabel NodeLabelMode `json:"nodeLabel,omitempty"`
	// PodEvents posts a Kubernetes Event (events.k8s.io/v1, type Warning)
	// on a pod for what the kubelet never reports: a container created
	// without cgdelegate (CgroupDelegationMissed), a writable container on
	// a host that turned unsafe (HostUnsafe), a CPU pinning update given
	// up (CPUPinningUpdateFailed). auto (the default: on when running in a
	// pod with $NODE_NAME, the API server's address and a service-account
	// token, off otherwise), on (a start-up error when any of those is
	// missing) or off. It is read at start-up.
	PodEvents NodeLabelMode `json:"podEvents,omitempty"`
	// ServiceAccountDir holds the service-account token (re-read on every
	// request, as projected tokens rotate) and ca.crt used to reach the API
	// for NodeLabel and PodEvents. It is read at start-up.
	ServiceAccountDir string `json:"serviceAccountDir,omitempty"`
}

// OptIn says which pods may have writable cgroups, asked for by an
// annotation or made by the runtime (guard). A pod must pass every rule that
// is set. The patterns are path.Match globs ("team-*", "ml").
type OptIn struct {
	// Namespaces are the pod namespaces allowed, as globs; empty allows
	// every namespace.
	Namespaces []string `json:"namespaces,omitempty"`
	// RuntimeHandlers are the pod's runtime handlers (RuntimeClass handler,
	// as the runtime reports it in the pod sandbox) allowed, as globs; empty
	// allows every handler. A pod without a RuntimeClass may be reported
	// with the empty handler, which only the pattern "" matches.
	RuntimeHandlers []string `json:"runtimeHandlers,omitempty"`
	// RequireUserNamespace allows only pods in a user namespace
	// (hostUsers: false).
	RequireUserNamespace bool `json:"requireUserNamespace,omitempty"`
}

// IsZero reports whether o sets no rule.
func (o OptIn) IsZero() bool {
	return len(o.Namespaces) == 0 && len(o.RuntimeHandlers) == 0 && !o.RequireUserNamespace
}

// Default returns the built-in configuration.
func Default() Config {
	return Config{
		Reloadable: Reloadable{
			CgroupRoot:              DefaultCgroupRoot,
			MountinfoPath:           DefaultMountinfoPath,
			ProcRoot:                DefaultProcRoot,
			HookPath:                DefaultHookPath,
			HookTimeout:             DefaultHookTimeout,
			Guard:                   GuardEnforce,
			MaxDescendants:          DefaultMaxDescendants,
			MaxDepth:                DefaultMaxDepth,
			NodeMaxDelegatedCgroups: DefaultNodeMaxDelegatedCgroups,
			FeatureFile:             DefaultFeatureFile,
			StatusFile:              DefaultStatusFile,
			ContainerdConfig:        DefaultContainerdConfig,
			CRIOConfig:              DefaultCRIOConfig,
			CRIOConfigDir:           DefaultCRIOConfigDir,
		},
		Pinning: Pinning{
			SysfsRoot:              DefaultSysfsRoot,
			TopologyScope:          ScopePod,
			KubeletCPUManagerState: DefaultKubeletCPUState,
		},
		StartOnly: StartOnly{
			NodeLabel:         NodeLabelAuto,
			PodEvents:         NodeLabelAuto,
			ServiceAccountDir: DefaultServiceAccountDir,
		},
	}
}

// ContainerdConfigPath is ContainerdConfig, or "" when disabled.
func (c Config) ContainerdConfigPath() string { return enabled(c.ContainerdConfig) }

// CRIOConfigPaths are CRIOConfig and CRIOConfigDir, each "" when disabled.
func (c Config) CRIOConfigPaths() (file, dir string) {
	return enabled(c.CRIOConfig), enabled(c.CRIOConfigDir)
}

// FeatureFilePath is FeatureFile, or "" when disabled.
func (c Config) FeatureFilePath() string { return enabled(c.FeatureFile) }

// StatusFilePath is StatusFile, or "" when disabled.
func (c Config) StatusFilePath() string { return enabled(c.StatusFile) }

func enabled(p string) string {
	if p == Disabled {
		return ""
	}
	return p
}

// Reserved returns the parsed reserved CPU set. Validate has already
// checked it, so an invalid value yields the empty set.
func (c Config) Reserved() cpuset.CPUSet {
	s, err := cpuset.Parse(c.ReservedCPUs)
	if err != nil {
		return cpuset.New()
	}
	return s
}
