package manifests_test

import (
	"encoding/json"
	"maps"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	chart "helm.sh/helm/v4/pkg/chart/v2"
	"helm.sh/helm/v4/pkg/chart/v2/loader"
	admissionv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	sigsyaml "sigs.k8s.io/yaml"

	"github.com/cgdelegate/cgdelegate/integration/internal/manifests"
)

// loadChart loads the chart once for the in-process renders.
var loadChart = sync.OnceValues(func() (*chart.Chart, error) {
	return loader.Load(filepath.Join(root, manifests.ChartDir))
})

// renderObjects renders the chart with its own defaults and the user's
// values (YAML) in process, every part on that allOn turns on when all is
// set, and returns every object as JSON by kind/name.
func renderObjects(t *testing.T, user string) map[string][]byte {
	t.Helper()
	ch, err := loadChart()
	if err != nil {
		t.Fatal(err)
	}
	var u map[string]any
	if err := sigsyaml.Unmarshal([]byte(user), &u); err != nil {
		t.Fatal(err)
	}
	out, err := renderChart(t, ch, ch.Values, u)
	if err != nil {
		t.Fatalf("%s: %v", user, err)
	}
	objs := map[string][]byte{}
	for name, text := range out {
		if !strings.HasSuffix(name, ".yaml") {
			continue
		}
		for doc := range strings.SplitSeq(text, "\n---\n") {
			data, err := sigsyaml.YAMLToJSON([]byte(doc))
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			var o struct {
				Kind     string `json:"kind"`
				Metadata struct {
					Name string `json:"name"`
				} `json:"metadata"`
			}
			if err := json.Unmarshal(data, &o); err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			if o.Kind != "" {
				objs[o.Kind+"/"+o.Metadata.Name] = data
			}
		}
	}
	return objs
}

// object strictly decodes the object kind/name of objs.
func object[T any](t *testing.T, objs map[string][]byte, key string) *T {
	t.Helper()
	data, ok := objs[key]
	if !ok {
		t.Fatalf("no %s among %v", key, slices.Sorted(maps.Keys(objs)))
	}
	obj := new(T)
	if err := sigsyaml.UnmarshalStrict(data, obj); err != nil {
		t.Fatalf("%s: %v", key, err)
	}
	return obj
}

// allContainers are a pod's init containers and containers.
func allContainers(spec corev1.PodSpec) []corev1.Container {
	return append(slices.Clone(spec.InitContainers), spec.Containers...)
}

// args returns the value after flag in args, or "" when there is none.
func argAfter(args []string, flag string) string {
	if i := slices.Index(args, flag); i >= 0 && i+1 < len(args) {
		return args[i+1]
	}
	return ""
}

const digest = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"

