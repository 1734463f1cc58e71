package manifests_test

import (
	"errors"
	"path"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	sigsyaml "sigs.k8s.io/yaml"

	"github.com/cgdelegate/cgdelegate/integration/internal/manifests"
)

// untranslate undoes StaticPod's translations of the spec: each hostPath
// volume that stands for a configMap volume of tmpl goes back to the
// template's volume source, and the service account fields go back to the
// template's once checked dropped. What is left must be the template.
func untranslate(t *testing.T, got corev1.PodSpec, tmpl corev1.PodSpec) corev1.PodSpec {
	t.Helper()
	out := *got.DeepCopy()
	if out.ServiceAccountName != "" || out.AutomountServiceAccountToken == nil || *out.AutomountServiceAccountToken {
		t.Errorf("serviceAccountName %q, automountServiceAccountToken %v: want none and false in a static pod",
			out.ServiceAccountName, out.AutomountServiceAccountToken)
	}
	out.ServiceAccountName, out.AutomountServiceAccountToken = tmpl.ServiceAccountName, tmpl.AutomountServiceAccountToken
	// The token volume and its mounts were dropped; they go back where
	// the template has them.
	for j, v := range tmpl.Volumes {
		if !manifests.IsTokenVolume(v) {
			continue
		}
		if slices.ContainsFunc(out.Volumes, func(o corev1.Volume) bool { return o.Name == v.Name }) {
			t.Errorf("volume %s: the service-account token reached the static pod", v.Name)
			continue
		}
		out.Volumes = slices.Insert(out.Volumes, min(j, len(out.Volumes)), v)
		for _, pair := range []struct{ got, want []corev1.Container }{{out.InitContainers, tmpl.InitContainers}, {out.Containers, tmpl.Containers}} {
			for c := range pair.want {
				for k, m := range pair.want[c].VolumeMounts {
					if m.Name == v.Name {
						pair.got[c].VolumeMounts = slices.Insert(pair.got[c].VolumeMounts, min(k, len(pair.got[c].VolumeMounts)), m)
					}
				}
			}
		}
	}
	for i := range out.Volumes {
		j := slices.IndexFunc(tmpl.Volumes, func(v corev1.Volume) bool { return v.Name == out.Volumes[i].Name })
		if j >= 0 && tmpl.Volumes[j].ConfigMap != nil {
			if out.Volumes[i].HostPath == nil || *out.Volumes[i].HostPath.Type != corev1.HostPathDirectory {
				t.Errorf("volume %s: configMap rendered as %+v, want a hostPath directory", out.Volumes[i].Name, out.Volumes[i].VolumeSource)
			}
			out.Volumes[i].VolumeSource = tmpl.Volumes[j].VolumeSource
		}
	}
	return out
}

// assertFollows checks that s is ds's template with only the documented
// translations, and names the first field that differs.
func assertFollows(t *testing.T, s manifests.Static, ds *appsv1.DaemonSet) {
	t.Helper()
	tmpl := ds.Spec.Template
	if got := untranslate(t, s.Pod.Spec, tmpl.Spec); !equality.Semantic.DeepEqual(got, tmpl.Spec) {
		gy, _ := sigsyaml.Marshal(got)
		wy, _ := sigsyaml.Marshal(tmpl.Spec)
		t.Errorf("static pod spec drifted from the DaemonSet template:\n--- rendered (configMap volumes restored) ---\n%s\n--- template ---\n%s", gy, wy)
	}
	if s.Pod.APIVersion != "v1" || s.Pod.Kind != "Pod" {
		t.Errorf("type %s/%s, want v1/Pod", s.Pod.APIVersion, s.Pod.Kind)
	}
	if s.Pod.Name != ds.Name || s.Pod.Namespace != ds.Namespace {
		t.Errorf("pod %s/%s, want the DaemonSet's %s/%s", s.Pod.Namespace, s.Pod.Name, ds.Namespace, ds.Name)
	}
	if !equality.Semantic.DeepEqual(s.Pod.Labels, tmpl.Labels) || !equality.Semantic.DeepEqual(s.Pod.Annotations, tmpl.Annotations) {
		t.Errorf("labels %v annotations %v, want the template's %v %v", s.Pod.Labels, s.Pod.Annotations, tmpl.Labels, tmpl.Annotations)
	}
}

