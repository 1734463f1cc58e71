package manifests_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	sigsyaml "sigs.k8s.io/yaml"

	"github.com/cgdelegate/cgdelegate/integration/internal/manifests"
)

const (
	uninstallFile       = "node-label-uninstall.yaml"
	uninstallPolicyFile = "node-label-uninstall-policy.yaml"
	uninstallAccount    = "cgdelegate-uninstall"
	// helmHookTimeout is helm uninstall's default --timeout, which bounds
	// each hook.
	helmHookTimeout = 5 * time.Minute
)

// uninstallHooks are the objects of the uninstall template, decoded
// strictly.
type uninstallHooks struct {
	sa      corev1.ServiceAccount
	role    rbacv1.ClusterRole
	binding rbacv1.ClusterRoleBinding
	job     batchv1.Job
}

func (h *uninstallHooks) metas() []*metav1.ObjectMeta {
	return []*metav1.ObjectMeta{&h.sa.ObjectMeta, &h.role.ObjectMeta, &h.binding.ObjectMeta, &h.job.ObjectMeta}
}

// renderUninstall renders the chart with args and decodes its uninstall
// hooks: a ServiceAccount, a ClusterRole, a ClusterRoleBinding and a Job,
// in that order.
func renderUninstall(t *testing.T, args ...string) *uninstallHooks {
	t.Helper()
	files, err := manifests.Template(context.Background(), root, args...)
	if err != nil {
		t.Fatal(err)
	}
	data, ok := files[uninstallFile]
	if !ok {
		t.Fatalf("%v renders no %s", args, uninstallFile)
	}
	docs := strings.Split(string(data), "\n---\n")
	h := &uninstallHooks{}
	objs := []any{&h.sa, &h.role, &h.binding, &h.job}
	if len(docs) != len(objs) {
		t.Fatalf("%s: %d documents, want %d", uninstallFile, len(docs), len(objs))
	}
	for i, doc := range docs {
		if err := sigsyaml.UnmarshalStrict([]byte(doc), objs[i]); err != nil {
			t.Fatalf("%s document %d: %v", uninstallFile, i, err)
		}
	}
	return h
}

// hookWeight is a hook's helm.sh/hook-weight.
func hookWeight(t *testing.T, m *metav1.ObjectMeta) int {
	t.Helper()
	w, err := strconv.Atoi(m.Annotations["helm.sh/hook-weight"])
	if err != nil {
		t.Fatalf("%s: helm.sh/hook-weight: %v", m.Name, err)
	}
	return w
}

