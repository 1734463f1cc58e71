package host

import (
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
