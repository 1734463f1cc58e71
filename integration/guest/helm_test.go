//go:build integration_guest

package guest

// cgdelegate installed the way users install it (variant.PluginHelm):
// `helm install` of the chart from the cluster's OCI registry
// (registry_test.go) into the cluster; the DaemonSet controller and the
// scheduler place its pod, the kubelet pulls its image from the registry
// and mounts its ConfigMap from the API.

import (
	"context"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/cgdelegate/cgdelegate/integration/internal/kubelet"
	"github.com/cgdelegate/cgdelegate/integration/internal/variant"
	"github.com/cgdelegate/cgdelegate/integration/internal/workstation"
)

const (
	// helmRelease and helmNamespace are the release's name and namespace,
	// as docs/deploying.md installs it.
	helmRelease   = "cgdelegate"
	helmNamespace = "kube-system"
	// helmInstallTimeout bounds helm install --wait: pulling the image
	// and starting two containers under TCG.
	helmInstallTimeout = 8 * time.Minute
	// dsSelector selects the DaemonSet's pods.
	dsSelector = "app.kubernetes.io/name=cgdelegate"
)

// clusterManifests are the objects the Cluster scenarios apply that are not
// Pods (the Pod manifests are podManifests, strictly decoded as Pods).
//
//go:embed testdata/cluster/*.yaml
var clusterManifests embed.FS

// helmInstall is cgdelegate installed by helm.
type helmInstall struct {
	// image is the release image the chart was told to run.
	image string
	// took is how long helm install --wait ran; registered, until
	// cgdelegate had registered with containerd.
	took, registered time.Duration
	// args are the helm install arguments after the chart.
	args []string
}

// helmCmd runs helm on the workstation with the admin's kubeconfig and
// returns its stdout.
func helmCmd(ctx context.Context, args ...string) ([]byte, error) {
	res, err := onWorkstation(ctx, workstation.Request{Tool: "helm", Args: args})
	return res.Stdout, err
}

// configValues are the --set arguments ClusterHelmSetConfig adds to the
// release with `helm upgrade --reuse-values`, as a platform team turns on
// a feature after the install: CPU pinning with CPU 0 reserved (the
// pinning, resize and upgrade scenarios' pinned pods get another), as
// pluginConfigYAML configures the external plugin of the Cluster
// variants, a namespace allowed by name and the RuntimeClass whose
// handler makes containers writable (ClusterAdmissionPolicy), and on
// an AppArmor node cgdelegate's engine profiles (the stories' pods name
// them).
// The install itself sets nothing but the registry: the network is the
// chart's default, the pod network, the API server through the
// kubernetes Service.
func configValues(appArmor bool) []string {
	values := []string{
		"--set", "config.cpuPinning=true",
		"--set-string", "config.reservedCPUs=0",
		"--set", "admissionPolicy.allowedNamespaces={" + allowedByName + "}",
		"--set", "admissionPolicy.writableRuntimeClasses={" + writableRuntimeClass + "}",
	}
	if appArmor {
		values = append(values, "--set", "engineProfiles.seccomp=true", "--set", "engineProfiles.appArmor=true")
	}
	return values
}

// requireHelmPlugin returns cgdelegate installed with helm, installing it
// on first use, and fails the scenario if it is not running.
func (e *guestEnv) requireHelmPlugin(t *testing.T) *helmInstall {
	t.Helper()
	if e.variant.Plugin != variant.PluginHelm {
		t.Fatalf("scenario needs cgdelegate installed with helm; variant %s runs it %s", e.variant.Name, e.variant.Plugin)
	}
	e.requireCluster(t)
	if e.helm == nil && e.pluginErr == nil {
		ctx, cancel := context.WithTimeout(context.Background(), helmInstallTimeout+2*time.Minute)
		defer cancel()
		e.helm, e.pluginErr = e.installChart(ctx)
		if e.helm != nil {
			t.Logf("helm install took %s; cgdelegate registered with containerd after %s",
				e.helm.took.Round(100*time.Millisecond), e.helm.registered.Round(100*time.Millisecond))
		}
	}
	if e.pluginErr != nil {
		t.Fatalf("cgdelegate installed with helm: %v", e.pluginErr)
	}
	return e.helm
}