// The default values render the pre-delete Job and its account and RBAC,
// all hooks: created before anything is deleted, the RBAC before the Job,
// replaced when left from an earlier try, deleted once they succeeded.
func TestChartUninstallHooks(t *testing.T) {
	needGo(t)
	h := renderUninstall(t)
	for _, m := range h.metas() {
		want := map[string]string{
			"helm.sh/hook":               "pre-delete",
			"helm.sh/hook-delete-policy": "before-hook-creation,hook-succeeded",
		}
		for k, v := range want {
			if m.Annotations[k] != v {
				t.Errorf("%s: %s %q, want %q", m.Name, k, m.Annotations[k], v)
			}
		}
	}
	if p := h.job.Annotations["helm.sh/hook-output-log-policy"]; p != "hook-failed" {
		t.Errorf("Job: helm.sh/hook-output-log-policy %q, want hook-failed (helm prints the log of a failed Job)", p)
	}
	jobWeight := hookWeight(t, &h.job.ObjectMeta)
	for _, m := range h.metas()[:3] {
		if w := hookWeight(t, m); w >= jobWeight {
			t.Errorf("%s: hook weight %d, want less than the Job's %d (created before it)", m.Name, w, jobWeight)
		}
	}

	// The account may list and patch nodes, and nothing else.
	if h.sa.Name != uninstallAccount || h.sa.Namespace != manifests.Namespace {
		t.Errorf("ServiceAccount %s/%s, want %s/%s", h.sa.Namespace, h.sa.Name, manifests.Namespace, uninstallAccount)
	}
	if r := h.role.Rules; len(r) != 1 || !slices.Equal(r[0].APIGroups, []string{""}) || !slices.Equal(r[0].Resources, []string{"nodes"}) ||
		!slices.Equal(r[0].Verbs, []string{"list", "patch"}) || len(r[0].ResourceNames) != 0 {
		t.Errorf("ClusterRole rules %+v, want list and patch on nodes only", r)
	}
	b := h.binding
	if b.RoleRef.Kind != "ClusterRole" || b.RoleRef.Name != h.role.Name || len(b.Subjects) != 1 ||
		b.Subjects[0].Kind != "ServiceAccount" || b.Subjects[0].Name != uninstallAccount || b.Subjects[0].Namespace != manifests.Namespace {
		t.Errorf("ClusterRoleBinding %+v, want %s bound to the account", b, h.role.Name)
	}

	// The Job: bounded, anywhere, as the account, with the DaemonSet's
	// image and least privilege.
	job := h.job
	if job.Namespace != manifests.Namespace {
		t.Errorf("Job namespace %q", job.Namespace)
	}
	backoff := int32(6)
	if job.Spec.BackoffLimit != nil {
		backoff = *job.Spec.BackoffLimit
	}
	if backoff > 2 {
		t.Errorf("backoffLimit %d, want at most 2", backoff)
	}
	deadline := time.Duration(0)
	if d := job.Spec.ActiveDeadlineSeconds; d != nil {
		deadline = time.Duration(*d) * time.Second
	}
	if deadline <= 0 || deadline >= helmHookTimeout {
		t.Errorf("activeDeadlineSeconds %v, want set and below helm's hook timeout %v", deadline, helmHookTimeout)
	}
	spec := job.Spec.Template.Spec
	if spec.ServiceAccountName != uninstallAccount || spec.AutomountServiceAccountToken == nil || !*spec.AutomountServiceAccountToken {
		t.Errorf("serviceAccountName %q, automount %v: want %s with its token", spec.ServiceAccountName, spec.AutomountServiceAccountToken, uninstallAccount)
	}
	if spec.RestartPolicy != corev1.RestartPolicyNever {
		t.Errorf("restartPolicy %q, want Never", spec.RestartPolicy)
	}
	if !slices.ContainsFunc(spec.Tolerations, func(tol corev1.Toleration) bool { return tol.Operator == corev1.TolerationOpExists && tol.Key == "" }) {
		t.Errorf("tolerations %+v, want one that tolerates every taint", spec.Tolerations)
	}
	if spec.PriorityClassName != "system-node-critical" {
		t.Errorf("priorityClassName %q, want the values' system-node-critical", spec.PriorityClassName)
	}
	if spec.HostPID || spec.HostNetwork || spec.HostIPC || len(spec.Volumes) != 0 {
		t.Errorf("the Job's pod uses the host or volumes: %+v", spec)
	}
	if sc := spec.SecurityContext; sc == nil || sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot || sc.RunAsUser == nil || *sc.RunAsUser == 0 {
		t.Errorf("pod securityContext %+v, want a non-root user", sc)
	}
	if len(spec.Containers) != 1 || len(spec.InitContainers) != 0 {
		t.Fatalf("%d containers and %d init containers, want one container", len(spec.Containers), len(spec.InitContainers))
	}
	c := spec.Containers[0]
	ds := render[appsv1.DaemonSet](t, "daemonset.yaml")
	plugin := ds.Spec.Template.Spec.Containers[0]
	if c.Image != plugin.Image || c.ImagePullPolicy != plugin.ImagePullPolicy {
		t.Errorf("image %s (%s), want the DaemonSet's %s (%s)", c.Image, c.ImagePullPolicy, plugin.Image, plugin.ImagePullPolicy)
	}
	if len(c.Command) != 0 || len(c.Args) < 2 || c.Args[0] != "node-label" || c.Args[1] != "withdraw" {
		t.Errorf("command %q args %q, want the image's cgdelegate with node-label withdraw", c.Command, c.Args)
	}
	// Every try ends by itself (-timeout) before the Job's deadline.
	i := slices.Index(c.Args, "-timeout")
	if i < 0 || i+1 >= len(c.Args) {
		t.Fatalf("args %q: no -timeout", c.Args)
	}
	timeout, err := time.ParseDuration(c.Args[i+1])
	if err != nil || timeout <= 0 || time.Duration(backoff+1)*timeout >= deadline {
		t.Errorf("-timeout %q: want %d tries of it to end before activeDeadlineSeconds %v", c.Args[i+1], backoff+1, deadline)
	}
	sc := c.SecurityContext
	if sc == nil || sc.Privileged == nil || *sc.Privileged || sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation ||
		sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem || sc.Capabilities == nil ||
		!slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) || len(sc.Capabilities.Add) != 0 ||
		sc.SeccompProfile == nil || sc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
		t.Errorf("container securityContext %+v, want the DaemonSet's least privilege", sc)
	}
	if c.Resources.Requests.Memory().IsZero() || c.Resources.Limits.Memory().IsZero() {
		t.Errorf("resources %+v, want a memory request and limit", c.Resources)
	}
	// The DaemonSet does not adopt the Job's pod, nor does a Service
	// selecting the plugin's pods pick it.
	sel, err := metav1.LabelSelectorAsSelector(ds.Spec.Selector)
	if err != nil {
		t.Fatal(err)
	}
	if sel.Matches(labels.Set(job.Spec.Template.Labels)) {
		t.Errorf("the DaemonSet's selector %v selects the Job's pod labels %v", sel, job.Spec.Template.Labels)
	}
}