// Each value of the chart's values.yaml for platform teams (those
// node-feature-discovery, NVIDIA's device plugin and nri-plugins have),
// set to something other than its default, reaches the objects as
// docs/deploying.md's values table says.
func TestChartValues(t *testing.T) {
	const ds, job = "DaemonSet/cgdelegate", "Job/cgdelegate-node-label-uninstall"
	tests := []struct {
		name   string
		values string
		check  func(t *testing.T, objs map[string][]byte)
	}{
		{"defaults", "", func(t *testing.T, objs map[string][]byte) {
			d := object[appsv1.DaemonSet](t, objs, ds)
			spec := d.Spec.Template.Spec
			if want := map[string]string{"kubernetes.io/os": "linux"}; !maps.Equal(spec.NodeSelector, want) {
				t.Errorf("nodeSelector %v, want %v", spec.NodeSelector, want)
			}
			c := spec.Containers[0]
			if argAfter(c.Args, "-log-level") != "info" || argAfter(c.Args, "-idx") != "50" {
				t.Errorf("args %q, want -log-level info and -idx 50", c.Args)
			}
			if u := d.Spec.UpdateStrategy; u.Type != appsv1.RollingUpdateDaemonSetStrategyType || u.RollingUpdate == nil ||
				u.RollingUpdate.MaxUnavailable.String() != "1" || u.RollingUpdate.MaxSurge != nil {
				t.Errorf("updateStrategy %+v, want RollingUpdate of one node, no surge", u)
			}
			p := c.LivenessProbe
			if p == nil || p.Exec == nil || !slices.Equal(p.Exec.Command, []string{"/usr/local/bin/cgdelegate", "status", "-live", "-config", "/etc/cgdelegate/config.yaml"}) {
				t.Errorf("livenessProbe %+v, want cgdelegate status -live with the plugin's config", p)
			} else if p.PeriodSeconds*p.FailureThreshold < 90 {
				t.Errorf("livenessProbe fails after %d s, before a status the plugin refreshes every 30 s is stale (90 s)", p.PeriodSeconds*p.FailureThreshold)
			}
			if len(spec.ImagePullSecrets) != 0 || spec.Affinity != nil {
				t.Errorf("imagePullSecrets %v, affinity %v, want none", spec.ImagePullSecrets, spec.Affinity)
			}
		}},
		{"imagePullSecrets and image.digest", "imagePullSecrets: [{name: regcred}]\nimage: {digest: " + digest + ", tag: v9}", func(t *testing.T, objs map[string][]byte) {
			d := object[appsv1.DaemonSet](t, objs, ds)
			j := object[batchv1.Job](t, objs, job)
			for what, spec := range map[string]corev1.PodSpec{"DaemonSet": d.Spec.Template.Spec, "uninstall Job": j.Spec.Template.Spec} {
				if want := []corev1.LocalObjectReference{{Name: "regcred"}}; !slices.Equal(spec.ImagePullSecrets, want) {
					t.Errorf("%s: imagePullSecrets %v, want %v", what, spec.ImagePullSecrets, want)
				}
				for _, c := range allContainers(spec) {
					if c.Image != "ghcr.io/cgdelegate/cgdelegate@"+digest {
						t.Errorf("%s: container %s runs %s, want the digest, not the tag", what, c.Name, c.Image)
					}
				}
			}
		}},
		{"affinity and nodeSelector", `
affinity: {nodeAffinity: {requiredDuringSchedulingIgnoredDuringExecution: {nodeSelectorTerms: [{matchExpressions: [{key: pool, operator: In, values: [a]}]}]}}}
nodeSelector: {kubernetes.io/os: null, pool: b}`, func(t *testing.T, objs map[string][]byte) {
			spec := object[appsv1.DaemonSet](t, objs, ds).Spec.Template.Spec
			a := spec.Affinity
			if a == nil || a.NodeAffinity == nil || a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution == nil ||
				a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms[0].MatchExpressions[0].Key != "pool" {
				t.Errorf("affinity %+v", a)
			}
			if want := map[string]string{"pool": "b"}; !maps.Equal(spec.NodeSelector, want) {
				t.Errorf("nodeSelector %v, want %v (the default's key removed with null)", spec.NodeSelector, want)
			}
		}},
		{"podAnnotations and podLabels", "podAnnotations: {team: a}\npodLabels: {team: b}", func(t *testing.T, objs map[string][]byte) {
			d := object[appsv1.DaemonSet](t, objs, ds)
			m := d.Spec.Template.ObjectMeta
			if m.Annotations["team"] != "a" || len(m.Annotations["checksum/config"]) != 64 {
				t.Errorf("pod annotations %v, want team a and checksum/config", m.Annotations)
			}
			if want := map[string]string{"app.kubernetes.io/name": "cgdelegate", "app.kubernetes.io/instance": "cgdelegate", "team": "b"}; !maps.Equal(m.Labels, want) {
				t.Errorf("pod labels %v, want %v", m.Labels, want)
			}
			if want := map[string]string{"app.kubernetes.io/name": "cgdelegate"}; !maps.Equal(d.Spec.Selector.MatchLabels, want) {
				t.Errorf("selector %v, want %v as it has always been (it can not change)", d.Spec.Selector.MatchLabels, want)
			}
		}},
		{"securityContext", "securityContext: {seLinuxOptions: {type: spc_t}, appArmorProfile: {type: Localhost, localhostProfile: cgd}}", func(t *testing.T, objs map[string][]byte) {
			c := object[appsv1.DaemonSet](t, objs, ds).Spec.Template.Spec.Containers[0]
			sc := c.SecurityContext
			if sc == nil || sc.SELinuxOptions == nil || sc.SELinuxOptions.Type != "spc_t" || sc.AppArmorProfile == nil || sc.AppArmorProfile.Type != corev1.AppArmorProfileTypeLocalhost {
				t.Fatalf("plugin securityContext %+v, want seLinuxOptions type spc_t and the Localhost AppArmor profile", sc)
			}
			if *sc.Privileged || *sc.AllowPrivilegeEscalation || !*sc.ReadOnlyRootFilesystem || len(sc.Capabilities.Add) != 0 ||
				!slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) || sc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
				t.Errorf("plugin securityContext %+v: the rest must stay least privilege", sc)
			}
		}},
		{"logLevel, extraArgs, nri.plugin.index", "logLevel: debug\nextraArgs: [-name=cgd]\nnri: {plugin: {index: 7}}", func(t *testing.T, objs map[string][]byte) {
			c := object[appsv1.DaemonSet](t, objs, ds).Spec.Template.Spec.Containers[0]
			if argAfter(c.Args, "-log-level") != "debug" || argAfter(c.Args, "-idx") != "07" || !slices.Contains(c.Args, "-name=cgd") {
				t.Errorf("args %q, want -log-level debug, -idx 07 and -name=cgd", c.Args)
			}
		}},
		{"updateStrategy percentage", "updateStrategy: {rollingUpdate: {maxUnavailable: 10%}}", func(t *testing.T, objs map[string][]byte) {
			u := object[appsv1.DaemonSet](t, objs, ds).Spec.UpdateStrategy
			if u.Type != appsv1.RollingUpdateDaemonSetStrategyType || u.RollingUpdate.MaxUnavailable.String() != "10%" {
				t.Errorf("updateStrategy %+v, want RollingUpdate 10%%", u)
			}
		}},
		{"updateStrategy OnDelete", "updateStrategy: {type: OnDelete}", func(t *testing.T, objs map[string][]byte) {
			u := object[appsv1.DaemonSet](t, objs, ds).Spec.UpdateStrategy
			if u.Type != appsv1.OnDeleteDaemonSetStrategyType || u.RollingUpdate != nil {
				t.Errorf("updateStrategy %+v, want OnDelete alone (the API refuses rollingUpdate with it)", u)
			}
		}},
		{"livenessProbe", "livenessProbe: {periodSeconds: 60, failureThreshold: 5}", func(t *testing.T, objs map[string][]byte) {
			p := object[appsv1.DaemonSet](t, objs, ds).Spec.Template.Spec.Containers[0].LivenessProbe
			if p == nil || p.PeriodSeconds != 60 || p.FailureThreshold != 5 {
				t.Errorf("livenessProbe %+v, want every 60 s, 5 failures", p)
			}
		}},
		{"livenessProbe off", "livenessProbe: {enabled: false}", func(t *testing.T, objs map[string][]byte) {
			if p := object[appsv1.DaemonSet](t, objs, ds).Spec.Template.Spec.Containers[0].LivenessProbe; p != nil {
				t.Errorf("livenessProbe %+v, want none", p)
			}
		}},
		{"validationActions", "admissionPolicy: {validationActions: [Warn, Audit], requireUserNamespace: true}\nengineProfiles: {seccomp: true}", func(t *testing.T, objs map[string][]byte) {
			n := 0
			for key := range objs {
				kind, name, _ := strings.Cut(key, "/")
				if kind != "ValidatingAdmissionPolicyBinding" {
					continue
				}
				b := object[admissionv1.ValidatingAdmissionPolicyBinding](t, objs, key)
				want := []admissionv1.ValidationAction{admissionv1.Warn, admissionv1.Audit}
				// The policies that narrow the chart's own accounts stay Deny.
				if strings.Contains(name, "node-label") || strings.HasSuffix(name, "-pod-events") {
					want = []admissionv1.ValidationAction{admissionv1.Deny}
				} else {
					n++
				}
				if !slices.Equal(b.Spec.ValidationActions, want) {
					t.Errorf("%s: validationActions %v, want %v", key, b.Spec.ValidationActions, want)
				}
			}
			if n != 5 {
				t.Errorf("%d bindings of the pods' and the namespace label's policies, want 5", n)
			}
		}},
		{"validationActionsByPolicy", "admissionPolicy: {validationActions: [Audit], validationActionsByPolicy: {writable-cgroups-userns: [Warn], namespace-label: [Deny]}, requireUserNamespace: true}\nengineProfiles: {seccomp: true}", func(t *testing.T, objs map[string][]byte) {
			// One policy rolled out with Warn, one kept at Deny, the
			// others at the shared value; the chart's own accounts' at Deny.
			want := map[string][]admissionv1.ValidationAction{
				"cgdelegate-writable-cgroups":        {admissionv1.Audit},
				"cgdelegate-writable-cgroups-userns": {admissionv1.Warn},
				"cgdelegate-writable-cgroups-status": {admissionv1.Audit},
				"cgdelegate-engine-profiles":         {admissionv1.Audit},
				"cgdelegate-namespace-label":         {admissionv1.Deny},
			}
			seen := 0
			for key := range objs {
				kind, name, _ := strings.Cut(key, "/")
				if kind != "ValidatingAdmissionPolicyBinding" {
					continue
				}
				b := object[admissionv1.ValidatingAdmissionPolicyBinding](t, objs, key)
				w, ok := want[b.Spec.PolicyName]
				if !ok {
					w = []admissionv1.ValidationAction{admissionv1.Deny}
				} else {
					seen++
				}
				if !slices.Equal(b.Spec.ValidationActions, w) {
					t.Errorf("%s (policy %s): validationActions %v, want %v", name, b.Spec.PolicyName, b.Spec.ValidationActions, w)
				}
			}
			if seen != len(want) {
				t.Errorf("%d bindings of the policies named, want %d", seen, len(want))
			}
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tc.check(t, renderObjects(t, tc.values))
		})
	}
}