// installChart installs the first release from the cluster's registry
// as a user types it (helm install oci://... --version, no --set but the
// registry's image repository and helmValues), waiting (helm --wait) for
// the DaemonSet, whose image the kubelet pulls, and then for cgdelegate
// to register with containerd.
func (e *guestEnv) installChart(ctx context.Context) (*helmInstall, error) {
	if e.registry == nil {
		return nil, fmt.Errorf("variant %s has no registry to install from (%s)", e.variant.Name, variant.RegistryFile)
	}
	rel := e.registry.Releases[0]
	h := &helmInstall{image: imageRef(e.registry, rel), args: registryArgs(e.registry, rel)}
	from := fileSize(e.paths.ContainerdLog)
	start := time.Now()
	out, err := helmCmd(ctx, append([]string{"install", helmRelease, chartRef(e.registry)}, h.args...)...)
	h.took = time.Since(start)
	if err != nil {
		return nil, fmt.Errorf("%w\n%s", err, e.describeDaemonSet(ctx))
	}
	e.log.Info("helm install", "took", h.took, "command", "helm install "+helmRelease+" "+chartRef(e.registry)+" "+strings.Join(h.args, " "), "output", string(out))
	err = waitLog(ctx, e.paths.ContainerdLog, from, 3*time.Minute, pluginBack, func() error {
		if !e.kubelet.daemon.Running() {
			return errors.New("the kubelet exited")
		}
		return nil
	})
	h.registered = time.Since(start)
	if err != nil {
		return nil, fmt.Errorf("cgdelegate's pod did not register with containerd: %w\n%s\n--- containerd log ---\n%s",
			err, e.describeDaemonSet(ctx), fileTail(e.paths.ContainerdLog, 20))
	}
	return h, nil
}

// dsPods are the DaemonSet's pods.
func dsPods(ctx context.Context) ([]corev1.Pod, error) {
	var l corev1.PodList
	if err := getJSON(ctx, &l, "-n", helmNamespace, "pods", "-l", dsSelector); err != nil {
		return nil, err
	}
	return l.Items, nil
}

// describeDaemonSet is the DaemonSet's status, its pods, their logs and
// the namespace's events, for failures.
func (e *guestEnv) describeDaemonSet(ctx context.Context) string {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
	defer cancel()
	var b strings.Builder
	var ds appsv1.DaemonSet
	if err := getJSON(ctx, &ds, "-n", helmNamespace, "daemonset", helmRelease); err != nil {
		fmt.Fprintf(&b, "daemonset: %v\n", err)
	} else {
		fmt.Fprintf(&b, "daemonset: desired %d scheduled %d ready %d updated %d\n", ds.Status.DesiredNumberScheduled,
			ds.Status.CurrentNumberScheduled, ds.Status.NumberReady, ds.Status.UpdatedNumberScheduled)
	}
	pods, err := dsPods(ctx)
	if err != nil {
		fmt.Fprintf(&b, "pods: %v\n", err)
	}
	for i := range pods {
		fmt.Fprintf(&b, "pod %s: %s\n", pods[i].Name, describePod(&pods[i]))
		// As a user reads them: through the API server and the kubelet.
		logs, err := kubectl(ctx, nil, "-n", helmNamespace, "logs", pods[i].Name, "-c", dsPluginContainer, "--tail=20")
		if err != nil {
			fmt.Fprintf(&b, "--- kubectl logs %s: %v\n", pods[i].Name, err)
		}
		fmt.Fprintf(&b, "--- logs of %s ---\n%s\n", pods[i].Name, logs)
	}
	events, _ := kubectl(ctx, nil, "-n", helmNamespace, "get", "events", "--sort-by=.lastTimestamp")
	fmt.Fprintf(&b, "--- events in %s ---\n%s", helmNamespace, tail(string(events), 25))
	return b.String()
}

