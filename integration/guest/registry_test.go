//go:build integration_guest

package guest

// The cluster's OCI registry as a user of the chart meets it: the
// harness runs it on the host and pushed two releases
// (variant.RegistryFile); containerd is told it speaks plain HTTP with a
// hosts.toml under /etc/containerd/certs.d (docs/deploying.md); helm
// installs, upgrades and rolls back from oci://<registry>/charts/cgdelegate
// and the kubelet pulls the image.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/cpuset"

	"github.com/cgdelegate/cgdelegate/integration/internal/cri"
	"github.com/cgdelegate/cgdelegate/integration/internal/kubelet"
	"github.com/cgdelegate/cgdelegate/integration/internal/variant"
)

// containerdHostsDir is containerd's registry config_path
// (containerdConfig): one directory per registry host, each with a
// hosts.toml.
const containerdHostsDir = "/etc/containerd/certs.d"

// loadRegistry reads the registry the harness pushed to; nil when the
// boot has none (not a cluster boot).
func loadRegistry() (*variant.Registry, error) {
	raw, err := os.ReadFile("/" + variant.RegistryFile)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("registry: %w", err)
	}
	var r variant.Registry
	if err := json.Unmarshal(raw, &r); err != nil {
		return nil, fmt.Errorf("registry: %s: %w", variant.RegistryFile, err)
	}
	if r.Host == "" || r.ImageRepo == "" || r.ChartRepo == "" || len(r.Releases) < 2 {
		return nil, fmt.Errorf("registry: %s: want a host, repositories and two releases: %s", variant.RegistryFile, raw)
	}
	// The upgrade and the rollback must move the pod between digests.
	a, b := r.Releases[0], r.Releases[1]
	if !strings.HasPrefix(a.Digest, "sha256:") || a.Digest == b.Digest || a.Chart == b.Chart || a.AppVersion == b.AppVersion {
		return nil, fmt.Errorf("registry: %s: releases %+v and %+v: want two charts, tags and sha256 digests, all different", variant.RegistryFile, a, b)
	}
	return &r, nil
}

// registryHostsTOML tells containerd that host is a plain-HTTP registry,
// for pulls and resolves, as docs/deploying.md shows.
func registryHostsTOML(host string) string {
	return `# The cluster's registry, plain HTTP (docs/deploying.md).
server = "http://` + host + `"

[host."http://` + host + `"]
  capabilities = ["pull", "resolve"]
`
}

// writeRegistryHosts writes the registry's hosts.toml where containerd's
// config_path looks (containerd reads it at each pull: no restart).
func writeRegistryHosts(host string) error {
	dir := filepath.Join(containerdHostsDir, host)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("registry hosts: %w", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "hosts.toml"), []byte(registryHostsTOML(host)), 0o644); err != nil {
		return fmt.Errorf("registry hosts: %w", err)
	}
	return nil
}

// chartRef is the chart in the registry, as helm install is given it.
func chartRef(r *variant.Registry) string {
	return "oci://" + r.Host + "/" + r.ChartRepo + "/cgdelegate"
}

// imageRef is a release's image as the chart names it with
// image.repository set to the registry.
func imageRef(r *variant.Registry, rel variant.Release) string {
	return r.Host + "/" + r.ImageRepo + ":" + rel.AppVersion
}

// registryArgs are the helm arguments after the chart that install
// release rel from the registry: its version, plain HTTP and the
// registry's image repository, the one value set (the chart's defaults
// name the project's public registry).
func registryArgs(r *variant.Registry, rel variant.Release) []string {
	return append(chartArgs(rel), "--set", "image.repository="+r.Host+"/"+r.ImageRepo)
}

// chartArgs are the helm arguments after the chart that pick release
// rel's chart from the plain-HTTP registry, in cgdelegate's namespace,
// and wait for the DaemonSet.
func chartArgs(rel variant.Release) []string {
	return []string{
		"--version", rel.Chart, "--plain-http",
		"--namespace", helmNamespace, "--wait", "--timeout", helmInstallTimeout.String(),
	}
}

// upgradeArgs are the helm upgrade arguments after the chart that move
// the release to rel's chart keeping every value set so far
// (--reuse-values), plus set.
func upgradeArgs(rel variant.Release, set ...string) []string {
	return append(append(chartArgs(rel), "--reuse-values"), set...)
}

