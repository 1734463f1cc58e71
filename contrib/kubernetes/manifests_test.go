package kubernetes_test

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/BurntSushi/toml"
	"github.com/containerd/nri/pkg/api"
	"go.yaml.in/yaml/v3"
	admissionv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	sigsyaml "sigs.k8s.io/yaml"

	"github.com/cgdelegate/cgdelegate/contrib"
	"github.com/cgdelegate/cgdelegate/internal/config"
)

const (
	daemonSetFile = "daemonset.yaml"
	configMapFile = "configmap.yaml"
	rbacFile      = "node-label-rbac.yaml"
	// defaultConfigFile is the config make install and the ConfigMap ship.
	defaultConfigFile = "../config.yaml"
)

// kinds are the objects contrib/kubernetes may hold, by apiVersion/kind.
var kinds = map[string]func() any{
	"apps/v1/DaemonSet": func() any { return new(appsv1.DaemonSet) },
	"v1/ConfigMap":      func() any { return new(corev1.ConfigMap) },
	"v1/ServiceAccount": func() any { return new(corev1.ServiceAccount) },
	"rbac.authorization.k8s.io/v1/ClusterRole":          func() any { return new(rbacv1.ClusterRole) },
	"rbac.authorization.k8s.io/v1/ClusterRoleBinding":   func() any { return new(rbacv1.ClusterRoleBinding) },
	admissionGroup + "ValidatingAdmissionPolicy":        func() any { return new(admissionv1.ValidatingAdmissionPolicy) },
	admissionGroup + "ValidatingAdmissionPolicyBinding": func() any { return new(admissionv1.ValidatingAdmissionPolicyBinding) },
	admissionGroup + "MutatingAdmissionPolicy":          func() any { return new(admissionv1.MutatingAdmissionPolicy) },
	admissionGroup + "MutatingAdmissionPolicyBinding":   func() any { return new(admissionv1.MutatingAdmissionPolicyBinding) },
}

const admissionGroup = "admissionregistration.k8s.io/v1/"

// decodeFile decodes every document of a multi-document YAML file strictly
// into its k8s.io/api type: an unknown kind or a misspelt field fails the
// test instead of being dropped.
func decodeFile(t *testing.T, file string) []any {
	t.Helper()
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	objs, err := decodeDocuments(data, kinds)
	if err != nil {
		t.Fatalf("%s: %v", file, err)
	}
	return objs
}

// decodeDocuments decodes every document of multi-document YAML strictly
// into the type known names by apiVersion/kind; no document is an error.
func decodeDocuments(data []byte, known map[string]func() any) ([]any, error) {
	var objs []any
	dec := yaml.NewDecoder(bytes.NewReader(data))
	for {
		var node yaml.Node
		if err := dec.Decode(&node); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			return nil, err
		}
		doc, err := yaml.Marshal(&node)
		if err != nil {
			return nil, err
		}
		var tm metav1.TypeMeta
		if err := sigsyaml.Unmarshal(doc, &tm); err != nil {
			return nil, err
		}
		newObj, ok := known[tm.APIVersion+"/"+tm.Kind]
		if !ok {
			return nil, fmt.Errorf("unexpected apiVersion %q kind %q", tm.APIVersion, tm.Kind)
		}
		obj := newObj()
		if err := sigsyaml.UnmarshalStrict(doc, obj); err != nil {
			return nil, fmt.Errorf("%s: %w", tm.Kind, err)
		}
		objs = append(objs, obj)
	}
	if len(objs) == 0 {
		return nil, errors.New("no objects")
	}
	return objs, nil
}

// only returns the one object of type T in file.
func only[T any](t *testing.T, file string) *T {
	t.Helper()
	objs := decodeFile(t, file)
	if len(objs) != 1 {
		t.Fatalf("%s: %d objects, want one", file, len(objs))
	}
	o, ok := objs[0].(*T)
	if !ok {
		t.Fatalf("%s: %T, want %T", file, objs[0], new(T))
	}
	return o
}