// The shipped DaemonSet renders to a static pod that is its template, the
// ConfigMap volume aside, and that volume's host directory holds the
// ConfigMap's config where the plugin's -config points.
func TestStaticPodShipped(t *testing.T) {
	ds := shippedFile[appsv1.DaemonSet](t, manifests.DaemonSetFile)
	cm := shippedFile[corev1.ConfigMap](t, manifests.ConfigMapFile)
	eds, ecm, err := manifests.Shipped()
	if err != nil {
		t.Fatal(err)
	}
	if !equality.Semantic.DeepEqual(eds, ds) || !equality.Semantic.DeepEqual(ecm, cm) {
		t.Fatal("Shipped() differs from contrib/kubernetes: run make manifests")
	}
	if ds.Spec.Template.Spec.ServiceAccountName != "cgdelegate" {
		t.Fatalf("the DaemonSet runs as service account %q, want cgdelegate (the chart's nodeLabel.enabled default)", ds.Spec.Template.Spec.ServiceAccountName)
	}
	s, err := manifests.StaticPod(ds, cm)
	if err != nil {
		t.Fatal(err)
	}
	assertFollows(t, s, ds)

	plugin := s.Pod.Spec.Containers[0]
	i := slices.Index(plugin.Args, "-config")
	if i < 0 {
		t.Fatalf("args %q have no -config", plugin.Args)
	}
	cfg := plugin.Args[i+1]
	host, _ := hostPathOf(t, s.Pod.Spec, plugin, cfg)
	if host != cfg {
		t.Errorf("-config %s is %s on the host, want the same path", cfg, host)
	}
	f, ok := s.Files[cfg]
	if !ok || string(f.Data) != cm.Data[path.Base(cfg)] || f.Mode != 0o644 {
		t.Errorf("host files %v: want %s with the ConfigMap's %s, mode 0644", keys(s.Files), cfg, path.Base(cfg))
	}
	if len(s.Files) != 1 {
		t.Errorf("host files %v, want only the config", keys(s.Files))
	}

	y, err := s.Manifest()
	if err != nil {
		t.Fatal(err)
	}
	var back corev1.Pod
	if err := sigsyaml.UnmarshalStrict(y, &back); err != nil {
		t.Fatalf("manifest does not decode strictly: %v\n%s", err, y)
	}
	if !equality.Semantic.DeepEqual(back, s.Pod) {
		t.Errorf("manifest round trip changed the pod:\n%s", y)
	}
}