func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// clusterRegistryInstall: `helm install` of the chart from the registry
// places cgdelegate's DaemonSet pod on the Node through the DaemonSet
// controller and the scheduler, and it runs the image the kubelet pulled
// from the registry (the pushed digest; nothing imported); its config is the chart's ConfigMap as
// the API serves it, mounted by the kubelet; `cgdelegate status` on the
// node says supported; an annotated Deployment's pod is delegated: a
// writable cgroup2 mount with nsdelegate, and the bounds on its pod
// cgroup hold.
func clusterRegistryInstall(t *testing.T, e *guestEnv) {
	h := e.requireHelmPlugin(t)
	r := e.requireRegistry(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()

	var ds appsv1.DaemonSet
	if err := getJSON(ctx, &ds, "-n", helmNamespace, "daemonset", helmRelease); err != nil {
		t.Fatal(err)
	}
	if ds.Status.DesiredNumberScheduled != 1 || ds.Status.NumberReady != 1 {
		t.Errorf("daemonset %s: desired %d ready %d, want 1 and 1\n%s", helmRelease, ds.Status.DesiredNumberScheduled, ds.Status.NumberReady, e.describeDaemonSet(ctx))
	}
	pods, err := dsPods(ctx)
	if err != nil || len(pods) != 1 {
		t.Fatalf("the DaemonSet's pods: %d (%v), want 1\n%s", len(pods), err, e.describeDaemonSet(ctx))
	}
	p := &pods[0]
	if p.Spec.NodeName != e.nodeName() || p.Status.Phase != corev1.PodRunning || !kubelet.Running(p, dsPluginContainer) {
		t.Errorf("pod %s: %s; want Running on %s", p.Name, describePod(p), e.nodeName())
	}
	if len(p.OwnerReferences) != 1 || p.OwnerReferences[0].Kind != "DaemonSet" || p.OwnerReferences[0].Name != helmRelease {
		t.Errorf("pod %s: owners %v, want the DaemonSet %s", p.Name, p.OwnerReferences, helmRelease)
	}
	if img := p.Spec.Containers[0].Image; img != h.image {
		t.Errorf("pod %s runs image %s, want the chart's %s", p.Name, img, h.image)
	}
	assertDSRelease(ctx, t, e, r, r.Releases[0])
	assertNothingImported(ctx, t, e, r, r.Releases[0])
	// Placed by the scheduler (the DaemonSet controller only sets a node
	// affinity): its Scheduled event comes from default-scheduler.
	scheduledBy, err := kubectl(ctx, nil, "-n", helmNamespace, "get", "events", "--field-selector",
		"involvedObject.name="+p.Name+",reason=Scheduled", "-o", "jsonpath={range .items[*]}{.reportingComponent}{.source.component}{\"\\n\"}{end}")
	if err != nil || !strings.Contains(string(scheduledBy), "default-scheduler") {
		t.Errorf("pod %s: no Scheduled event from default-scheduler (%v): %q", p.Name, err, scheduledBy)
	}

	// The config is the chart's default ConfigMap as the API serves it,
	// as the kubelet projected it.
	served := assertProjectedConfig(ctx, t, e, p)
	if strings.Contains(served, "cpuPinning: true") {
		t.Errorf("configmap %s pins CPUs after an install with the chart's defaults:\n%s", helmRelease, served)
	}
	rep, raw := e.cgdelegateStatus(t)
	if !rep.Supported || (rep.Pinning != nil && rep.Pinning.Active) {
		t.Errorf("cgdelegate status on the node: supported %v, pinning %+v; want supported, pinning off (the default):\n%s", rep.Supported, rep.Pinning, raw)
	}
	if rep.PluginPID == 0 {
		t.Errorf("cgdelegate status names no plugin process:\n%s", raw)
	} else {
		assertPluginConfinement(t, rep.PluginPID, e.variant.AppArmor)
	}

	// An annotated Deployment: its pod is delegated.
	start := time.Now()
	raw2, err := clusterManifests.ReadFile("testdata/cluster/writable-deployment.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kubectl(ctx, raw2, "apply", "-f", "-"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		if _, err := kubectl(ctx, nil, "delete", "namespace", "sandbox", "--wait=false"); err != nil {
			t.Errorf("cleanup: %v", err)
		}
	})
	wp := waitDeploymentPod(ctx, t, "sandbox", "app=cluster-writable", "work", 4*time.Minute)
	running := time.Since(start)
	c := e.kubeletContainer(ctx, t, wp, "work")
	podCg := e.kubeletPodCgroup(t, e.kubelet, wp)
	assertWritableMount(ctx, t, c)
	assertDelegates(ctx, t, c)
	assertBoundsHold(ctx, t, c, podCg)
	clusterMetric(t, "ClusterRegistryInstall", "cluster_registry_install", map[string]float64{
		"helm_install_seconds": seconds(h.took), "registered_seconds": seconds(h.registered),
		"deployment_pod_running_seconds": seconds(running),
	})
}

// waitDeploymentPod waits until one pod matching selector in namespace runs
// container, and returns it.
func waitDeploymentPod(ctx context.Context, t *testing.T, namespace, selector, container string, within time.Duration) *corev1.Pod {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, within)
	defer cancel()
	var last []corev1.Pod
	err := poll(ctx, 500*time.Millisecond, func() (bool, error) {
		var l corev1.PodList
		if err := getJSON(ctx, &l, "-n", namespace, "pods", "-l", selector); err != nil {
			return false, nil
		}
		last = l.Items
		return len(l.Items) == 1 && kubelet.Running(&l.Items[0], container), nil
	})
	if err != nil {
		var desc []string
		for i := range last {
			desc = append(desc, last[i].Name+": "+describePod(&last[i]))
		}
		t.Fatalf("pods %s: not one running %s within %s (%v): %s", selector, container, within, err, strings.Join(desc, "; "))
	}
	return &last[0]
}