// Every manifest decodes strictly.
func TestManifestsDecode(t *testing.T) {
	files, err := filepath.Glob("*.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{daemonSetFile, configMapFile, policyFile, usernsFile, rbacFile, nodeLabelPolicyFile, uninstallPolicyFile} {
		if !slices.Contains(files, f) {
			t.Errorf("%s is missing", f)
		}
	}
	for _, f := range files {
		t.Run(f, func(t *testing.T) { decodeFile(t, f) })
	}
}

// The ConfigMap ships contrib/config.yaml, which is the built-in defaults
// written out.
func TestConfigMap(t *testing.T) {
	cm := only[corev1.ConfigMap](t, configMapFile)
	want, err := os.ReadFile(defaultConfigFile)
	if err != nil {
		t.Fatal(err)
	}
	if cm.Data["config.yaml"] != string(want) {
		t.Errorf("%s: data.config.yaml differs from %s", configMapFile, defaultConfigFile)
	}
	cfg, err := config.Parse(bytes.NewReader(want))
	if err != nil {
		t.Fatalf("%s: %v", defaultConfigFile, err)
	}
	def, err := config.Parse(strings.NewReader(""))
	if err != nil {
		t.Fatal(err)
	}
	if !equalConfig(cfg, def) {
		t.Errorf("%s is not the built-in defaults:\n got %+v\nwant %+v", defaultConfigFile, cfg, def)
	}
}

func equalConfig(a, b config.Config) bool {
	ja, erra := sigsyaml.Marshal(a)
	jb, errb := sigsyaml.Marshal(b)
	return erra == nil && errb == nil && bytes.Equal(ja, jb)
}

