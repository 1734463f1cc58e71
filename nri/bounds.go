package nri

import (
	"sync"

	"github.com/cgdelegate/cgdelegate/internal/cgroupfs"
)

// boundsCacheMax caps the cache; past it the cache starts over, so a node
// that never sends RemovePodSandbox can not grow it without bound.
const boundsCacheMax = 4096

// boundsCache remembers the pod cgroups whose bounds this process has put
// in place, so the next writable container of the same pod skips the
// cgroupfs round trip. It is only an optimisation: the OCI hook reads the
// real files at every container start, and RemovePodSandbox forgets the pod.
type boundsCache struct {
	mu sync.Mutex
	m  map[boundsKey]cgroupfs.Bounds
}

type boundsKey struct {
	dir  string
	want cgroupfs.Bounds
}

func (c *boundsCache) lookup(dir string, want cgroupfs.Bounds) (cgroupfs.Bounds, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	got, ok := c.m[boundsKey{dir, want}]
	return got, ok
}

func (c *boundsCache) store(dir string, want, got cgroupfs.Bounds) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil || len(c.m) >= boundsCacheMax {
		c.m = make(map[boundsKey]cgroupfs.Bounds)
	}
	c.m[boundsKey{dir, want}] = got
}

// forget drops every entry of the pod cgroup dir.
func (c *boundsCache) forget(dir string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for k := range c.m {
		if k.dir == dir {
			delete(c.m, k)
		}
	}
}