// The admission scenario's namespaces: allowedByName is in the install's
// admissionPolicy.allowedNamespaces (helmValues), allowedByLabel carries
// the label a cluster admin sets, and clusterNamespace is neither.
const (
	allowedByName  = "builds"
	allowedByLabel = "sandbox-admitted"
	// writablePolicy is the chart's policy on writable-cgroup pods.
	writablePolicy = "cgdelegate-writable-cgroups"
	// writableRuntimeClass is a RuntimeClass of writableHandler (the
	// node's containerd runtime with cgroup_writable = true), named in the
	// install's admissionPolicy.writableRuntimeClasses (configValues).
	writableRuntimeClass = writableHandler
)

// admissionPod is a pod in namespace, asking for a writable cgroup (with
// the required-plugins annotation the policy wants) when writable.
func admissionPod(name, namespace string, writable bool) *corev1.Pod {
	p := &corev1.Pod{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace},
		Spec: corev1.PodSpec{
			HostNetwork:                   true,
			AutomountServiceAccountToken:  ptr(false),
			TerminationGracePeriodSeconds: ptr(int64(1)),
			Containers: []corev1.Container{{
				Name: "work", Image: "cgd.local/busybox:1", ImagePullPolicy: corev1.PullNever,
				Command: []string{"sleep", "3600"},
			}},
		},
	}
	if writable {
		p.Annotations = map[string]string{
			"writable-cgroups.noderesource.dev": "true",
			"required-plugins.noderesource.dev": `["cgdelegate"]`,
		}
	}
	return p
}

// runtimeClassPod is a pod in namespace that asks for a writable cgroup by
// its RuntimeClass only: spec.runtimeClassName writableRuntimeClass, and
// the required-plugins annotation the policy wants.
func runtimeClassPod(name, namespace string) *corev1.Pod {
	p := admissionPod(name, namespace, false)
	p.Spec.RuntimeClassName = ptr(writableRuntimeClass)
	p.Annotations = map[string]string{"required-plugins.noderesource.dev": `["cgdelegate"]`}
	return p
}

func ptr[T any](v T) *T { return &v }

// applyObject applies v (as JSON) with kubectl.
func applyObject(ctx context.Context, v any) ([]byte, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	return kubectl(ctx, b, "apply", "-f", "-")
}