// imageRepo is the Makefile's IMAGE_REPO, the repository make image names.
func imageRepo(t *testing.T) string {
	t.Helper()
	mk, err := os.ReadFile("../../Makefile")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^IMAGE_REPO\s*\?=\s*(\S+)\s*$`).FindSubmatch(mk)
	if m == nil {
		t.Fatal("Makefile has no IMAGE_REPO ?= line")
	}
	return string(m[1])
}

// mountFor returns the volume behind the container's mount that holds the
// container path p (the longest mountPath above it), and p's path in that
// volume.
func mountFor(spec corev1.PodSpec, c corev1.Container, p string) (corev1.VolumeMount, corev1.Volume, string, bool) {
	var best corev1.VolumeMount
	for _, m := range c.VolumeMounts {
		if (p == m.MountPath || strings.HasPrefix(p, m.MountPath+"/")) && len(m.MountPath) > len(best.MountPath) {
			best = m
		}
	}
	if best.Name == "" {
		return corev1.VolumeMount{}, corev1.Volume{}, "", false
	}
	i := slices.IndexFunc(spec.Volumes, func(v corev1.Volume) bool { return v.Name == best.Name })
	if i < 0 {
		return corev1.VolumeMount{}, corev1.Volume{}, "", false
	}
	return best, spec.Volumes[i], strings.TrimPrefix(p, best.MountPath), true
}

// hostPathOf is where the container path p is on the host, if it is on a
// hostPath volume.
func hostPathOf(t *testing.T, spec corev1.PodSpec, c corev1.Container, p string) (string, corev1.VolumeMount) {
	t.Helper()
	m, v, rest, ok := mountFor(spec, c, p)
	if !ok || v.HostPath == nil {
		t.Errorf("container %s: %s is on no hostPath volume", c.Name, p)
		return "", m
	}
	return v.HostPath.Path + rest, m
}

// The DaemonSet runs the image make image writes, with the config from the
// ConfigMap, and every host path the plugin reads or writes (config
// defaults) mounted from the same host path.
func TestDaemonSet(t *testing.T) {
	ds := only[appsv1.DaemonSet](t, daemonSetFile)
	spec := ds.Spec.Template.Spec
	if spec.PriorityClassName != "system-node-critical" {
		t.Errorf("priorityClassName %q, want system-node-critical", spec.PriorityClassName)
	}
	if !spec.HostPID {
		t.Error("hostPID is off: the plugin reads the host's /proc/1/mountinfo and publishes its host PID")
	}
	// The one annotation: the config's checksum, which rolls the pods when
	// the config changes (no opt-in annotation on the plugin's own pod).
	if a := ds.Spec.Template.Annotations; len(a) != 1 || !regexp.MustCompile(`^[0-9a-f]{64}$`).MatchString(a["checksum/config"]) {
		t.Errorf("the plugin's pod needs only the checksum/config annotation, has %v", a)
	}
	repo := imageRepo(t)
	all := append(slices.Clone(spec.InitContainers), spec.Containers...)
	for _, c := range all {
		if !strings.HasPrefix(c.Image, repo+":") {
			t.Errorf("container %s: image %q is not from %s (Makefile IMAGE_REPO)", c.Name, c.Image, repo)
		}
		if c.ImagePullPolicy != corev1.PullIfNotPresent {
			t.Errorf("container %s: imagePullPolicy %q, want IfNotPresent (an imported image)", c.Name, c.ImagePullPolicy)
		}
		if c.Resources.Requests.Cpu().IsZero() || c.Resources.Requests.Memory().IsZero() || c.Resources.Limits.Memory().IsZero() {
			t.Errorf("container %s: want cpu and memory requests and a memory limit, got %+v", c.Name, c.Resources)
		}
	}
	if len(spec.Containers) != 1 || len(spec.InitContainers) != 1 {
		t.Fatalf("want one init container and one container, got %d and %d", len(spec.InitContainers), len(spec.Containers))
	}
	plugin, initC := spec.Containers[0], spec.InitContainers[0]

	// The config file is the ConfigMap's, which must exist.
	i := slices.Index(plugin.Args, "-config")
	if i < 0 || i+1 >= len(plugin.Args) {
		t.Fatalf("args %q have no -config", plugin.Args)
	}
	cfgPath := plugin.Args[i+1]
	if _, v, rest, ok := mountFor(spec, plugin, cfgPath); !ok || v.ConfigMap == nil {
		t.Errorf("-config %s is not on a ConfigMap volume", cfgPath)
	} else {
		cm := only[corev1.ConfigMap](t, configMapFile)
		if v.ConfigMap.Name != cm.Name || (v.ConfigMap.Optional != nil && *v.ConfigMap.Optional) {
			t.Errorf("config volume %+v: want the ConfigMap %s, not optional", v.ConfigMap, cm.Name)
		}
		if _, ok := cm.Data[path.Base(rest)]; !ok {
			t.Errorf("-config %s: ConfigMap %s has no key %s", cfgPath, cm.Name, path.Base(rest))
		}
	}

	// Host paths, same inside and out, for what the default config
	// points at.
	def := config.Default()
	for _, tc := range []struct {
		what, path string
		readOnly   bool
	}{
		{"NRI socket", api.DefaultSocketPath, false},
		{"cgroupRoot", def.CgroupRoot, false},
		{"featureFile", def.FeatureFile, false},
		{"statusFile", def.StatusFile, false},
		{"kubeletCPUManagerState", def.KubeletCPUManagerState, true},
		{"containerdConfig", def.ContainerdConfig, true},
		{"crioConfig", def.CRIOConfig, true},
		{"crioConfigDir", def.CRIOConfigDir, true},
	} {
		host, m := hostPathOf(t, spec, plugin, tc.path)
		if host != "" && host != tc.path {
			t.Errorf("%s %s is %s on the host", tc.what, tc.path, host)
		}
		if m.ReadOnly != tc.readOnly {
			t.Errorf("%s: mount %s readOnly %v, want %v", tc.what, m.MountPath, m.ReadOnly, tc.readOnly)
		}
	}

	// The init container installs the hook where hookPath says.
	if len(initC.Command) != 3 || initC.Command[1] != "-install-to" || path.Base(initC.Command[0]) != "cgdelegate-hook" {
		t.Fatalf("init container command %q, want cgdelegate-hook -install-to PATH", initC.Command)
	}
	if host, _ := hostPathOf(t, spec, initC, initC.Command[2]); host != "" && host != def.HookPath {
		t.Errorf("the hook is installed at %s on the host, hookPath is %s", host, def.HookPath)
	}
}

// Both containers run with the least privilege the VM scenario
// KubeletDaemonSetPod proves enough: not privileged, every capability
// dropped and none added, no privilege escalation, a read-only root and
// the runtime's default seccomp profile.
func TestDaemonSetLeastPrivilege(t *testing.T) {
	spec := only[appsv1.DaemonSet](t, daemonSetFile).Spec.Template.Spec
	if spec.HostNetwork || spec.HostIPC {
		t.Errorf("hostNetwork %v, hostIPC %v: the plugin needs neither", spec.HostNetwork, spec.HostIPC)
	}
	for _, c := range append(slices.Clone(spec.InitContainers), spec.Containers...) {
		t.Run(c.Name, func(t *testing.T) {
			sc := c.SecurityContext
			if sc == nil {
				t.Fatal("no securityContext")
			}
			for _, tc := range []struct {
				field string
				ok    bool
			}{
				{"privileged: false", sc.Privileged != nil && !*sc.Privileged},
				{"allowPrivilegeEscalation: false", sc.AllowPrivilegeEscalation != nil && !*sc.AllowPrivilegeEscalation},
				{"readOnlyRootFilesystem: true", sc.ReadOnlyRootFilesystem != nil && *sc.ReadOnlyRootFilesystem},
				{"capabilities.drop: [ALL]", sc.Capabilities != nil && slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"})},
				{"no capabilities.add", sc.Capabilities == nil || len(sc.Capabilities.Add) == 0},
				{"seccompProfile: RuntimeDefault", sc.SeccompProfile != nil && sc.SeccompProfile.Type == corev1.SeccompProfileTypeRuntimeDefault},
				{"no procMount, SELinux or AppArmor override", sc.ProcMount == nil && sc.SELinuxOptions == nil && sc.AppArmorProfile == nil},
			} {
				if !tc.ok {
					t.Errorf("want %s, got %+v", tc.field, sc)
				}
			}
		})
	}
}

// The containerd drop-in enables the default validator and requires no
// plugin globally: fail closed per pod, never per node.
func TestContainerdDropIn(t *testing.T) {
	data, err := os.ReadFile("../containerd/cgdelegate.toml")
	if err != nil {
		t.Fatal(err)
	}
	var settings []string
	for _, l := range strings.Split(string(data), "\n") {
		if l = strings.TrimSpace(l); l != "" && !strings.HasPrefix(l, "#") {
			settings = append(settings, l)
		}
	}
	i := slices.Index(settings, `[plugins."io.containerd.nri.v1.nri".default_validator]`)
	if i < 0 || !slices.Contains(settings[i:], "enable = true") {
		t.Error("the default validator is not enabled")
	}
	for _, s := range settings {
		if strings.HasPrefix(s, "required_plugins") || strings.HasPrefix(s, "tolerate_missing_plugins_annotation") {
			t.Errorf("%q: the drop-in must not require plugins globally", s)
		}
	}
	// The timeouts docs/deploying.md, "Request timeouts", explains: above
	// containerd's 2 s default, far below the kubelet's 2 min CRI timeout.
	for key, bounds := range map[string][2]time.Duration{
		"plugin_request_timeout":      {5 * time.Second, 30 * time.Second},
		"plugin_registration_timeout": {5 * time.Second, 30 * time.Second},
	} {
		var value string
		for _, s := range settings {
			if k, v, ok := strings.Cut(s, "="); ok && strings.TrimSpace(k) == key {
				value = strings.Trim(strings.TrimSpace(v), `"`)
			}
		}
		d, err := time.ParseDuration(value)
		if err != nil || d < bounds[0] || d > bounds[1] {
			t.Errorf("%s = %q (%v), want a duration in [%s, %s]", key, value, err, bounds[0], bounds[1])
		}
	}
}

