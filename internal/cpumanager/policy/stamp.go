package policy

import (
	"fmt"
	"strings"

	"k8s.io/utils/cpuset"
)

// StampAnnotation is the container annotation that carries an assignment
// stamp.
const StampAnnotation = "cpuset.cgdelegate.io/assignment"

// stampVersion is the only stamp version written and read.
const stampVersion = "1"

// Stamp is a parsed assignment stamp.
type Stamp struct {
	Pool   Pool
	Bubble cpuset.CPUSet
	CPUs   cpuset.CPUSet
	Mems   cpuset.CPUSet
}

// Stamp encodes the assignment for the StampAnnotation, e.g.
// "v=1;pool=exclusive;bubble=0-3;cpus=2-3;mems=0".
func (a Assignment) Stamp() string {
	return fmt.Sprintf("v=%s;pool=%s;bubble=%s;cpus=%s;mems=%s",
		stampVersion, a.Pool, a.Bubble.String(), a.CPUs.String(), a.Mems.String())
}

// ParseStamp decodes a stamp. Errors wrap ErrStamp and quote the value.
func ParseStamp(s string) (Stamp, error) {
	st, err := parseStamp(s)
	if err != nil {
		return Stamp{}, fmt.Errorf("%w: %q: %w", ErrStamp, s, err)
	}
	return st, nil
}

func parseStamp(s string) (Stamp, error) {
	fields := map[string]string{}
	for _, f := range strings.Split(s, ";") {
		k, v, ok := strings.Cut(f, "=")
		if !ok {
			return Stamp{}, fmt.Errorf("field %q is not key=value", f)
		}
		if _, dup := fields[k]; dup {
			return Stamp{}, fmt.Errorf("field %q given twice", k)
		}
		fields[k] = v
	}
	if v := fields["v"]; v != stampVersion {
		return Stamp{}, fmt.Errorf("version %q is not %s", v, stampVersion)
	}
	var st Stamp
	switch p := Pool(fields["pool"]); p {
	case PoolExclusive, PoolPodShared, PoolNodeShared:
		st.Pool = p
	default:
		return Stamp{}, fmt.Errorf("pool %q is not exclusive, pod-shared or node-shared", p)
	}
	for _, f := range []struct {
		key string
		dst *cpuset.CPUSet
	}{{"bubble", &st.Bubble}, {"cpus", &st.CPUs}, {"mems", &st.Mems}} {
		v, ok := fields[f.key]
		if !ok {
			return Stamp{}, fmt.Errorf("field %q missing", f.key)
		}
		set, err := cpuset.Parse(v)
		if err != nil {
			return Stamp{}, fmt.Errorf("%s %q: %w", f.key, v, err)
		}
		*f.dst = set
	}
	if len(fields) != 5 {
		return Stamp{}, fmt.Errorf("unknown fields (want v, pool, bubble, cpus, mems)")
	}
	if st.Pool == PoolExclusive && st.CPUs.IsEmpty() {
		return Stamp{}, fmt.Errorf("exclusive stamp without cpus")
	}
	return st, nil
}

// parsedStamp returns the container's stamp: nil when it has none or when
// it does not parse (then with the error).
func (cs ContainerState) parsedStamp() (*Stamp, error) {
	if cs.Stamp == "" {
		return nil, nil
	}
	s, err := ParseStamp(cs.Stamp)
	if err != nil {
		return nil, err
	}
	return &s, nil
}

// agrees checks a stamp against the cpuset the runtime reports the
// container runs on (cur): an exclusive stamp's cpus must be exactly
// cur, and a pod-shared container must run inside the stamped bubble.
// A stamp is an annotation, and cgdelegate is not the only one that
// writes annotations: a runtime may copy the pod's onto its containers
// (CRI-O copies them all), so a pod author can put any stamp on a
// container created while no plugin pinned. Checked this way, a stamp
// can only keep a container on CPUs it already runs on; it can never
// claim another container's. A node-shared stamp claims no CPUs and is
// not checked. A nil stamp agrees.
func (s *Stamp) agrees(cur cpuset.CPUSet) error {
	if s == nil {
		return nil
	}
	switch {
	case s.Pool == PoolExclusive && !cur.Equals(s.CPUs):
		return fmt.Errorf("its stamp says exclusive cpus %s, but it runs on cpus %q", s.CPUs, cur.String())
	case s.Pool == PoolPodShared && (cur.IsEmpty() || !cur.IsSubsetOf(s.Bubble)):
		return fmt.Errorf("its stamp says pod-shared in bubble %q, but it runs on cpus %q", s.Bubble.String(), cur.String())
	}
	return nil
}