// The Job follows the values it shares with the DaemonSet.
func TestChartUninstallHookValues(t *testing.T) {
	needGo(t)
	h := renderUninstall(t, "--set", "priorityClassName=", "--set", "image.repository=registry.example/cgd", "--set", "image.tag=v1",
		"--set", "image.pullPolicy=Always", "--set", "resources.uninstall.limits.memory=100Mi")
	spec := h.job.Spec.Template.Spec
	if spec.PriorityClassName != "" {
		t.Errorf("priorityClassName %q, want none", spec.PriorityClassName)
	}
	c := spec.Containers[0]
	if c.Image != "registry.example/cgd:v1" || c.ImagePullPolicy != corev1.PullAlways {
		t.Errorf("image %s (%s)", c.Image, c.ImagePullPolicy)
	}
	if m := c.Resources.Limits.Memory().String(); m != "100Mi" {
		t.Errorf("memory limit %s, want 100Mi", m)
	}
}

// The uninstall policy matches the Job's account, in the release's
// namespace.
func TestChartUninstallPolicyNamesTheJobsAccount(t *testing.T) {
	needGo(t)
	h := renderUninstall(t)
	files, err := manifests.Template(context.Background(), root)
	if err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprintf("'system:serviceaccount:%s:%s'", h.sa.Namespace, h.job.Spec.Template.Spec.ServiceAccountName)
	if !strings.Contains(string(files[uninstallPolicyFile]), "request.userInfo.username == "+want) {
		t.Errorf("%s does not match user %s:\n%s", uninstallPolicyFile, want, files[uninstallPolicyFile])
	}
	if strings.Contains(string(files[uninstallPolicyFile]), "helm.sh/hook") {
		t.Errorf("%s is a hook; it must be in place before the Job runs", uninstallPolicyFile)
	}
}

// The Job's arguments are a command line the image's cgdelegate accepts:
// run outside a pod it gets past its flags and stops at the missing API
// (exit 1), not at a usage error (exit 2).
func TestChartUninstallJobArgs(t *testing.T) {
	needGo(t)
	h := renderUninstall(t)
	bin := filepath.Join(t.TempDir(), "cgdelegate")
	build := exec.Command("go", "build", "-o", bin, "./cmd/cgdelegate")
	build.Dir = root
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	args := h.job.Spec.Template.Spec.Containers[0].Args
	cmd := exec.Command(bin, append(slices.Clone(args), "-service-account-dir", t.TempDir())...)
	cmd.Env = []string{"PATH=" + os.Getenv("PATH")}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	err := cmd.Run()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 1 || !strings.Contains(stderr.String(), "cannot withdraw the node label") ||
		!strings.Contains(stderr.String(), "KUBERNETES_SERVICE_HOST is not set") {
		t.Fatalf("cgdelegate %q outside a pod: %v, want exit 1 at the missing API; stderr:\n%s", args, err, stderr.String())
	}
}