// The two runtimes' drop-ins set the same timeouts (docs/deploying.md,
// "Request timeouts", says why): read as each runtime reads them.
func TestDropInTimeoutsAgree(t *testing.T) {
	var ctd struct {
		Plugins map[string]struct {
			Registration string `toml:"plugin_registration_timeout"`
			Request      string `toml:"plugin_request_timeout"`
		} `toml:"plugins"`
	}
	var crio struct {
		CRIO struct {
			NRI struct {
				Registration string `toml:"nri_plugin_registration_timeout"`
				Request      string `toml:"nri_plugin_request_timeout"`
			} `toml:"nri"`
		} `toml:"crio"`
	}
	if _, err := toml.Decode(contrib.ContainerdDropIn, &ctd); err != nil {
		t.Fatal(err)
	}
	if _, err := toml.Decode(contrib.CRIODropIn, &crio); err != nil {
		t.Fatal(err)
	}
	c, o := ctd.Plugins["io.containerd.nri.v1.nri"], crio.CRIO.NRI
	if c.Request == "" || c.Registration == "" || c.Request != o.Request || c.Registration != o.Registration {
		t.Errorf("containerd's timeouts (request %q, registration %q) and CRI-O's (%q, %q) differ", c.Request, c.Registration, o.Request, o.Registration)
	}
}

