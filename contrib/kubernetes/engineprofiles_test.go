package kubernetes_test

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// engineProfilesPolicyFile is the chart's template of the policy that
// keeps the engine profiles to user namespaces; the defaults do not render
// it, so the test renders it with go tool helm.
const engineProfilesPolicyFile = "engine-profiles-policy.yaml"

// renderTemplate renders one chart template with helm's value flags
// (--set k=v, --set-json k=json) into a temp file and returns its path.
func renderTemplate(t *testing.T, template string, values ...string) string {
	t.Helper()
	if _, err := exec.LookPath("go"); err != nil {
		t.Skipf("no go on PATH to run go tool helm: %v", err)
	}
	args := []string{"tool", "helm", "template", "cgdelegate", "../helm/cgdelegate", "--namespace", "kube-system", "--show-only", "templates/" + template}
	args = append(args, values...)
	cmd := exec.Command("go", args...)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0") // helm's one build (Makefile, chart)
	out, err := cmd.Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			t.Fatalf("%s: %v\n%s", cmd, err, ee.Stderr)
		}
		t.Fatalf("%s: %v", cmd, err)
	}
	file := filepath.Join(t.TempDir(), template)
	if err := os.WriteFile(file, out, 0o600); err != nil {
		t.Fatal(err)
	}
	return file
}

// enginePod is a pod with one container, app, changed by edit.
func enginePod(t *testing.T, hostUsers *bool, edit func(*corev1.Pod)) map[string]any {
	t.Helper()
	p := corev1.Pod{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "team"},
		Spec: corev1.PodSpec{
			HostUsers:  hostUsers,
			Containers: []corev1.Container{{Name: "app", Image: "docker:dind"}},
		},
	}
	if edit != nil {
		edit(&p)
	}
	return asMap(t, p)
}

func appArmor(name string) *corev1.AppArmorProfile {
	return &corev1.AppArmorProfile{Type: corev1.AppArmorProfileTypeLocalhost, LocalhostProfile: &name}
}

func seccomp(name string) *corev1.SeccompProfile {
	return &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeLocalhost, LocalhostProfile: &name}
}

// onApp sets the app container's securityContext.
func onApp(sc corev1.SecurityContext) func(*corev1.Pod) {
	return func(p *corev1.Pod) { p.Spec.Containers[0].SecurityContext = &sc }
}

// withDebug adds the ephemeral container debug with securityContext sc.
func withDebug(sc corev1.SecurityContext) func(*corev1.Pod) {
	return func(p *corev1.Pod) {
		p.Spec.EphemeralContainers = append(p.Spec.EphemeralContainers, corev1.EphemeralContainer{
			EphemeralContainerCommon: corev1.EphemeralContainerCommon{Name: "debug", Image: "busybox", SecurityContext: &sc},
		})
	}
}

// The policy is bound with Deny, fails closed, and judges pods and their
// ephemeral containers on CREATE and UPDATE; it is rendered when either
// engine profile is installed and the admission policies are on.
func TestEngineProfilesPolicyManifest(t *testing.T) {
	m := loadManifest(t, renderTemplate(t, engineProfilesPolicyFile, "--set", "engineProfiles.appArmor=true"))
	if len(m.policies) != 1 || len(m.bindings) != 1 {
		t.Fatalf("%d policies and %d bindings, want one each", len(m.policies), len(m.bindings))
	}
	p, b := m.policies[0], m.bindings[0]
	if p.Spec.FailurePolicy == nil || *p.Spec.FailurePolicy != admissionv1.Fail || p.Spec.ParamKind != nil {
		t.Errorf("policy %s: failurePolicy %v paramKind %v, want Fail and none", p.Name, p.Spec.FailurePolicy, p.Spec.ParamKind)
	}
	rules := p.Spec.MatchConstraints.ResourceRules
	if len(rules) != 1 || !slices.Equal(rules[0].Resources, []string{"pods", "pods/ephemeralcontainers"}) ||
		!slices.Equal(rules[0].Operations, []admissionv1.OperationType{admissionv1.Create, admissionv1.Update}) {
		t.Errorf("policy %s: rules %+v, want pods and pods/ephemeralcontainers on CREATE and UPDATE", p.Name, rules)
	}
	if b.Spec.PolicyName != p.Name || !slices.Equal(b.Spec.ValidationActions, []admissionv1.ValidationAction{admissionv1.Deny}) ||
		b.Spec.ParamRef != nil || b.Spec.MatchResources != nil {
		t.Errorf("binding %+v, want %s with [Deny] for all namespaces", b.Spec, p.Name)
	}
	for _, set := range [][]string{
		{"--set", "engineProfiles.seccomp=true"},
		{"--set", "engineProfiles.seccomp=true", "--set", "engineProfiles.appArmor=true"},
	} {
		if m := loadManifest(t, renderTemplate(t, engineProfilesPolicyFile, set...)); len(m.policies) != 1 {
			t.Errorf("%v: %d policies, want one", set, len(m.policies))
		}
	}
}

