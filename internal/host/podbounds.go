package host

import (
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
)

// podBoundsMax caps the memo; past it the memo starts over, so a node that
// never sends RemovePodSandbox can not grow it without bound.
const podBoundsMax = 4096

// PodBounds puts bounds on pod cgroups and remembers what it put in place,
// so the next writable container of the same pod skips the cgroupfs round
// trip. The memo is only an optimisation: the OCI hook reads the real files
// at every container start, and Forget drops a removed pod.
type PodBounds struct {
	fs *FS
	// last is the entry used last: a pod's containers start one after
	// another, so most lookups end here without a lock.
	last atomic.Pointer[podBoundsEntry]

	mu sync.Mutex
	m  map[podBoundsKey]Bounds
}

type podBoundsEntry struct {
	key podBoundsKey
	got Bounds
}

type podBoundsKey struct {
	rel  string
	want Bounds
}

// NewPodBounds returns a PodBounds writing through fs.
func NewPodBounds(fs *FS) *PodBounds { return &PodBounds{fs: fs} }

// Ensure makes the pod cgroup at rel at least as tight as want (ApplyBounds)
// unless this PodBounds already did, and returns the bounds in force.
func (p *PodBounds) Ensure(rel string, want Bounds) (Bounds, error) {
	k := podBoundsKey{rel, want}
	if last := p.last.Load(); last != nil && last.key == k {
		return last.got, nil
	}
	p.mu.Lock()
	got, ok := p.m[k]
	p.mu.Unlock()
	if ok {
		p.last.Store(&podBoundsEntry{k, got})
		return got, nil
	}
	got, err := p.fs.ApplyBounds(rel, want)
	if err != nil {
		return Bounds{}, err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.m == nil || len(p.m) >= podBoundsMax {
		p.m = make(map[podBoundsKey]Bounds)
	}
	p.m[k] = got
	p.last.Store(&podBoundsEntry{k, got})
	return got, nil
}

// Forget drops what is remembered of the pod cgroup at rel.
func (p *PodBounds) Forget(rel string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if last := p.last.Load(); last != nil && last.key.rel == rel {
		p.last.Store(nil)
	}
	for k := range p.m {
		if k.rel == rel {
			delete(p.m, k)
		}
	}
}

// ChurnBound is the cgroup.max.descendants that keeps a pod's live and
// dying cgroups together within limit, its cap: the kernel counts only the
// live ones against cgroup.max.descendants, so the bound is the cap less
// the dying ones, and 0 (no new cgroup in the pod) once they reach it. It
// may be below the pod's live count: the kernel then keeps what lives and
// refuses every mkdir until live plus dying are within the cap again.
func ChurnBound(limit, dying int) int { return max(limit-max(dying, 0), 0) }

// SetDescendants writes n as the cgroup.max.descendants of the pod cgroup
// at rel, which must be the pod's own (FS.CheckPodCgroup), whether it
// raises or lowers the bound in force. It is for the bound that follows a
// pod's dying cgroups (ChurnBound); ApplyBounds is for the cap.
func (f *FS) SetDescendants(rel string, n int) error {
	if n < 0 {
		return fmt.Errorf("set %s on %q: %d is not a limit", FileMaxDescendants, f.Dir(rel), n)
	}
	if err := f.Exists(rel); err != nil {
		return err
	}
	if err := f.CheckPodCgroup(rel); err != nil {
		return err
	}
	return f.Write(rel, FileMaxDescendants, strconv.Itoa(n))
}