// recommendedLabels are the labels every object carries.
var recommendedLabels = []string{"app.kubernetes.io/name", "app.kubernetes.io/instance", "app.kubernetes.io/version", "app.kubernetes.io/managed-by", "helm.sh/chart"}

// Every object carries the recommended labels, with every part of the
// chart on; the DaemonSet's selector and its pods' labels stay as they
// were (a new chart version does not change them).
func TestChartRecommendedLabels(t *testing.T) {
	objs := renderObjects(t, allOn)
	if len(objs) < 30 {
		t.Fatalf("%d objects, want every template's", len(objs))
	}
	for key, data := range objs {
		var o struct {
			Metadata struct {
				Labels map[string]string `json:"labels"`
			} `json:"metadata"`
		}
		if err := json.Unmarshal(data, &o); err != nil {
			t.Fatal(err)
		}
		for _, l := range recommendedLabels {
			if o.Metadata.Labels[l] == "" {
				t.Errorf("%s lacks the label %s: %v", key, l, o.Metadata.Labels)
			}
		}
	}
	d := object[appsv1.DaemonSet](t, objs, "DaemonSet/cgdelegate")
	if want := map[string]string{"app.kubernetes.io/name": "cgdelegate"}; !maps.Equal(d.Spec.Selector.MatchLabels, want) {
		t.Errorf("selector %v, want %v", d.Spec.Selector.MatchLabels, want)
	}
	if want := map[string]string{"app.kubernetes.io/name": "cgdelegate", "app.kubernetes.io/instance": "cgdelegate"}; !maps.Equal(d.Spec.Template.Labels, want) {
		t.Errorf("pod labels %v, want %v", d.Spec.Template.Labels, want)
	}
}