// The systemd unit reads the config where make install puts it.
func TestSystemdConfigPath(t *testing.T) {
	unit, err := os.ReadFile("../systemd/cgdelegate.service")
	if err != nil {
		t.Fatal(err)
	}
	mk, err := os.ReadFile("../../Makefile")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^CONFDIR\s*\?=\s*(\S+)\s*$`).FindSubmatch(mk)
	if m == nil {
		t.Fatal("Makefile has no CONFDIR ?= line")
	}
	installed := string(m[1]) + "/config.yaml"
	for _, want := range []string{"-config " + installed, "AssertPathExists=" + installed} {
		if !strings.Contains(string(unit), want) {
			t.Errorf("cgdelegate.service lacks %q (make install writes %s)", want, installed)
		}
	}
	if !strings.Contains(string(mk), "contrib/config.yaml $(DESTDIR)$(CONFDIR)/config.yaml") {
		t.Error("make install does not install contrib/config.yaml as $(CONFDIR)/config.yaml")
	}
}

// The plugin's pod runs as ServiceAccount cgdelegate, in its own namespace,
// with its token mounted in the plugin's container (TestTokenOnlyInPlugin)
// and its node's name in NODE_NAME; the account may get and patch nodes and
// nothing else (node-label-policy.yaml narrows the patch to one label on
// its own node).
func TestNodeLabelRBAC(t *testing.T) {
	ds := only[appsv1.DaemonSet](t, daemonSetFile)
	spec := ds.Spec.Template.Spec
	if spec.ServiceAccountName != "cgdelegate" {
		t.Errorf("serviceAccountName %q, want cgdelegate", spec.ServiceAccountName)
	}
	env := spec.Containers[0].Env
	i := slices.IndexFunc(env, func(e corev1.EnvVar) bool { return e.Name == "NODE_NAME" })
	if i < 0 || env[i].ValueFrom == nil || env[i].ValueFrom.FieldRef == nil || env[i].ValueFrom.FieldRef.FieldPath != "spec.nodeName" {
		t.Errorf("env %+v: want NODE_NAME from fieldRef spec.nodeName", env)
	}
	for _, c := range spec.InitContainers {
		if len(c.Env) != 0 {
			t.Errorf("init container %s has env %+v: it needs none", c.Name, c.Env)
		}
	}

	var (
		sa      *corev1.ServiceAccount
		role    *rbacv1.ClusterRole
		binding *rbacv1.ClusterRoleBinding
	)
	for _, obj := range decodeFile(t, rbacFile) {
		switch o := obj.(type) {
		case *corev1.ServiceAccount:
			sa = o
		case *rbacv1.ClusterRole:
			role = o
		case *rbacv1.ClusterRoleBinding:
			binding = o
		default:
			t.Fatalf("%s: unexpected %T", rbacFile, obj)
		}
	}
	if sa == nil || role == nil || binding == nil {
		t.Fatalf("%s: want a ServiceAccount, a ClusterRole and a ClusterRoleBinding", rbacFile)
	}
	if sa.Name != spec.ServiceAccountName || sa.Namespace != ds.Namespace {
		t.Errorf("ServiceAccount %s/%s, want the DaemonSet's %s/%s", sa.Namespace, sa.Name, ds.Namespace, spec.ServiceAccountName)
	}
	want := []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"nodes"}, Verbs: []string{"get", "patch"}}}
	if len(role.Rules) != 1 || !slices.Equal(role.Rules[0].APIGroups, want[0].APIGroups) ||
		!slices.Equal(role.Rules[0].Resources, want[0].Resources) || !slices.Equal(role.Rules[0].Verbs, want[0].Verbs) ||
		len(role.Rules[0].ResourceNames) != 0 || len(role.Rules[0].NonResourceURLs) != 0 || role.AggregationRule != nil {
		t.Errorf("ClusterRole %s rules %+v, want only %+v", role.Name, role.Rules, want)
	}
	if binding.RoleRef != (rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role.Name}) {
		t.Errorf("ClusterRoleBinding %s roleRef %+v, want ClusterRole %s", binding.Name, binding.RoleRef, role.Name)
	}
	wantSubject := rbacv1.Subject{Kind: rbacv1.ServiceAccountKind, Name: sa.Name, Namespace: sa.Namespace}
	if len(binding.Subjects) != 1 || binding.Subjects[0] != wantSubject {
		t.Errorf("ClusterRoleBinding %s subjects %+v, want only %+v", binding.Name, binding.Subjects, wantSubject)
	}
}

// TestTokenOnlyInPlugin: the service-account token reaches the plugin's
// container only, where the plugin reads it (serviceAccountDir): not the
// pod's automounted token, which the kubelet would put into every
// container, the init container that installs the hook included, but a
// projected volume of the token, the cluster CA and the namespace, mounted
// read-only into the plugin's container alone.
func TestTokenOnlyInPlugin(t *testing.T) {
	spec := only[appsv1.DaemonSet](t, daemonSetFile).Spec.Template.Spec
	if spec.AutomountServiceAccountToken == nil || *spec.AutomountServiceAccountToken {
		t.Fatal("automountServiceAccountToken is not false: the kubelet would mount the token into every container, the init container too")
	}
	tokenVolumes := map[string]bool{}
	for _, v := range spec.Volumes {
		if v.Projected == nil && v.Secret == nil {
			continue
		}
		tokenVolumes[v.Name] = true
		if v.Secret != nil {
			t.Errorf("volume %s: a Secret, want no long-lived token", v.Name)
		}
	}
	saDir := config.Default().ServiceAccountDir
	for _, c := range spec.InitContainers {
		for _, m := range c.VolumeMounts {
			if tokenVolumes[m.Name] || m.MountPath == saDir || strings.HasPrefix(m.MountPath, "/var/run/secrets") {
				t.Errorf("init container %s mounts %s at %s: it needs no token", c.Name, m.Name, m.MountPath)
			}
		}
	}
	plugin := spec.Containers[0]
	m, v, _, ok := mountFor(spec, plugin, saDir+"/token")
	if !ok || m.MountPath != saDir || !m.ReadOnly || v.Projected == nil {
		t.Fatalf("plugin container: %s is on %+v (%+v), want a read-only projected volume at %s", saDir, m, v.VolumeSource, saDir)
	}
	got := map[string]string{}
	for _, src := range v.Projected.Sources {
		switch {
		case src.ServiceAccountToken != nil:
			got[src.ServiceAccountToken.Path] = "token"
			if e := src.ServiceAccountToken.ExpirationSeconds; e == nil || *e > 3600 || src.ServiceAccountToken.Audience != "" {
				t.Errorf("token %+v: want the API server's audience and an expiry of at most an hour", src.ServiceAccountToken)
			}
		case src.ConfigMap != nil && src.ConfigMap.Name == "kube-root-ca.crt":
			for _, it := range src.ConfigMap.Items {
				got[it.Path] = "configMap " + it.Key
			}
		case src.DownwardAPI != nil:
			for _, it := range src.DownwardAPI.Items {
				if it.FieldRef != nil {
					got[it.Path] = "fieldRef " + it.FieldRef.FieldPath
				}
			}
		default:
			t.Errorf("volume %s: source %+v, want only the token, the cluster CA and the namespace", v.Name, src)
		}
	}
	want := map[string]string{"token": "token", "ca.crt": "configMap ca.crt", "namespace": "fieldRef metadata.namespace"}
	if !maps.Equal(got, want) {
		t.Errorf("volume %s holds %v, want %v", v.Name, got, want)
	}
}
