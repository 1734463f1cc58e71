// Package feature keeps a Node Feature Discovery local feature file that
// advertises whether this node supports cgroup options (KEP-5474's
// supports_cgroup_options, which the CRI can not carry yet).
//
// Use it from the long-running plugin only. It writes one file, atomically,
// and only when the value changes.
package feature

import (
	"errors"
	"fmt"
	"os"
	"sync"

	"github.com/cgdelegate/cgdelegate/internal/atomicfile"
)

// Label is the NFD feature label.
const Label = "cgdelegate.io/supports-cgroup-options"

// File is an NFD local feature file ("features.d/<name>").
type File struct {
	path string

	mu    sync.Mutex
	known bool
	last  bool
}

// New returns a File at path. An empty path disables it.
func New(path string) *File { return &File{path: path} }

// Path returns the file path ("" when disabled).
func (f *File) Path() string { return f.path }

// Content renders the file body for a support value.
func Content(supported bool) string {
	return fmt.Sprintf("# Written by cgdelegate; do not edit.\n%s=%t\n", Label, supported)
}

// Set records the support value, rewriting the file when it changed (or on
// the first call). It reports whether it wrote.
func (f *File) Set(supported bool) (bool, error) {
	if f.path == "" {
		return false, nil
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.known && f.last == supported {
		return false, nil
	}
	if err := atomicfile.Write(f.path, []byte(Content(supported)), 0o644); err != nil {
		return false, fmt.Errorf("update feature file: %w", err)
	}
	f.known, f.last = true, supported
	return true, nil
}

// Remove deletes the file, for a clean shutdown of the node's advertisement.
func (f *File) Remove() error {
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