// clusterAdmissionPolicy: kube-apiserver accepts the chart's
// ValidatingAdmissionPolicy with no type-checking warning and enforces it:
// a pod asking for a writable cgroup is denied in a namespace neither
// labelled nor named in admissionPolicy.allowedNamespaces, with the
// policy's message; admitted and delegated in a namespace named there and
// in one labelled cgdelegate.io/writable-cgroups=allowed; a pod that asks
// for nothing is admitted in the first namespace and runs. A pod that asks
// by naming the RuntimeClass writableRuntimeClass, with no annotation but
// required-plugins, is denied in the first namespace with a message naming
// its runtimeClassName; in the labelled one it is admitted, its container
// runs on the writable handler and guard mode bounded its pod cgroup.
func clusterAdmissionPolicy(t *testing.T, e *guestEnv) {
	e.requireHelmPlugin(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()

	// The API server type-checks a policy in the background and records
	// the result in its status: every policy the chart installed.
	var vaps admissionv1.ValidatingAdmissionPolicyList
	if err := getJSON(ctx, &vaps, "validatingadmissionpolicies"); err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, v := range vaps.Items {
		if strings.HasPrefix(v.Name, "cgdelegate-") {
			names = append(names, v.Name)
		}
	}
	if !slices.Contains(names, writablePolicy) || !slices.Contains(names, "cgdelegate-node-label") {
		t.Errorf("the chart's policies: %v, want %s and cgdelegate-node-label", names, writablePolicy)
	}
	for _, name := range names {
		var vap admissionv1.ValidatingAdmissionPolicy
		if err := poll(ctx, time.Second, func() (bool, error) {
			if err := getJSON(ctx, &vap, "validatingadmissionpolicy", name); err != nil {
				return false, err
			}
			return vap.Status.ObservedGeneration == vap.Generation && vap.Status.TypeChecking != nil, nil
		}); err != nil {
			t.Fatalf("policy %s: no type-checking status: %v", name, err)
		}
		for _, w := range vap.Status.TypeChecking.ExpressionWarnings {
			t.Errorf("policy %s: type-checking warning on %s: %s", name, w.FieldRef, w.Warning)
		}
		t.Logf("policy %s: type-checked, %d warnings", name, len(vap.Status.TypeChecking.ExpressionWarnings))
	}

	for _, ns := range []*corev1.Namespace{
		{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Namespace"}, ObjectMeta: metav1.ObjectMeta{Name: allowedByName}},
		{
			TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Namespace"},
			ObjectMeta: metav1.ObjectMeta{Name: allowedByLabel, Labels: map[string]string{"cgdelegate.io/writable-cgroups": "allowed"}},
		},
	} {
		if _, err := applyObject(ctx, ns); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			if _, err := kubectl(ctx, nil, "delete", "namespace", ns.Name, "--wait=false"); err != nil {
				t.Errorf("cleanup: %v", err)
			}
		})
	}

	// The RuntimeClass of the node's writable handler, as a cluster admin
	// makes it (cluster-scoped: no tenant can).
	rc := map[string]any{
		"apiVersion": "node.k8s.io/v1", "kind": "RuntimeClass",
		"metadata": map[string]any{"name": writableRuntimeClass}, "handler": writableHandler,
	}
	if _, err := applyObject(ctx, rc); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if _, err := kubectl(ctx, nil, "delete", "runtimeclass", writableRuntimeClass, "--wait=false"); err != nil {
			t.Errorf("cleanup: %v", err)
		}
	})
	classDenied := runtimeClassPod("class-denied", clusterNamespace)
	if out, err := applyObject(ctx, classDenied); err == nil {
		t.Errorf("pod %s/%s naming runtime class %s was admitted: %s", classDenied.Namespace, classDenied.Name, writableRuntimeClass, out)
		_, _ = kubectl(ctx, nil, "-n", classDenied.Namespace, "delete", "pod", classDenied.Name, "--wait=false")
	} else {
		for _, want := range []string{
			writablePolicy, "runtimeClassName " + writableRuntimeClass + " asks for a writable cgroup",
			"namespace " + clusterNamespace + " is not labelled", "or use another runtime class",
		} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("the denial lacks %q: %v", want, err)
			}
		}
		t.Logf("runtime class %s denied in %s as expected: %v", writableRuntimeClass, clusterNamespace, err)
	}

	denied := admissionPod("writable-denied", clusterNamespace, true)
	start := time.Now()
	out, err := applyObject(ctx, denied)
	deniedAfter := time.Since(start)
	if err == nil {
		t.Errorf("pod %s/%s asking for a writable cgroup was admitted: %s", denied.Namespace, denied.Name, out)
		_, _ = kubectl(ctx, nil, "-n", denied.Namespace, "delete", "pod", denied.Name, "--wait=false")
	} else {
		for _, want := range []string{writablePolicy, "is not labelled cgdelegate.io/writable-cgroups=allowed", "namespace " + clusterNamespace} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("the denial lacks %q: %v", want, err)
			}
		}
		t.Logf("denied in %s as expected: %v", clusterNamespace, err)
	}

	plain := admissionPod("plain-admitted", clusterNamespace, false)
	byClass := runtimeClassPod("writable-by-class", allowedByLabel)
	pods := []*corev1.Pod{plain, admissionPod("writable-by-name", allowedByName, true), admissionPod("writable-by-label", allowedByLabel, true), byClass}
	for _, p := range pods {
		if _, err := applyObject(ctx, p); err != nil {
			t.Fatalf("pod %s/%s: %v", p.Namespace, p.Name, err)
		}
	}
	t.Cleanup(func() { deletePods(t, clusterNamespace, plain.Name) })
	for _, want := range pods {
		p := waitNamespacedPod(ctx, t, want.Namespace, want.Name, "work", 4*time.Minute)
		c := e.kubeletContainer(ctx, t, p, "work")
		switch {
		case want.Annotations == nil:
			if m, _ := cgroupMount(ctx, t, c); !m.ReadOnly() {
				t.Errorf("pod %s/%s asked for nothing but has /sys/fs/cgroup = %s, want read-only", want.Namespace, want.Name, m)
			}
		case want.Spec.RuntimeClassName != nil:
			// Writable by the runtime itself: guard mode bounded the pod
			// cgroup (the kubelet leaves both files at max).
			assertWritableMount(ctx, t, c)
			podCg := e.kubeletPodCgroup(t, e.kubelet, p)
			for _, f := range []string{"cgroup.max.descendants", "cgroup.max.depth"} {
				if v, err := strconv.Atoi(readCgroupFile(t, podCg, f)); err != nil || v > 250 {
					t.Errorf("pod %s/%s (runtime class %s): %s/%s = %q, want the guard's bound (at most 250)",
						want.Namespace, want.Name, writableRuntimeClass, podCg, f, readCgroupFile(t, podCg, f))
				}
			}
		default:
			assertWritableMount(ctx, t, c)
			assertDelegates(ctx, t, c)
		}
	}
	admissionUpdates(ctx, t)
	clusterMetric(t, "ClusterAdmissionPolicy", "cluster_admission", map[string]float64{"denied_seconds": seconds(deniedAfter)})
}