// fullnameOverride and nameOverride rename every object, and the policies
// name the renamed service accounts: none names the default's.
func TestChartNameOverrides(t *testing.T) {
	for _, tc := range []struct{ values, prefix string }{
		{"fullnameOverride: cgd", "cgd"},
		{"nameOverride: plugin", "cgdelegate-plugin"},
	} {
		t.Run(tc.values, func(t *testing.T) {
			objs := renderObjects(t, tc.values+"\n"+allOn)
			for key, data := range objs {
				_, name, _ := strings.Cut(key, "/")
				if !strings.HasPrefix(name, tc.prefix) {
					t.Errorf("%s: not named after %s", key, tc.prefix)
				}
				if s := string(data); strings.Contains(s, ":cgdelegate'") || strings.Contains(s, ":cgdelegate-uninstall'") {
					t.Errorf("%s names the default's service account", key)
				}
			}
			for _, sa := range []string{tc.prefix, tc.prefix + "-uninstall"} {
				object[corev1.ServiceAccount](t, objs, "ServiceAccount/"+sa)
			}
			if p := string(objs["ValidatingAdmissionPolicy/"+tc.prefix+"-node-label"]); !strings.Contains(p, "system:serviceaccount:"+manifests.Namespace+":"+tc.prefix+"'") {
				t.Errorf("the node label's policy does not name the account %s", tc.prefix)
			}
			if p := string(objs["ValidatingAdmissionPolicy/"+tc.prefix+"-node-label-uninstall"]); !strings.Contains(p, "system:serviceaccount:"+manifests.Namespace+":"+tc.prefix+"-uninstall'") {
				t.Errorf("the uninstall policy does not name the account %s-uninstall", tc.prefix)
			}
			d := object[appsv1.DaemonSet](t, objs, "DaemonSet/"+tc.prefix)
			if d.Spec.Template.Spec.ServiceAccountName != tc.prefix {
				t.Errorf("DaemonSet's account %s, want %s", d.Spec.Template.Spec.ServiceAccountName, tc.prefix)
			}
		})
	}
}