func keys(m map[string]manifests.HostFile) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// Whatever the template says reaches the static pod: nothing is restated.
func TestStaticPodTakesTheTemplate(t *testing.T) {
	base := shippedFile[appsv1.DaemonSet](t, manifests.DaemonSetFile)
	cm := shippedFile[corev1.ConfigMap](t, manifests.ConfigMapFile)
	baseS, err := manifests.StaticPod(base, cm)
	if err != nil {
		t.Fatal(err)
	}
	yes := true
	tests := []struct {
		name   string
		modify func(*corev1.PodSpec)
	}{
		{"image", func(s *corev1.PodSpec) { s.Containers[0].Image = "registry.example/cgd:v9" }},
		{"args", func(s *corev1.PodSpec) { s.Containers[0].Args = append(s.Containers[0].Args, "-log-level", "debug") }},
		{"securityContext", func(s *corev1.PodSpec) {
			s.Containers[0].SecurityContext = &corev1.SecurityContext{ReadOnlyRootFilesystem: &yes}
		}},
		{"hostPath mount", func(s *corev1.PodSpec) {
			s.Volumes = append(s.Volumes, corev1.Volume{Name: "extra", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/srv"}}})
			s.Containers[0].VolumeMounts = append(s.Containers[0].VolumeMounts, corev1.VolumeMount{Name: "extra", MountPath: "/srv"})
		}},
		{"init command", func(s *corev1.PodSpec) { s.InitContainers[0].Command = []string{"/bin/true"} }},
		{"hostPID", func(s *corev1.PodSpec) { s.HostPID = false }},
		{"priorityClassName", func(s *corev1.PodSpec) { s.PriorityClassName = "other" }},
		{"config mount path", func(s *corev1.PodSpec) {
			i := slices.IndexFunc(s.Containers[0].VolumeMounts, func(m corev1.VolumeMount) bool { return m.Name == "config" })
			s.Containers[0].VolumeMounts[i].MountPath = "/etc/cgd2"
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ds := base.DeepCopy()
			tc.modify(&ds.Spec.Template.Spec)
			s, err := manifests.StaticPod(ds, cm)
			if err != nil {
				t.Fatal(err)
			}
			assertFollows(t, s, ds)
			if equality.Semantic.DeepEqual(s.Pod, baseS.Pod) {
				t.Error("the change did not reach the static pod")
			}
		})
	}
	t.Run("config dir follows the mount", func(t *testing.T) {
		ds := base.DeepCopy()
		tests[len(tests)-1].modify(&ds.Spec.Template.Spec)
		s, err := manifests.StaticPod(ds, cm)
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := s.Files["/etc/cgd2/config.yaml"]; !ok || len(s.Files) != 1 {
			t.Errorf("host files %v, want /etc/cgd2/config.yaml", keys(s.Files))
		}
	})
}

// What a static pod cannot take is refused, naming the field.
func TestStaticPodRefuses(t *testing.T) {
	base := shippedFile[appsv1.DaemonSet](t, manifests.DaemonSetFile)
	cm := shippedFile[corev1.ConfigMap](t, manifests.ConfigMapFile)
	configVol := func(s *corev1.PodSpec) *corev1.Volume {
		i := slices.IndexFunc(s.Volumes, func(v corev1.Volume) bool { return v.ConfigMap != nil })
		return &s.Volumes[i]
	}
	tests := []struct {
		name   string
		modify func(*corev1.PodSpec)
		cms    []*corev1.ConfigMap
		notAPI bool // ErrNotStatic
		want   string
	}{
		{name: "deprecated service account", modify: func(s *corev1.PodSpec) { s.DeprecatedServiceAccount = "cgd" }, notAPI: true, want: `serviceAccount "cgd"`},
		{name: "secret volume", modify: func(s *corev1.PodSpec) {
			s.Volumes = append(s.Volumes, corev1.Volume{Name: "tls", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "x"}}})
		}, notAPI: true, want: "(tls): secret"},
		{name: "projected volume other than the token", modify: func(s *corev1.PodSpec) {
			s.Volumes = append(s.Volumes, corev1.Volume{Name: "mixed", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{Sources: []corev1.VolumeProjection{
				{ServiceAccountToken: &corev1.ServiceAccountTokenProjection{Path: "token"}},
				{Secret: &corev1.SecretProjection{LocalObjectReference: corev1.LocalObjectReference{Name: "x"}}},
			}}}})
		}, notAPI: true, want: "(mixed): projected"},
		{name: "env from a secret", modify: func(s *corev1.PodSpec) {
			s.Containers[0].EnvFrom = []corev1.EnvFromSource{{SecretRef: &corev1.SecretEnvSource{}}}
		}, notAPI: true, want: "containers[0] (cgdelegate).envFrom[0]"},
		{name: "env from a configMap key", modify: func(s *corev1.PodSpec) {
			s.InitContainers[0].Env = []corev1.EnvVar{{Name: "X", ValueFrom: &corev1.EnvVarSource{ConfigMapKeyRef: &corev1.ConfigMapKeySelector{Key: "k"}}}}
		}, notAPI: true, want: "initContainers[0] (install-hook).env[0] (X).valueFrom"},
		{name: "subPath", modify: func(s *corev1.PodSpec) {
			i := slices.IndexFunc(s.Containers[0].VolumeMounts, func(m corev1.VolumeMount) bool { return m.Name == "config" })
			s.Containers[0].VolumeMounts[i].SubPath = "config.yaml"
		}, notAPI: true, want: "subPath"},
		{name: "configMap not given", modify: func(*corev1.PodSpec) {}, cms: []*corev1.ConfigMap{}, want: `configMap "cgdelegate" not given`},
		{name: "key missing", modify: func(s *corev1.PodSpec) {
			configVol(s).ConfigMap.Items = []corev1.KeyToPath{{Key: "nope", Path: "config.yaml"}}
		}, want: `no key "nope"`},
		{name: "item escapes the volume", modify: func(s *corev1.PodSpec) {
			configVol(s).ConfigMap.Items[0].Path = "../passwd"
		}, want: `path "../passwd" must be relative`},
		{name: "mounted at two paths", modify: func(s *corev1.PodSpec) {
			s.InitContainers[0].VolumeMounts = append(s.InitContainers[0].VolumeMounts, corev1.VolumeMount{Name: "config", MountPath: "/cfg"})
		}, want: "want one absolute directory"},
		{name: "not mounted", modify: func(s *corev1.PodSpec) {
			s.Containers[0].VolumeMounts = slices.DeleteFunc(s.Containers[0].VolumeMounts, func(m corev1.VolumeMount) bool { return m.Name == "config" })
		}, want: "want one absolute directory"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ds := base.DeepCopy()
			tc.modify(&ds.Spec.Template.Spec)
			cms := tc.cms
			if cms == nil {
				cms = []*corev1.ConfigMap{cm}
			}
			s, err := manifests.StaticPod(ds, cms...)
			if err == nil {
				t.Fatalf("rendered %+v, want an error", s.Pod.Spec)
			}
			if errors.Is(err, manifests.ErrNotStatic) != tc.notAPI {
				t.Errorf("errors.Is(%v, ErrNotStatic) = %v, want %v", err, !tc.notAPI, tc.notAPI)
			}
			if !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "DaemonSet kube-system/cgdelegate: spec.template.spec.") {
				t.Errorf("error %q does not name %q and where", err, tc.want)
			}
		})
	}
}