// admissionUpdates plays, against the real API server, the updates of a
// pod that has not started yet: the kubelet hands the runtime the pod's
// annotations as they are when it creates the sandbox, so an annotation
// added to a Pending pod is one the runtime reads. In a namespace not
// allowed, a pod that asked for nothing, held Pending by a node selector
// that matches no node and by a scheduling gate, is annotated with each
// form of the opt-in key: each refused with the policy's message. In an
// allowed namespace, a gated pod that asks loses required-plugins or
// gains tolerate-missing-plugins: refused. Other annotations and labels
// are admitted.
func admissionUpdates(ctx context.Context, t *testing.T) {
	t.Helper()
	pending := admissionPod("pending-plain", clusterNamespace, false)
	pending.Spec.NodeSelector = map[string]string{"cgdelegate.io/no-such-node": "true"}
	gated := admissionPod("gated-plain", clusterNamespace, false)
	gated.Spec.SchedulingGates = []corev1.PodSchedulingGate{{Name: "cgdelegate.io/held"}}
	gatedAsking := admissionPod("gated-asking", allowedByLabel, true)
	gatedAsking.Spec.SchedulingGates = gated.Spec.SchedulingGates
	for _, p := range []*corev1.Pod{pending, gated, gatedAsking} {
		if _, err := applyObject(ctx, p); err != nil {
			t.Fatalf("pod %s/%s: %v", p.Namespace, p.Name, err)
		}
	}
	t.Cleanup(func() {
		deletePods(t, clusterNamespace, pending.Name, gated.Name)
		deletePods(t, allowedByLabel, gatedAsking.Name)
	})

	const changed = "was added, changed or removed on a pod that asks for a writable cgroup"
	type step struct {
		what string
		args []string
		// want is the refusal's substring; "": admitted.
		want string
	}
	var steps []step
	for _, p := range []*corev1.Pod{pending, gated} {
		on := []string{"-n", p.Namespace, "annotate", "pod", p.Name}
		for _, key := range []string{
			"writable-cgroups.noderesource.dev=Writable",
			"writable-cgroups.noderesource.dev/container.work=true",
			"cgroup2-mount-hierarchy-rw.crio.io=true",
			"writable-cgroups.nri.io/enable=true",
		} {
			steps = append(steps, step{p.Name + ": " + key, append(slices.Clone(on), key), changed})
		}
		steps = append(steps,
			step{p.Name + ": another annotation", append(slices.Clone(on), "example.com/note=kept"), ""},
			step{p.Name + ": a label", []string{"-n", p.Namespace, "label", "pod", p.Name, "example.com/team=a"}, ""},
		)
	}
	on := []string{"-n", gatedAsking.Namespace, "annotate", "pod", gatedAsking.Name}
	steps = append(steps,
		step{gatedAsking.Name + ": required-plugins removed", append(slices.Clone(on), "required-plugins.noderesource.dev-"), changed},
		step{gatedAsking.Name + ": required-plugins without cgdelegate", append(slices.Clone(on), `required-plugins.noderesource.dev=["other"]`, "--overwrite"), changed},
		step{gatedAsking.Name + ": tolerate-missing-plugins", append(slices.Clone(on), "tolerate-missing-plugins.cgdelegate.io=true"), changed},
		step{gatedAsking.Name + ": another annotation", append(slices.Clone(on), "example.com/note=kept"), ""},
	)
	for i, s := range steps {
		out, err := annotateOrLabel(ctx, i == 0, s.args)
		switch {
		case s.want == "" && err != nil:
			t.Errorf("%s: refused, want admitted: %v", s.what, err)
		case s.want == "":
			t.Logf("%s: admitted", s.what)
		case err == nil:
			t.Errorf("%s: admitted, want refused by %s: %s", s.what, writablePolicy, out)
		case !strings.Contains(err.Error(), writablePolicy) || !strings.Contains(err.Error(), s.want):
			t.Errorf("%s: refused, but not by %s with %q: %v", s.what, writablePolicy, s.want, err)
		default:
			t.Logf("%s: refused: %v", s.what, err)
		}
	}
	// The refused updates left the pods as they were.
	for _, want := range []*corev1.Pod{pending, gated, gatedAsking} {
		p := &corev1.Pod{}
		if err := getJSON(ctx, p, "-n", want.Namespace, "pod", want.Name); err != nil {
			t.Errorf("pod %s/%s: %v", want.Namespace, want.Name, err)
			continue
		}
		for k, v := range p.Annotations {
			if k != "example.com/note" && k != "kubectl.kubernetes.io/last-applied-configuration" && want.Annotations[k] != v {
				t.Errorf("pod %s/%s: annotation %s=%q, want %q", want.Namespace, want.Name, k, v, want.Annotations[k])
			}
		}
		for k, v := range want.Annotations {
			if p.Annotations[k] != v {
				t.Errorf("pod %s/%s: annotation %s=%q, want %q", want.Namespace, want.Name, k, p.Annotations[k], v)
			}
		}
	}
}

