package advert

// The NFD local feature file that advertises whether this node supports
// cgroup options (KEP-5474's supports_cgroup_options, which the CRI can not
// carry yet). Only the long-running plugin writes it: one file, atomically,
// and only when the value changes.

import (
	"errors"
	"fmt"
	"os"
	"sync"

	"github.com/cgdelegate/cgdelegate/internal/host"
)

// FeatureLabel is the NFD feature label.
const FeatureLabel = "cgdelegate.io/supports-cgroup-options"

// featureFile is an NFD local feature file ("features.d/<name>").
type featureFile struct {
	path string

	mu    sync.Mutex
	known bool
	last  bool
}

// newFeatureFile returns a featureFile at path. An empty path disables it.
func newFeatureFile(path string) *featureFile { return &featureFile{path: path} }

// Path returns the file path ("" when disabled).
func (f *featureFile) Path() string { return f.path }

// FeatureContent renders the file body for a support value.
func FeatureContent(supported bool) string {
	return fmt.Sprintf("# Written by cgdelegate; do not edit.\n%s=%t\n", FeatureLabel, supported)
}

// Set records the support value, rewriting the file when it changed (or on
// the first call). It reports whether it wrote.
func (f *featureFile) Set(supported bool) (bool, error) {
	if f.path == "" {
		return false, nil
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.known && f.last == supported {
		return false, nil
	}
	if err := host.WriteFileAtomic(f.path, []byte(FeatureContent(supported)), 0o644); err != nil {
		return false, fmt.Errorf("update feature file: %w", err)
	}
	f.known, f.last = true, supported
	return true, nil
}

// Remove deletes the file, for a clean shutdown of the node's advertisement.
func (f *featureFile) Remove() error {
	if f.path == "" {
		return nil
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.known = false
	if err := os.Remove(f.path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("remove feature file: %w", err)
	}
	return nil
}