// A pod that uses an engine profile anywhere (the pod's securityContext, a
// container, an init or ephemeral container, the deprecated AppArmor
// annotation) is admitted only with spec.hostUsers: false; any other pod
// is admitted. An update is refused only when it adds a use.
func TestEngineProfilesPolicy(t *testing.T) {
	m := loadManifest(t, renderTemplate(t, engineProfilesPolicyFile, "--set", "engineProfiles.seccomp=true", "--set", "engineProfiles.appArmor=true"))
	if len(m.policies) != 1 {
		t.Fatalf("%d policies, want one", len(m.policies))
	}
	p := compilePolicy(t, m.policies[0], true)
	const userns = "which allows mounts and is allowed only in a user namespace: set spec.hostUsers: false"
	tr, fa := true, false
	engines, enginesJSON := "cgdelegate-engines", "cgdelegate/engines.json"
	tests := []struct {
		name string
		edit func(*corev1.Pod)
		// want is the denial's start for a pod with host users (unset
		// and true); "" admits it. A pod with hostUsers: false is always
		// admitted.
		want string
	}{
		{name: "plain pod"},
		{name: "RuntimeDefault", edit: onApp(corev1.SecurityContext{
			SeccompProfile:  &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
			AppArmorProfile: &corev1.AppArmorProfile{Type: corev1.AppArmorProfileTypeRuntimeDefault},
		})},
		{name: "Unconfined is not this policy's business", edit: onApp(corev1.SecurityContext{
			SeccompProfile:  &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeUnconfined},
			AppArmorProfile: &corev1.AppArmorProfile{Type: corev1.AppArmorProfileTypeUnconfined},
		})},
		{name: "another Localhost AppArmor profile", edit: onApp(corev1.SecurityContext{AppArmorProfile: appArmor("cgdelegate-engines-2")})},
		{name: "another Localhost seccomp profile", edit: onApp(corev1.SecurityContext{SeccompProfile: seccomp("other/engines.json")})},
		{name: "a seccomp file beside ours", edit: onApp(corev1.SecurityContext{SeccompProfile: seccomp("cgdelegate/engines.json.old")})},
		{name: "a seccomp directory like ours", edit: onApp(corev1.SecurityContext{SeccompProfile: seccomp("xcgdelegate/engines.json")})},
		{name: "container AppArmor", edit: onApp(corev1.SecurityContext{AppArmorProfile: appArmor(engines)}), want: "container app uses an engine profile (AppArmor cgdelegate-engines or seccomp cgdelegate/engines.json), " + userns},
		{name: "container seccomp", edit: onApp(corev1.SecurityContext{SeccompProfile: seccomp(enginesJSON)}), want: "container app uses"},
		{name: "container seccomp, ./ and //", edit: onApp(corev1.SecurityContext{SeccompProfile: seccomp("./cgdelegate//engines.json")}), want: "container app uses"},
		{name: "container seccomp, /./", edit: onApp(corev1.SecurityContext{SeccompProfile: seccomp("cgdelegate/./engines.json")}), want: "container app uses"},
		{
			name: "pod-level seccomp",
			edit: func(p *corev1.Pod) {
				p.Spec.SecurityContext = &corev1.PodSecurityContext{SeccompProfile: seccomp(enginesJSON)}
			},
			want: "the pod securityContext uses",
		},
		{
			name: "pod-level AppArmor",
			edit: func(p *corev1.Pod) {
				p.Spec.SecurityContext = &corev1.PodSecurityContext{AppArmorProfile: appArmor(engines)}
			},
			want: "the pod securityContext uses",
		},
		{
			name: "init container",
			edit: func(p *corev1.Pod) {
				p.Spec.InitContainers = []corev1.Container{{Name: "setup", Image: "x", SecurityContext: &corev1.SecurityContext{AppArmorProfile: appArmor(engines)}}}
			},
			want: "init container setup uses",
		},
		{name: "ephemeral container", edit: withDebug(corev1.SecurityContext{SeccompProfile: seccomp(enginesJSON)}), want: "ephemeral container debug uses"},
		{
			name: "deprecated annotation",
			edit: func(p *corev1.Pod) {
				p.Annotations = map[string]string{"container.apparmor.security.beta.kubernetes.io/app": "localhost/cgdelegate-engines"}
			},
			want: "annotation container.apparmor.security.beta.kubernetes.io/app uses",
		},
		{
			name: "an unrelated annotation value",
			edit: func(p *corev1.Pod) {
				p.Annotations = map[string]string{"container.apparmor.security.beta.kubernetes.io/app": "runtime/default", "example.com/x": "localhost/cgdelegate-engines"}
			},
		},
		{
			name: "everywhere: every use named",
			edit: func(p *corev1.Pod) {
				p.Spec.SecurityContext = &corev1.PodSecurityContext{SeccompProfile: seccomp(enginesJSON)}
				onApp(corev1.SecurityContext{AppArmorProfile: appArmor(engines)})(p)
				p.Spec.Containers = append(p.Spec.Containers, corev1.Container{Name: "side", Image: "x"})
			},
			want: "the pod securityContext, container app uses",
		},
	}
	ns := namespace(t, nil)
	for _, tc := range tests {
		for _, hu := range []struct {
			name string
			v    *bool
		}{{"host users unset", nil}, {"hostUsers true", &tr}, {"hostUsers false", &fa}} {
			t.Run(tc.name+", "+hu.name, func(t *testing.T) {
				got, err := p.admit(enginePod(t, hu.v, tc.edit), ns)
				if err != nil {
					t.Fatal(err)
				}
				var want []string
				if tc.want != "" && hu.v != &fa {
					want = []string{tc.want}
				}
				wantDenials(t, p.name, got, want)
			})
		}
	}

	// Updates: refused only when they add a use to a pod with host users.
	uses := onApp(corev1.SecurityContext{AppArmorProfile: appArmor(engines)})
	both := func(a, b func(*corev1.Pod)) func(*corev1.Pod) {
		return func(p *corev1.Pod) { a(p); b(p) }
	}
	debug := withDebug(corev1.SecurityContext{AppArmorProfile: appArmor(engines)})
	plainDebug := withDebug(corev1.SecurityContext{})
	for _, tc := range []struct {
		name      string
		old, new  func(*corev1.Pod)
		hostUsers *bool
		want      []string
	}{
		{name: "a pod using a profile, created before the policy, updated", old: uses, new: both(uses, func(p *corev1.Pod) { p.Labels = map[string]string{"a": "b"} })},
		{name: "a debug container without a profile added", old: uses, new: both(uses, plainDebug)},
		{name: "a debug container with a profile added", old: nil, new: debug, want: []string{"ephemeral container debug uses an engine profile"}},
		{name: "a debug container with a profile added to a user-namespaced pod", old: nil, new: debug, hostUsers: &fa},
		{
			name: "a second debug container with a profile", old: debug,
			new: both(debug, func(p *corev1.Pod) {
				p.Spec.EphemeralContainers = append(p.Spec.EphemeralContainers, corev1.EphemeralContainer{
					EphemeralContainerCommon: corev1.EphemeralContainerCommon{Name: "debug2", Image: "b", SecurityContext: &corev1.SecurityContext{SeccompProfile: seccomp(enginesJSON)}},
				})
			}),
			want: []string{"ephemeral container debug2 uses"},
		},
	} {
		t.Run("update: "+tc.name, func(t *testing.T) {
			got, err := p.update(enginePod(t, tc.hostUsers, tc.old), enginePod(t, tc.hostUsers, tc.new), ns)
			if err != nil {
				t.Fatal(err)
			}
			wantDenials(t, p.name, got, tc.want)
		})
	}
}