// annotateOrLabel runs `kubectl [-n ns] annotate|label pod name k=v|k-
// [--overwrite]` (args without "kubectl"): with kubectl when typed is
// true, as a user would, else as the JSON merge patch kubectl sends, from
// the scenario's own API client (a kubectl run costs seconds under TCG).
func annotateOrLabel(ctx context.Context, typed bool, args []string) ([]byte, error) {
	if typed {
		return kubectl(ctx, nil, args...)
	}
	var ns, verb, name string
	set := map[string]any{}
	for i := 0; i < len(args); i++ {
		switch a := args[i]; {
		case a == "-n" && i+1 < len(args):
			ns = args[i+1]
			i++
		case a == "--overwrite":
		case verb == "" && (a == "annotate" || a == "label"):
			verb = a
		case verb != "" && name == "" && a == "pod":
		case verb != "" && name == "":
			name = a
		case strings.HasSuffix(a, "-") && !strings.Contains(a, "="):
			set[strings.TrimSuffix(a, "-")] = nil
		case strings.Contains(a, "="):
			k, v, _ := strings.Cut(a, "=")
			set[k] = v
		default:
			return nil, fmt.Errorf("annotateOrLabel: argument %q not understood in %q", a, args)
		}
	}
	path, ok := apiPath([]string{"-n", ns, "pod", name})
	if !ok || name == "" || verb == "" || len(set) == 0 {
		return nil, fmt.Errorf("annotateOrLabel: %q is not kubectl -n <ns> annotate|label pod <name> k=v...", args)
	}
	field := map[string]string{"annotate": "annotations", "label": "labels"}[verb]
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{field: set}})
	if err != nil {
		return nil, err
	}
	a, err := theAPI()
	if err != nil {
		return nil, err
	}
	return nil, a.mergePatch(ctx, path, patch)
}

// waitNamespacedPod waits until pod namespace/name runs container.
func waitNamespacedPod(ctx context.Context, t *testing.T, namespace, name, container string, within time.Duration) *corev1.Pod {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, within)
	defer cancel()
	var last *corev1.Pod
	err := poll(ctx, 500*time.Millisecond, func() (bool, error) {
		p := &corev1.Pod{}
		if err := getJSON(ctx, p, "-n", namespace, "pod", name); err != nil {
			return false, nil
		}
		last = p
		return kubelet.Running(p, container), nil
	})
	if err != nil {
		t.Fatalf("pod %s/%s: not running %s within %s (%v): %s", namespace, name, container, within, err, describePod(last))
	}
	return last
}

// dsLogs is what cgdelegate's containers of the DaemonSet's pods logged
// at or after since, read from the kubelet's log files on the node: the
// scenarios' check for failed updates must also read the pods a rollout
// has already replaced, which `kubectl logs` no longer serves (the
// diagnostics use kubectl logs).
func dsLogs(since time.Time) (string, error) {
	files, err := filepath.Glob(filepath.Join(podLogDir, helmNamespace+"_"+helmRelease+"-*", dsPluginContainer, "*.log"))
	if err != nil {
		return "", fmt.Errorf("log files of %s/%s: %w", helmNamespace, helmRelease, err)
	}
	if len(files) == 0 {
		return "", fmt.Errorf("no log files of %s/%s under %s", helmNamespace, helmRelease, podLogDir)
	}
	var b strings.Builder
	for _, f := range files {
		raw, err := os.ReadFile(f)
		if err != nil {
			return "", err
		}
		// CRI log lines: <RFC 3339 time> <stream> <P|F> <message>.
		for _, l := range strings.Split(string(raw), "\n") {
			fields := strings.SplitN(l, " ", 4)
			if len(fields) < 4 {
				continue
			}
			at, err := time.Parse(time.RFC3339Nano, fields[0])
			if err != nil || at.Before(since) {
				continue
			}
			b.WriteString(fields[3] + "\n")
		}
	}
	return b.String(), nil
}