// everyValue sets every value this test file covers to something other
// than its default at once.
const everyValue = `
imagePullSecrets: [{name: regcred}]
image: {digest: ` + digest + `}
affinity: {nodeAffinity: {requiredDuringSchedulingIgnoredDuringExecution: {nodeSelectorTerms: [{matchExpressions: [{key: pool, operator: In, values: [a]}]}]}}}
podAnnotations: {team: a}
podLabels: {team: b}
securityContext: {seLinuxOptions: {type: spc_t}}
logLevel: debug
extraArgs: [-name=cgd]
nri: {plugin: {index: 7}}
updateStrategy: {rollingUpdate: {maxUnavailable: 10%}}
livenessProbe: {periodSeconds: 60}
fullnameOverride: cgd
admissionPolicy: {validationActions: [Warn]}
`

// rbac are the rules and subjects of every role and binding, by its name
// less the release's prefix.
func rbac(t *testing.T, objs map[string][]byte, prefix string) map[string]string {
	t.Helper()
	out := map[string]string{}
	for key, data := range objs {
		kind, name, _ := strings.Cut(key, "/")
		var what any
		switch kind {
		case "ClusterRole", "Role":
			what = object[rbacv1.ClusterRole](t, objs, key).Rules
		case "ClusterRoleBinding", "RoleBinding":
			b := object[rbacv1.ClusterRoleBinding](t, objs, key)
			subjects := slices.Clone(b.Subjects)
			for i := range subjects {
				subjects[i].Name = strings.TrimPrefix(subjects[i].Name, prefix)
			}
			what = []any{strings.TrimPrefix(b.RoleRef.Name, prefix), subjects}
		default:
			_ = data
			continue
		}
		j, err := json.Marshal(what)
		if err != nil {
			t.Fatal(err)
		}
		out[kind+"/"+strings.TrimPrefix(name, prefix)] = string(j)
	}
	return out
}

