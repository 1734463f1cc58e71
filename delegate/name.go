package delegate

import (
	"errors"
	"fmt"
	"strings"
)

// Sentinel errors, wrapped with the detail and the fix.
var (
	// ErrBadName means a cgroup name could not be used.
	ErrBadName = errors.New("invalid cgroup name")
	// ErrBadLimit means a limit could not be parsed or is out of range.
	ErrBadLimit = errors.New("invalid limit")
	// ErrController means a controller the limits need is not available.
	ErrController = errors.New("controller not available")
	// ErrBudget means the pod cgroup bounds refused a new cgroup.
	ErrBudget = errors.New("pod cgroup bound reached")
)

// nameMax is the longest name of one cgroup (NAME_MAX).
const nameMax = 255

// CleanName checks name, a cgroup path relative to the delegated root
// ("w1", "a/b"), and returns it unchanged. Absolute paths, "." and ".."
// components, empty components and control characters are refused.
func CleanName(name string) (string, error) {
	if name == "" {
		return "", fmt.Errorf("%w: empty name; give a path relative to the cgroup root, such as w1 or jobs/w1", ErrBadName)
	}
	if strings.HasPrefix(name, "/") {
		return "", fmt.Errorf("%w: %q is absolute; give it relative to the cgroup root, such as %q", ErrBadName, name, strings.TrimLeft(name, "/"))
	}
	for comp := range strings.SplitSeq(name, "/") {
		if err := checkComponent(name, comp); err != nil {
			return "", err
		}
	}
	return name, nil
}

func checkComponent(name, comp string) error {
	switch {
	case comp == "":
		return fmt.Errorf("%w: %q has an empty component; remove the doubled or trailing /", ErrBadName, name)
	case comp == "." || comp == "..":
		return fmt.Errorf("%w: %q has a %q component; name the cgroup without climbing the tree", ErrBadName, name, comp)
	case len(comp) > nameMax:
		return fmt.Errorf("%w: component of %q is %d bytes long; keep each at most %d", ErrBadName, name, len(comp), nameMax)
	case strings.HasPrefix(comp, "cgroup."):
		return fmt.Errorf("%w: %q: component %q would clash with cgroup interface files; pick another name", ErrBadName, name, comp)
	}
	for _, r := range comp {
		if r < 0x20 || r == 0x7f {
			return fmt.Errorf("%w: %q has a control character; use printable names", ErrBadName, name)
		}
	}
	return nil
}

// cleanLeaf checks a leaf name: one component.
func cleanLeaf(leaf string) (string, error) {
	name, err := CleanName(leaf)
	if err == nil && strings.Contains(name, "/") {
		err = fmt.Errorf("%w: leaf %q must be one component directly under the root, such as init", ErrBadName, leaf)
	}
	return name, err
}
