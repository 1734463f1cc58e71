package metrics

// Metric names.
const (
	ContainersTotal       = "cgdelegate_containers_total"
	RefusalsTotal         = "cgdelegate_refusals_total"
	EventDuration         = "cgdelegate_nri_event_duration_seconds"
	NodeSupported         = "cgdelegate_node_supported"
	FailClosed            = "cgdelegate_fail_closed"
	CPUs                  = "cgdelegate_cpus"
	ContainerUpdatesTotal = "cgdelegate_container_updates_total"
	PodEventsTotal        = "cgdelegate_pod_events_total"

	DelegatedCgroupsBudget   = "cgdelegate_delegated_cgroups_budget"
	DelegatedCgroupsReserved = "cgdelegate_delegated_cgroups_reserved"
	WritablePods             = "cgdelegate_writable_pods"
	WritableContainers       = "cgdelegate_writable_containers"
	DyingCgroups             = "cgdelegate_dying_cgroups"
	UnsafeWritableContainers = "cgdelegate_unsafe_writable_containers"

	BuildInfo = "cgdelegate_build_info"
)

// Scopes of cgdelegate_dying_cgroups.
const (
	ScopeWritablePods = "writable_pods"
	ScopeNode         = "node"
)

// Results of cgdelegate_containers_total: the writable.Outcome names, and
// refused.
var Results = []string{"unchanged", "writable", "readonly", "guarded", "privileged", "refused"}

// Events are the NRI events the plugin times; their histograms exist from
// the start.
var Events = []string{"CreateContainer", "RunPodSandbox", "StopContainer", "RemoveContainer", "RemovePodSandbox"}

// Pools of cgdelegate_cpus.
const (
	PoolReserved   = "reserved"
	PoolNodeShared = "node_shared"
	PoolPodBubbles = "pod_bubbles"
	PoolExclusive  = "exclusive"
)

// Results of cgdelegate_container_updates_total.
const (
	UpdateSent   = "sent"
	UpdateFailed = "failed"
)

// The cgdelegate_nri_event_duration_seconds buckets are in histogram.go
// (eventBounds): a container start takes microseconds, so they start at
// 5µs and end at 1s.