// The chart's new values add no privilege: set all at once, the RBAC is
// the defaults' (no role, rule or subject more), and every container of
// the DaemonSet and the uninstall Job stays not privileged, without
// privilege escalation, on a read-only root, with every capability
// dropped and none added, confined by seccomp; the pods get no host
// namespace or host path more. The defaults' plugin container has no
// SELinux or AppArmor option.
func TestChartValuesLeastPrivilege(t *testing.T) {
	def := renderObjects(t, "")
	all := renderObjects(t, everyValue)
	if got, want := rbac(t, all, "cgd"), rbac(t, def, "cgdelegate"); !maps.Equal(got, want) {
		t.Errorf("RBAC with every value set:\n%v\nwant the defaults':\n%v", got, want)
	}
	hostPaths := func(spec corev1.PodSpec) []string {
		var p []string
		for _, v := range spec.Volumes {
			if v.HostPath != nil {
				p = append(p, v.HostPath.Path)
			}
		}
		return p
	}
	defDS := object[appsv1.DaemonSet](t, def, "DaemonSet/cgdelegate").Spec.Template.Spec
	if sc := defDS.Containers[0].SecurityContext; sc.SELinuxOptions != nil || sc.AppArmorProfile != nil {
		t.Errorf("the defaults' plugin securityContext %+v has SELinux or AppArmor options", sc)
	}
	for what, objs := range map[string]map[string][]byte{"defaults": def, "every value": all} {
		prefix := "cgdelegate"
		if what != "defaults" {
			prefix = "cgd"
		}
		ds := object[appsv1.DaemonSet](t, objs, "DaemonSet/"+prefix).Spec.Template.Spec
		job := object[batchv1.Job](t, objs, "Job/"+prefix+"-node-label-uninstall").Spec.Template.Spec
		if ds.HostNetwork || ds.HostIPC || job.HostNetwork || job.HostPID || job.HostIPC {
			t.Errorf("%s: host namespaces: DaemonSet network %t IPC %t, Job network %t PID %t IPC %t", what, ds.HostNetwork, ds.HostIPC, job.HostNetwork, job.HostPID, job.HostIPC)
		}
		if got, want := hostPaths(ds), hostPaths(defDS); !slices.Equal(got, want) || len(hostPaths(job)) != 0 {
			t.Errorf("%s: hostPaths %v (Job %v), want the defaults' %v", what, got, hostPaths(job), want)
		}
		for _, c := range append(allContainers(ds), allContainers(job)...) {
			sc := c.SecurityContext
			if sc == nil || sc.Privileged == nil || *sc.Privileged || sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation ||
				sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem || sc.Capabilities == nil ||
				!slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) || len(sc.Capabilities.Add) != 0 ||
				sc.SeccompProfile == nil || sc.SeccompProfile.Type == corev1.SeccompProfileTypeUnconfined {
				t.Errorf("%s: container %s securityContext %+v is not least privilege", what, c.Name, sc)
			}
		}
	}
}

