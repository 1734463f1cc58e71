// Package cpumanager is cgdelegate's pod-level CPU manager as the NRI plugin
// sees it, named after the kubelet's pkg/kubelet/cm/cpumanager: it builds
// the CPU policy from the config (or says why it can not pin), turns NRI
// pods and containers into policy specs, turns the policy's assignments
// back into NRI adjustments and container updates, sends the updates that
// events can not return (Sender), rebuilds the state in Synchronize, and
// watches the kubelet's own CPU manager state so the two never both pin.
//
// Use it from the NRI handlers, one Manager call per event. A nil *Manager
// means cpuPinning is off. Do not use it for the rules themselves; it only
// connects the layers below to NRI's types:
//
//   - policy: the allocation state and rules (bubbles, slices, pools,
//     rebuild) and the topology-aware CPU picker; pure, no NRI types.
//   - budget: budgets, QoS classes and the resources annotation, read from
//     the values the runtime passes; pure.
//   - topology: the CPU/NUMA model and its sysfs discovery (topologytest
//     builds synthetic sysfs trees for tests).
package cpumanager
