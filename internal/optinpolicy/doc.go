// Package optinpolicy is the node's opt-in policy (the config's optIn
// section): which pods may have writable cgroups at all, by namespace,
// runtime handler and user namespace.
//
// Use FromConfig as the constructor of an admission rule for the nri
// package (nri.WithAdmission), so the rule is rebuilt from every config that
// comes into force. The rule runs before the host and spec checks, on
// containers that asked by annotation and on runtime-writable (guarded)
// ones alike; it only reads the pod and the container. Do not use it for
// safety rules that hold on every node: those are built into
// internal/writable.
package optinpolicy
