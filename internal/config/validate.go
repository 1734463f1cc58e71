package config

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"path"
	"path/filepath"
	"strconv"

	"k8s.io/utils/cpuset"
)

// Validate reports every problem in c at once.
func (c Config) Validate() error {
	var errs []error
	abs := func(field, v string, allowDisabled bool) {
		switch {
		case v == Disabled && allowDisabled:
		case !filepath.IsAbs(v):
			errs = append(errs, fmt.Errorf("%s: %q is not an absolute path", field, v))
		}
	}
	abs("cgroupRoot", c.CgroupRoot, false)
	abs("mountinfoPath", c.MountinfoPath, false)
	abs("procRoot", c.ProcRoot, false)
	abs("sysfsRoot", c.SysfsRoot, false)
	abs("hookPath", c.HookPath, false)
	abs("featureFile", c.FeatureFile, true)
	abs("statusFile", c.StatusFile, true)
	abs("kubeletCPUManagerState", c.KubeletCPUManagerState, false)
	abs("containerdConfig", c.ContainerdConfig, true)
	abs("crioConfig", c.CRIOConfig, true)
	abs("crioConfigDir", c.CRIOConfigDir, true)
	abs("serviceAccountDir", c.ServiceAccountDir, false)

	switch c.Guard {
	case GuardEnforce, GuardWarn, GuardOff:
	default:
		errs = append(errs, fmt.Errorf("guard: %q is not one of enforce, warn, off", c.Guard))
	}
	switch c.TopologyScope {
	case ScopePod, ScopeContainer:
	default:
		errs = append(errs, fmt.Errorf("topologyScope: %q is not one of pod, container", c.TopologyScope))
	}
	switch c.NodeLabel {
	case NodeLabelAuto, NodeLabelOn, NodeLabelOff:
	default:
		errs = append(errs, fmt.Errorf("nodeLabel: %q is not one of auto, on, off", c.NodeLabel))
	}
	switch c.PodEvents {
	case NodeLabelAuto, NodeLabelOn, NodeLabelOff:
	default:
		errs = append(errs, fmt.Errorf("podEvents: %q is not one of auto, on, off", c.PodEvents))
	}
	if c.MaxDescendants < 1 {
		errs = append(errs, fmt.Errorf("maxDescendants: %d must be at least 1", c.MaxDescendants))
	}
	if c.MaxDepth < 1 {
		errs = append(errs, fmt.Errorf("maxDepth: %d must be at least 1", c.MaxDepth))
	}
	if c.NodeMaxDelegatedCgroups < 0 {
		errs = append(errs, fmt.Errorf("nodeMaxDelegatedCgroups: %d must be 0 (no node budget) or more", c.NodeMaxDelegatedCgroups))
	}
	if c.HookTimeout < 1 {
		errs = append(errs, fmt.Errorf("hookTimeout: %d must be at least 1 second", c.HookTimeout))
	}
	if c.ReservedCPUs != "" {
		if _, err := cpuset.Parse(c.ReservedCPUs); err != nil {
			errs = append(errs, fmt.Errorf("reservedCPUs: %q is not a cpuset list: %w", c.ReservedCPUs, err))
		}
	}
	if _, err := ParseReservedMemory(c.ReservedMemory); err != nil {
		errs = append(errs, err)
	}
	errs = append(errs, patterns("optIn.namespaces", c.OptIn.Namespaces, false)...)
	errs = append(errs, patterns("optIn.runtimeHandlers", c.OptIn.RuntimeHandlers, true)...)
	if err := validAddress(c.MetricsAddress); err != nil {
		errs = append(errs, fmt.Errorf("metricsAddress: %q %w", c.MetricsAddress, err))
	}
	switch {
	case !c.Profiling:
	case c.MetricsAddress == "":
		errs = append(errs, errors.New("profiling: true needs metricsAddress, where the profiles are served"))
	case !loopbackAddress(c.MetricsAddress):
		errs = append(errs, fmt.Errorf("profiling: true needs metricsAddress on a loopback address (127.0.0.1, [::1] or localhost), not %q: the profiles (the plugin's memory and command line) would be served to every pod and host that can reach it", c.MetricsAddress))
	}
	return errors.Join(errs...)
}

// patterns checks a list of path.Match globs; allowEmpty lets "" stand for
// the empty value.
func patterns(field string, list []string, allowEmpty bool) []error {
	var errs []error
	for _, p := range list {
		if p == "" && !allowEmpty {
			errs = append(errs, fmt.Errorf("%s: %q is not a pattern", field, p))
			continue
		}
		if _, err := path.Match(p, ""); err != nil {
			errs = append(errs, fmt.Errorf("%s: %q is not a valid pattern: %w", field, p, err))
		}
	}
	return errs
}

// validAddress checks a host:port listen address; "" is valid (none).
func validAddress(addr string) error {
	if addr == "" {
		return nil
	}
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("is not host:port: %w", err)
	}
	if n, err := strconv.ParseUint(port, 10, 16); err != nil || (n == 0 && port != "0") {
		return fmt.Errorf("has port %q, not a number from 0 to 65535", port)
	}
	return nil
}

// loopbackAddress reports whether addr (host:port) binds a loopback
// address only: a loopback IP or "localhost". An empty host binds every
// address.
func loopbackAddress(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip, err := netip.ParseAddr(host)
	return err == nil && ip.IsLoopback()
}