// The new values refuse what would break the pods, widen the plugin's
// privileges or override what the chart sets, naming the value: the
// schema (as helm install, upgrade, template and lint run it) or the
// templates.
func TestChartRefusesBadNewValues(t *testing.T) {
	const schema = "values don't meet the specifications of the schema"
	tests := []struct {
		name, values string
		want         []string
	}{
		{"privileged securityContext", "securityContext: {privileged: true}", []string{schema, "/securityContext", "'privileged' not allowed"}},
		{"capabilities in securityContext", "securityContext: {capabilities: {add: [SYS_ADMIN]}}", []string{schema, "/securityContext", "'capabilities' not allowed"}},
		{"runAsUser in securityContext", "securityContext: {runAsUser: 0}", []string{schema, "/securityContext", "'runAsUser' not allowed"}},
		{"unconfined seccomp", "securityContext: {seccompProfile: {type: Unconfined}}", []string{schema, "/securityContext/seccompProfile/type"}},
		{"unconfined AppArmor", "securityContext: {appArmorProfile: {type: Unconfined}}", []string{schema, "/securityContext/appArmorProfile/type"}},
		{"Localhost seccomp without a profile", "securityContext: {seccompProfile: {type: Localhost}}", []string{schema, "/securityContext/seccompProfile", "localhostProfile"}},
		{"digest that is no digest", "image: {digest: sha256:abc}", []string{schema, "/image/digest"}},
		{"imagePullSecrets as names", "imagePullSecrets: [regcred]", []string{schema, "/imagePullSecrets/0", "want object"}},
		{"fullnameOverride no DNS label", "fullnameOverride: Cgd_1", []string{schema, "/fullnameOverride"}},
		{"nameOverride too long", "nameOverride: " + strings.Repeat("a", 43), []string{schema, "/nameOverride"}},
		{"unknown logLevel", "logLevel: loud", []string{schema, "/logLevel", "'debug', 'info', 'warn', 'error'"}},
		{"extraArgs word", "extraArgs: [status]", []string{schema, "/extraArgs/0"}},
		{"extraArgs setting -idx", "extraArgs: [-idx=3]", []string{`extraArgs "-idx=3"`, "nri.plugin.index"}},
		{"extraArgs setting -log-level", "extraArgs: [--log-level=debug]", []string{`extraArgs "--log-level=debug"`, "logLevel"}},
		{"extraArgs setting -config", "extraArgs: [-config]", []string{`extraArgs "-config"`}},
		{"plugin index 100", "nri: {plugin: {index: 100}}", []string{schema, "/nri/plugin/index", "maximum"}},
		{"plugin index -1", "nri: {plugin: {index: -1}}", []string{schema, "/nri/plugin/index", "minimum"}},
		{"plugin index as text", `nri: {plugin: {index: "07"}}`, []string{schema, "/nri/plugin/index", "want integer"}},
		{"maxSurge", "updateStrategy: {rollingUpdate: {maxSurge: 1}}", []string{schema, "/updateStrategy/rollingUpdate", "'maxSurge' not allowed"}},
		{"maxUnavailable 0", "updateStrategy: {rollingUpdate: {maxUnavailable: 0}}", []string{schema, "/updateStrategy/rollingUpdate/maxUnavailable"}},
		{"maxUnavailable 0%", "updateStrategy: {rollingUpdate: {maxUnavailable: 0%}}", []string{schema, "/updateStrategy/rollingUpdate/maxUnavailable"}},
		{"unknown updateStrategy", "updateStrategy: {type: Recreate}", []string{schema, "/updateStrategy/type"}},
		{"liveness period 0", "livenessProbe: {periodSeconds: 0}", []string{schema, "/livenessProbe/periodSeconds"}},
		{"validationActions Deny and Warn", "admissionPolicy: {validationActions: [Deny, Warn]}", []string{schema, "/admissionPolicy/validationActions"}},
		{"validationActions as a word", "admissionPolicy: {validationActions: Warn}", []string{schema, "/admissionPolicy/validationActions"}},
		{"validationActionsByPolicy of no policy", "admissionPolicy: {validationActionsByPolicy: {writable: [Warn]}}", []string{schema, "/admissionPolicy/validationActionsByPolicy", "writable"}},
		{"validationActionsByPolicy Deny and Warn", "admissionPolicy: {validationActionsByPolicy: {namespace-label: [Deny, Warn]}}", []string{schema, "/admissionPolicy/validationActionsByPolicy/namespace-label"}},
		{"podLabels with the selector's", "podLabels: {app.kubernetes.io/name: x}", []string{`podLabels.app.kubernetes.io/name "x"`, "selector"}},
		{"podLabels with the release's", "podLabels: {app.kubernetes.io/instance: x}", []string{`podLabels.app.kubernetes.io/instance "x"`}},
		{"podAnnotations with checksum/config", "podAnnotations: {checksum/config: x}", []string{"podAnnotations.checksum/config", "rolls the pods"}},
	}
	ch, err := loadChart()
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var u map[string]any
			if err := sigsyaml.Unmarshal([]byte(tc.values), &u); err != nil {
				t.Fatal(err)
			}
			_, err := renderChart(t, ch, ch.Values, u)
			if err == nil {
				t.Fatalf("%s rendered, want an error", tc.values)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not name %q", err, w)
				}
			}
		})
	}
}