// assertDSRelease checks that the DaemonSet's one pod runs rel: its
// containers name the release's image and the kubelet reports the image
// ID of the digest pushed to the registry.
func assertDSRelease(ctx context.Context, t *testing.T, e *guestEnv, r *variant.Registry, rel variant.Release) {
	t.Helper()
	pods, err := dsPods(ctx)
	if err != nil || len(pods) != 1 || !kubelet.Running(&pods[0], dsPluginContainer) {
		t.Errorf("the DaemonSet's pods: %d (%v), want one running\n%s", len(pods), err, e.describeDaemonSet(ctx))
		return
	}
	p := &pods[0]
	want := imageRef(r, rel)
	wantID := r.Host + "/" + r.ImageRepo + "@" + rel.Digest
	statuses := append(append([]corev1.ContainerStatus(nil), p.Status.InitContainerStatuses...), p.Status.ContainerStatuses...)
	for _, c := range append(append([]corev1.Container(nil), p.Spec.InitContainers...), p.Spec.Containers...) {
		if c.Image != want {
			t.Errorf("pod %s: container %s runs %s, want %s", p.Name, c.Name, c.Image, want)
		}
	}
	for _, s := range statuses {
		if s.ImageID != wantID {
			t.Errorf("pod %s: container %s has image ID %q, want the pushed digest %s", p.Name, s.Name, s.ImageID, wantID)
		}
	}
	t.Logf("pod %s runs %s (%s)", p.Name, want, rel.Digest)
}

// assertNothingImported checks that the release image came from the
// registry only: the boot carries no archive to import, and containerd
// knows no image of the name `ctr images import` would have given it.
func assertNothingImported(ctx context.Context, t *testing.T, e *guestEnv, r *variant.Registry, rel variant.Release) {
	t.Helper()
	if _, err := os.Stat(releaseImageTar); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the cluster boot carries the release archive %s (%v): it must pull", releaseImageTar, err)
	}
	out, err := e.ctr(ctx, "images", "ls", "-q")
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(out, "ghcr.io/cgdelegate/cgdelegate") {
		t.Errorf("containerd has an imported release image:\n%s", out)
	}
	if !strings.Contains(out, imageRef(r, rel)) {
		t.Errorf("containerd has no %s after the pull:\n%s", imageRef(r, rel), out)
	}
}

