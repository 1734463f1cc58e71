package config

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/api/resource"
)

// ParseReservedMemory parses a reservedMemory value, the kubelet's
// --reserved-memory flag form: per NUMA node "<node>:memory=<quantity>",
// nodes separated by ";" ("0:memory=1Gi;1:memory=512Mi"). It returns the
// bytes reserved on each node; "" reserves nothing.
//
// The rules are the kubelet's (1.37 pkg/util/flag ReservedMemoryVar and
// pkg/kubelet/apis/config/validation validateReservedMemoryConfiguration):
// a node id is a whole number, a quantity is a Kubernetes quantity of
// whole bytes, zero is refused, and a node and type may be named once.
// Unlike the kubelet, only the memory type is accepted: cgdelegate places
// no hugepages, so a hugepages-<size> reservation would do nothing. A
// negative quantity is refused too (the kubelet's flag takes one and its
// uint64 arithmetic wraps). Whether the nodes exist and hold that much is
// checked against the topology, when the policy is built. Every problem
// is reported, each naming the field and the value.
func ParseReservedMemory(s string) (map[int]int64, error) {
	out := map[int]int64{}
	if s == "" {
		return out, nil
	}
	var errs []error
	bad := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf("reservedMemory: %q: "+format, append([]any{s}, args...)...))
	}
	for _, entry := range strings.Split(s, ";") {
		node, types, ok := strings.Cut(entry, ":")
		if !ok || strings.Contains(types, ":") {
			bad("entry %q is not <numa node>:memory=<quantity>", entry)
			continue
		}
		id, err := strconv.Atoi(node)
		if err != nil || id < 0 {
			bad("NUMA node %q is not a whole number", node)
			continue
		}
		for _, kv := range strings.Split(types, ",") {
			typ, val, ok := strings.Cut(kv, "=")
			switch {
			case !ok:
				bad("NUMA node %d: %q is not memory=<quantity>", id, kv)
				continue
			case strings.HasPrefix(typ, "hugepages-"):
				bad("NUMA node %d: type %q is not supported: cgdelegate places no hugepages, only memory", id, typ)
				continue
			case typ != "memory":
				bad("NUMA node %d: unknown type %q, want memory", id, typ)
				continue
			}
			q, err := resource.ParseQuantity(val)
			if err != nil {
				bad("NUMA node %d: memory %q is not a quantity: %w", id, val, err)
				continue
			}
			b := q.Value() // rounded up to a whole byte
			exact := q.Cmp(*resource.NewQuantity(b, resource.BinarySI)) == 0
			switch {
			case !exact:
				bad("NUMA node %d: memory %q is not a whole number of bytes", id, val)
			case b < 0:
				bad("NUMA node %d: memory %q is negative", id, val)
			case b == 0:
				bad("NUMA node %d: memory %q is zero (leave the node out to reserve nothing)", id, val)
			default:
				if _, dup := out[id]; dup {
					bad("NUMA node %d: memory is reserved twice", id)
					continue
				}
				out[id] = b
			}
		}
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return out, nil
}

// ReservedMemoryBytes returns the parsed reservedMemory. Validate has
// already checked it, so an invalid value yields no reservation.
func (c Config) ReservedMemoryBytes() map[int]int64 {
	m, err := ParseReservedMemory(c.ReservedMemory)
	if err != nil {
		return map[int]int64{}
	}
	return m
}