// assertProjectedConfig checks that the plugin pod p reads the chart's
// ConfigMap as the API serves it (the kubelet's projected copy) and
// returns its config.yaml.
func assertProjectedConfig(ctx context.Context, t *testing.T, e *guestEnv, p *corev1.Pod) string {
	t.Helper()
	var cm corev1.ConfigMap
	if err := getJSON(ctx, &cm, "-n", helmNamespace, "configmap", helmRelease); err != nil {
		t.Fatal(err)
	}
	served := cm.Data["config.yaml"]
	projected := filepath.Join(e.paths.KubeletRoot, "pods", string(p.UID), "volumes", "kubernetes.io~configmap", "config", "config.yaml")
	if b, err := os.ReadFile(projected); err != nil || string(b) != served {
		t.Errorf("the kubelet's copy %s of the ConfigMap (%v):\n%s\nwant what the API serves:\n%s", projected, err, b, served)
	}
	return served
}

// clusterHelmSetConfig: a platform team turns on CPU pinning and allows a
// namespace by name after the install, with `helm upgrade --reuse-values
// --set ...` of the same chart version. The config's checksum in the pod
// template rolls the DaemonSet's pod (a new pod, same image), which
// reads the new ConfigMap; the registry value set at the install is kept;
// `cgdelegate status` says pinning is active.
func clusterHelmSetConfig(t *testing.T, e *guestEnv) {
	e.requireHelmPlugin(t)
	r := e.requireRegistry(t)
	rel := r.Releases[0]
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	t.Cleanup(e.pluginLogFrom(t))

	before, err := dsPods(ctx)
	if err != nil || len(before) != 1 {
		t.Fatalf("the DaemonSet's pods: %d (%v), want 1\n%s", len(before), err, e.describeDaemonSet(ctx))
	}
	from := fileSize(e.paths.ContainerdLog)
	start := time.Now()
	if _, err := helmCmd(ctx, append([]string{"upgrade", helmRelease, chartRef(r)}, upgradeArgs(rel, configValues(e.variant.AppArmor)...)...)...); err != nil {
		t.Fatalf("%v\n%s", err, e.describeDaemonSet(ctx))
	}
	took := time.Since(start)
	if err := waitLog(ctx, e.paths.ContainerdLog, from, 3*time.Minute, pluginBack, func() error { return nil }); err != nil {
		t.Errorf("the plugin with the new config never connected: %v\n%s", err, e.describeDaemonSet(ctx))
	}
	registered := time.Since(start)
	after, err := dsPods(ctx)
	if err != nil || len(after) != 1 {
		t.Fatalf("the DaemonSet's pods after the upgrade: %d (%v), want 1\n%s", len(after), err, e.describeDaemonSet(ctx))
	}
	if after[0].UID == before[0].UID {
		t.Errorf("pod %s kept running across a config change: the checksum annotation did not roll it", after[0].Name)
	}
	assertDSRelease(ctx, t, e, r, rel)
	served := assertProjectedConfig(ctx, t, e, &after[0])
	for _, want := range []string{"cpuPinning: true", `reservedCPUs: "0"`} {
		if !strings.Contains(served, want) {
			t.Errorf("configmap %s: config.yaml lacks %q (the --set values):\n%s", helmRelease, want, served)
		}
	}
	if e.variant.AppArmor {
		assertEngineProfilesInstalled(t)
	}
	if rep, raw := e.cgdelegateStatus(t); !rep.Supported || rep.Pinning == nil || !rep.Pinning.Active {
		t.Errorf("cgdelegate status on the node: supported %v, pinning %+v; want supported with pinning active:\n%s", rep.Supported, rep.Pinning, raw)
	}
	clusterMetric(t, "ClusterHelmSetConfig", "cluster_helm_set_config", map[string]float64{
		"upgrade_seconds": seconds(took), "registered_seconds": seconds(registered),
	})
	clusterMetric(t, "ClusterHelmSetConfig", "plugin_pod_start", podStartSeconds(&after[0]))
}

// podStartSeconds is where a pod's start went, from its status (to the
// second, as the API gives times): each init container's run, and the
// time from the pod's creation to its first container's start.
func podStartSeconds(p *corev1.Pod) map[string]float64 {
	out := map[string]float64{}
	for _, st := range p.Status.InitContainerStatuses {
		if term := st.State.Terminated; term != nil {
			out["init_"+st.Name+"_seconds"] = term.FinishedAt.Sub(term.StartedAt.Time).Seconds()
		}
	}
	for _, st := range p.Status.ContainerStatuses {
		if run := st.State.Running; run != nil {
			out["created_to_"+st.Name+"_running_seconds"] = run.StartedAt.Sub(p.CreationTimestamp.Time).Seconds()
		}
	}
	return out
}