// clusterRegistryRollback: `helm rollback` to the previous revision (the
// first release with the config ClusterHelmSetConfig set) while a
// writable pod and a pinned pod run: the DaemonSet's pod is back on the
// first release's digest, the running pods keep their delegated cgroup
// and their CPUs, and the config is the one of that revision.
func clusterRegistryRollback(t *testing.T, e *guestEnv) {
	e.requireHelmPlugin(t)
	r := e.requireRegistry(t)
	ctx, cancel := context.WithTimeout(context.Background(), 12*time.Minute)
	defer cancel()
	t.Cleanup(e.pluginLogFrom(t))

	before, err := helmStatus(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if want := "cgdelegate-" + r.Releases[1].Chart; before.Revision < 2 || before.Chart != want {
		t.Fatalf("release %s is at revision %d (chart %s): roll back needs the upgrade to %s first (ClusterRegistryUpgrade)", helmRelease, before.Revision, before.Chart, want)
	}
	wl := startKeptWorkloads(ctx, t, e, "rollback")

	from := fileSize(e.paths.ContainerdLog)
	start := time.Now()
	if _, err := helmCmd(ctx, "rollback", helmRelease, "--namespace", helmNamespace, "--wait", "--timeout", helmInstallTimeout.String()); err != nil {
		t.Fatalf("%v\n%s", err, e.describeDaemonSet(ctx))
	}
	took := time.Since(start)
	if err := waitLog(ctx, e.paths.ContainerdLog, from, 3*time.Minute, pluginBack, func() error { return nil }); err != nil {
		t.Errorf("the rolled-back plugin never connected: %v\n%s", err, e.describeDaemonSet(ctx))
	}
	registered := time.Since(start)
	after, err := helmStatus(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if want := "cgdelegate-" + r.Releases[0].Chart; after.Chart != want || after.Revision != before.Revision+1 {
		t.Errorf("after the rollback: revision %d chart %s, want revision %d chart %s", after.Revision, after.Chart, before.Revision+1, want)
	}
	assertDSRelease(ctx, t, e, r, r.Releases[0])
	wl.check(ctx, t, "rollback")
	if rep, raw := e.cgdelegateStatus(t); !rep.Supported || rep.Pinning == nil || !rep.Pinning.Active {
		t.Errorf("after the rollback: supported %v, pinning %+v; want the previous revision's config, pinning active:\n%s", rep.Supported, rep.Pinning, raw)
	}
	t.Logf("helm rollback: %s (revision %d, %s); the plugin registered after %s", took.Round(100*time.Millisecond), after.Revision, after.Chart, registered.Round(100*time.Millisecond))
	clusterMetric(t, "ClusterRegistryRollback", "cluster_registry_rollback", map[string]float64{
		"rollback_seconds": seconds(took), "registered_seconds": seconds(registered),
	})
}

// helmRevision is the release as helm list shows it.
type helmRevision struct {
	Revision int
	Chart    string
}

// helmStatus reads the release's revision and chart from helm list (which
// gives the revision as a string).
func helmStatus(ctx context.Context) (helmRevision, error) {
	out, err := helmCmd(ctx, "list", "--namespace", helmNamespace, "--filter", "^"+helmRelease+"$", "-o", "json")
	if err != nil {
		return helmRevision{}, err
	}
	var l []struct {
		Revision string `json:"revision"`
		Chart    string `json:"chart"`
	}
	if err := json.Unmarshal(out, &l); err != nil {
		return helmRevision{}, fmt.Errorf("helm list: %w: %s", err, out)
	}
	if len(l) != 1 {
		return helmRevision{}, fmt.Errorf("helm list: %d releases named %s, want 1: %s", len(l), helmRelease, out)
	}
	rev, err := strconv.Atoi(l[0].Revision)
	if err != nil {
		return helmRevision{}, fmt.Errorf("helm list: revision: %w: %s", err, out)
	}
	return helmRevision{Revision: rev, Chart: l[0].Chart}, nil
}

// keptWorkloads are a writable pod with a child cgroup and a marker of
// its own, and a pinned pod with its CPU, started before a change of
// cgdelegate's release and checked after it.
type keptWorkloads struct {
	writable *cri.Container
	pinnedCg string
	cpus     cpuset.CPUSet
}

// startKeptWorkloads starts the workloads in a namespace and pod names
// made from name, deleted when the test ends.
func startKeptWorkloads(ctx context.Context, t *testing.T, e *guestEnv, name string) *keptWorkloads {
	t.Helper()
	ns := admissionNamespace(t, ctx, name)
	keep := admissionPod("keep", ns, true)
	pinned := loadPod(t, "cluster-pinned.yaml")
	pinned.Name = name + "-pinned"
	for _, p := range []*corev1.Pod{keep, pinned} {
		if _, err := applyObject(ctx, p); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() { deletePods(t, clusterNamespace, pinned.Name) })
	kp := waitNamespacedPod(ctx, t, ns, keep.Name, "work", 4*time.Minute)
	pp := waitNamespacedPod(ctx, t, clusterNamespace, pinned.Name, "exclusive", 4*time.Minute)
	wl := &keptWorkloads{writable: e.kubeletContainer(ctx, t, kp, "work"), pinnedCg: e.clusterContainerCgroup(t, pp, "exclusive")}
	shOK(ctx, t, wl.writable, "mkdir /sys/fs/cgroup/keep && echo kept > /tmp/marker")
	if err := poll(ctx, 250*time.Millisecond, func() (bool, error) {
		s, err := cpuset.Parse(readCgroupFile(t, wl.pinnedCg, "cpuset.cpus.effective"))
		wl.cpus = s
		return err == nil && s.Size() == 1, nil
	}); err != nil {
		t.Fatalf("pinned container: cpus %s, want one exclusive CPU: %v", wl.cpus, err)
	}
	return wl
}

// check: the writable pod kept its delegated cgroup and can still make
// child cgroups; the pinned pod kept its CPU.
func (wl *keptWorkloads) check(ctx context.Context, t *testing.T, across string) {
	t.Helper()
	if out := shOK(ctx, t, wl.writable, "cat /tmp/marker; mkdir /sys/fs/cgroup/keep/again && echo ok"); !strings.Contains(out, "kept") || !strings.Contains(out, "ok") {
		t.Errorf("the writable pod lost its delegated cgroup across the %s: %q", across, out)
	}
	assertWritableMount(ctx, t, wl.writable)
	if after, err := cpuset.Parse(readCgroupFile(t, wl.pinnedCg, "cpuset.cpus.effective")); err != nil || !after.Equals(wl.cpus) {
		t.Errorf("the pinned container's CPUs changed across the %s: %s -> %s (%v)", across, wl.cpus, after, err)
	}
}

// requireRegistry is the boot's registry; the scenario fails without one.
func (e *guestEnv) requireRegistry(t *testing.T) *variant.Registry {
	t.Helper()
	if e.registry == nil {
		t.Fatalf("variant %s has no registry (%s)", e.variant.Name, variant.RegistryFile)
	}
	return e.registry
}
