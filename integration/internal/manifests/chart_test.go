package manifests_test

import (
	"bytes"
	"context"
	"errors"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	sigsyaml "sigs.k8s.io/yaml"

	"github.com/cgdelegate/cgdelegate/integration/internal/manifests"
	"github.com/cgdelegate/cgdelegate/internal/config"
)

// needGo skips when there is no Go toolchain to run `go tool helm` with
// (the tests run from a test binary copied elsewhere).
func needGo(t *testing.T) {
	t.Helper()
	if _, err := exec.LookPath("go"); err != nil {
		t.Skipf("no go on PATH to run go tool helm: %v", err)
	}
}

// The plain manifests, and the copies the package embeds, are what
// `make manifests` writes from the chart; contrib/kubernetes holds no other
// YAML.
func TestGeneratedManifests(t *testing.T) {
	needGo(t)
	files, err := manifests.Generate(context.Background(), root)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{
		"daemonset.yaml", "configmap.yaml", "writable-cgroups-policy.yaml",
		"writable-cgroups-userns-policy.yaml", "writable-cgroups-status-policy.yaml", "namespace-label-policy.yaml",
		"node-label-rbac.yaml", "node-label-policy.yaml", uninstallPolicyFile,
	} {
		if _, ok := files[filepath.Join(manifests.PlainDir, name)]; !ok {
			t.Errorf("the chart renders no %s with its default values", name)
		}
	}
	// Helm hooks stay out: kubectl apply would run the uninstall Job at
	// once.
	if _, ok := files[filepath.Join(manifests.PlainDir, uninstallFile)]; ok {
		t.Errorf("the plain manifests hold the helm hooks of %s", uninstallFile)
	}
	for name, data := range files {
		if bytes.Contains(data, []byte("helm.sh/hook")) {
			t.Errorf("%s holds a helm hook", name)
		}
	}
	for name, want := range files {
		got, err := os.ReadFile(filepath.Join(root, name))
		switch {
		case err != nil:
			t.Errorf("%v: run make manifests", err)
		case !bytes.Equal(got, want):
			t.Errorf("%s differs from the chart rendered with its defaults: run make manifests", name)
		}
	}
	for _, dir := range []string{manifests.PlainDir, manifests.EmbeddedDir} {
		onDisk, err := filepath.Glob(filepath.Join(root, dir, "*.yaml"))
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range onDisk {
			rel, err := filepath.Rel(root, f)
			if err != nil {
				t.Fatal(err)
			}
			if _, ok := files[rel]; !ok {
				t.Errorf("%s is not rendered from the chart: move it into contrib/helm/cgdelegate/templates and run make manifests", rel)
			}
		}
	}
}

// Values the schema refuses fail helm template with the value's path named;
// values the templates refuse fail with the value and the reason.
func TestChartRefusesBadValues(t *testing.T) {
	needGo(t)
	const schema = "values don't meet the specifications of the schema"
	tests := []struct {
		name string
		args []string
		want []string
	}{
		{"misspelt top-level key", []string{"--set", "imagee.tag=v1"}, []string{schema, "additional properties 'imagee' not allowed"}},
		{"misspelt nested key", []string{"--set", "nodeLabel.enable=false"}, []string{schema, "/nodeLabel", "'enable' not allowed"}},
		{"misspelt key in resources", []string{"--set", "resources.plugin.limit.memory=1Gi"}, []string{schema, "/resources/plugin", "'limit' not allowed"}},
		{"string for a bool", []string{"--set-string", "metrics.enabled=true"}, []string{schema, "/metrics/enabled", "got string, want boolean"}},
		{"word for a bool", []string{"--set", "nodeLabel.enabled=yes"}, []string{schema, "/nodeLabel/enabled", "got string, want boolean"}},
		{"unknown cgroupDriver", []string{"--set", "cgroupDriver=cgroupv1"}, []string{schema, "/cgroupDriver", "'systemd', 'cgroupfs'"}},
		{"unknown pullPolicy", []string{"--set", "image.pullPolicy=Sometimes"}, []string{schema, "/image/pullPolicy"}},
		{"port out of range", []string{"--set", "metrics.port=70000"}, []string{schema, "/metrics/port"}},
		{"namespace that is no DNS label", []string{"--set-json", `admissionPolicy.allowedNamespaces=["a') || true || ('"]`}, []string{schema, "/admissionPolicy/allowedNamespaces/0"}},
		{"runtime class that is no DNS subdomain", []string{"--set-json", `admissionPolicy.writableRuntimeClasses=["a'] || true || ['"]`}, []string{schema, "/admissionPolicy/writableRuntimeClasses/0"}},
		{"runtime class with capitals", []string{"--set-json", `admissionPolicy.writableRuntimeClasses=["Kata"]`}, []string{schema, "/admissionPolicy/writableRuntimeClasses/0"}},
		{"config not a map", []string{"--set", "config=guard"}, []string{schema, "/config", "got string, want object"}},
		{"misspelt engineProfiles key", []string{"--set", "engineProfiles.apparmor=true"}, []string{schema, "/engineProfiles", "'apparmor' not allowed"}},
		{"word for engineProfiles.seccomp", []string{"--set", "engineProfiles.seccomp=yes"}, []string{schema, "/engineProfiles/seccomp", "got string, want boolean"}},
		{"relative kubeletRootDir", []string{"--set", "engineProfiles.kubeletRootDir=var/lib/kubelet"}, []string{schema, "/engineProfiles/kubeletRootDir"}},
		{"misspelt resources.installProfiles", []string{"--set", "resources.installProfile.limits.memory=1Gi"}, []string{schema, "/resources", "'installProfile' not allowed"}},
		{"serviceMonitor without metrics", []string{"--set", "metrics.serviceMonitor.enabled=true"}, []string{"metrics.serviceMonitor.enabled true needs metrics.enabled true"}},
		{"prometheusRule without metrics", []string{"--set", "metrics.prometheusRule.enabled=true"}, []string{"metrics.prometheusRule.enabled true needs metrics.enabled true"}},
		{"createContainerMilliseconds of 1000", []string{"--set", "metrics.prometheusRule.createContainerMilliseconds=1000"}, []string{schema, "/metrics/prometheusRule/createContainerMilliseconds"}},
		{"delegatedCgroupsPercent above 100", []string{"--set", "metrics.prometheusRule.delegatedCgroupsPercent=101"}, []string{schema, "/metrics/prometheusRule/delegatedCgroupsPercent"}},
		{"job with a quote", []string{"--set", `metrics.prometheusRule.job=a"b`}, []string{schema, "/metrics/prometheusRule/job"}},
		{"runbookURL with an anchor", []string{"--set", "metrics.prometheusRule.runbookURL=https://example.com/x.md#a"}, []string{schema, "/metrics/prometheusRule/runbookURL"}},
		{"misspelt grafanaDashboard key", []string{"--set", "metrics.grafanaDashboard.label.x=1"}, []string{schema, "/metrics/grafanaDashboard", "'label' not allowed"}},
		{
			"metricsAddress with metrics.enabled",
			[]string{"--set", "metrics.enabled=true", "--set", "config.metricsAddress=127.0.0.1:1"},
			[]string{`config.metricsAddress "127.0.0.1:1"`, `":9767" from metrics.port`},
		},
		{
			"profiling with metrics.enabled",
			[]string{"--set", "metrics.enabled=true", "--set", "config.profiling=true"},
			[]string{"config.profiling true with metrics.enabled", `":9767"`, "pod network", "127.0.0.1:9767"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			files, err := manifests.Template(context.Background(), root, tc.args...)
			if err == nil {
				t.Fatalf("rendered %d files, want an error", len(files))
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not name %q", err, w)
				}
			}
		})
	}
}

// render renders the chart with args and strictly decodes the one object
// of type T in template file.
func render[T any](t *testing.T, file string, args ...string) *T {
	t.Helper()
	files, err := manifests.Template(context.Background(), root, args...)
	if err != nil {
		t.Fatal(err)
	}
	data, ok := files[file]
	if !ok {
		t.Fatalf("%v renders no %s", args, file)
	}
	obj := new(T)
	if err := sigsyaml.UnmarshalStrict(data, obj); err != nil {
		t.Fatalf("%s: %v", file, err)
	}
	return obj
}

// The config value reaches config.yaml as the plugin reads it: the
// defaults render the built-in defaults, a changed key is changed, and
// metrics.enabled adds a metricsAddress the plugin accepts.
func TestChartConfig(t *testing.T) {
	needGo(t)
	parse := func(args ...string) (config.Config, string) {
		t.Helper()
		cm := render[corev1.ConfigMap](t, "configmap.yaml", args...)
		text := cm.Data["config.yaml"]
		cfg, err := config.Parse(strings.NewReader(text))
		if err != nil {
			t.Fatalf("%v: the plugin refuses the rendered config: %v\n%s", args, err, text)
		}
		return cfg, text
	}
	def, text := parse()
	if !equalYAML(t, def, config.Default()) || !strings.Contains(text, "every key below is the built-in default") {
		t.Errorf("default values: config %+v is not the built-in defaults, or lacks the defaults' header:\n%s", def, text)
	}
	cfg, text := parse("--set", "config.guard=warn", "--set", "config.maxDepth=7", "--set", "metrics.enabled=true", "--set", "metrics.port=9100")
	want := config.Default()
	want.Guard, want.MaxDepth, want.MetricsAddress = "warn", 7, ":9100"
	if !equalYAML(t, cfg, want) {
		t.Errorf("config %+v, want %+v", cfg, want)
	}
	if strings.Contains(text, "every key below is the built-in default") {
		t.Errorf("a changed config keeps the defaults' header:\n%s", text)
	}
	ds := render[appsv1.DaemonSet](t, "daemonset.yaml", "--set", "metrics.enabled=true", "--set", "metrics.port=9100")
	ports := ds.Spec.Template.Spec.Containers[0].Ports
	if len(ports) != 1 || ports[0].Name != "metrics" || ports[0].ContainerPort != 9100 {
		t.Errorf("ports %+v, want metrics 9100", ports)
	}
	// A bad key or value never reaches the ConfigMap: the schema refuses
	// it (TestChartRefusesBadConfig).
}

func equalYAML(t *testing.T, a, b config.Config) bool {
	t.Helper()
	ya, erra := sigsyaml.Marshal(a)
	yb, errb := sigsyaml.Marshal(b)
	if err := errors.Join(erra, errb); err != nil {
		t.Fatal(err)
	}
	return bytes.Equal(ya, yb)
}

// nodeLabel.enabled false renders no account, RBAC or policy (nor the
// uninstall Job and its own), and the pod gets no token and no NODE_NAME.
func TestChartNodeLabelOff(t *testing.T) {
	needGo(t)
	files, err := manifests.Template(context.Background(), root, "--set", "nodeLabel.enabled=false")
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"node-label-rbac.yaml", "node-label-policy.yaml", uninstallFile, uninstallPolicyFile, "node-label-uninstall-hook-policy.yaml"} {
		if _, ok := files[f]; ok {
			t.Errorf("%s rendered with nodeLabel.enabled false", f)
		}
	}
	ds := render[appsv1.DaemonSet](t, "daemonset.yaml", "--set", "nodeLabel.enabled=false")
	spec := ds.Spec.Template.Spec
	if spec.ServiceAccountName != "" || spec.AutomountServiceAccountToken == nil || *spec.AutomountServiceAccountToken {
		t.Errorf("serviceAccountName %q automountServiceAccountToken %v, want none and false", spec.ServiceAccountName, spec.AutomountServiceAccountToken)
	}
	if len(spec.Containers[0].Env) != 0 {
		t.Errorf("env %+v, want none", spec.Containers[0].Env)
	}
	for _, v := range spec.Volumes {
		if manifests.IsTokenVolume(v) {
			t.Errorf("volume %s: a service-account token with nodeLabel.enabled false", v.Name)
		}
	}
	for _, m := range spec.Containers[0].VolumeMounts {
		if strings.HasPrefix(m.MountPath, "/var/run/secrets") {
			t.Errorf("mount %+v with nodeLabel.enabled false, want no token", m)
		}
	}
}

// The scheduling values reach the pod template.
func TestChartScheduling(t *testing.T) {
	needGo(t)
	ds := render[appsv1.DaemonSet](t, "daemonset.yaml",
		"--set", "nodeSelector.cgdelegate\\.io/pool=a", "--set-json", `tolerations=[{"key":"x","operator":"Equal","value":"y","effect":"NoSchedule"}]`,
		"--set", "priorityClassName=", "--set", "image.repository=registry.example/cgd", "--set", "image.tag=v1",
		"--set", "resources.plugin.limits.memory=1Gi")
	spec := ds.Spec.Template.Spec
	// The values' nodeSelector is merged over the default, Linux nodes.
	if want := map[string]string{"cgdelegate.io/pool": "a", "kubernetes.io/os": "linux"}; !maps.Equal(spec.NodeSelector, want) {
		t.Errorf("nodeSelector %v, want %v", spec.NodeSelector, want)
	}
	if len(spec.Tolerations) != 1 || spec.Tolerations[0].Key != "x" || spec.Tolerations[0].Effect != corev1.TaintEffectNoSchedule {
		t.Errorf("tolerations %+v", spec.Tolerations)
	}
	if spec.PriorityClassName != "" {
		t.Errorf("priorityClassName %q, want none", spec.PriorityClassName)
	}
	for _, c := range append(slices.Clone(spec.InitContainers), spec.Containers...) {
		if c.Image != "registry.example/cgd:v1" {
			t.Errorf("container %s: image %q", c.Name, c.Image)
		}
	}
	if m := spec.Containers[0].Resources.Limits.Memory().String(); m != "1Gi" {
		t.Errorf("memory limit %s, want 1Gi", m)
	}
}

// The ServiceMonitor scrapes the Service's metrics port, which selects the
// plugin's pods.
func TestChartServiceMonitor(t *testing.T) {
	needGo(t)
	args := []string{
		"--set", "metrics.enabled=true", "--set", "metrics.serviceMonitor.enabled=true", "--set", "metrics.serviceMonitor.interval=30s",
		"--set", "metrics.serviceMonitor.labels.release=prometheus",
	}
	files, err := manifests.Template(context.Background(), root, args...)
	if err != nil {
		t.Fatal(err)
	}
	docs := strings.Split(string(files["servicemonitor.yaml"]), "\n---\n")
	if len(docs) != 2 {
		t.Fatalf("servicemonitor.yaml: %d documents, want a Service and a ServiceMonitor", len(docs))
	}
	var svc corev1.Service
	if err := sigsyaml.UnmarshalStrict([]byte(docs[0]), &svc); err != nil {
		t.Fatal(err)
	}
	// No ServiceMonitor type in the module: the fields the Prometheus
	// Operator reads.
	var sm struct {
		APIVersion string `json:"apiVersion"`
		Kind       string `json:"kind"`
		Metadata   struct {
			Namespace string            `json:"namespace"`
			Labels    map[string]string `json:"labels"`
		} `json:"metadata"`
		Spec struct {
			Selector struct {
				MatchLabels map[string]string `json:"matchLabels"`
			} `json:"selector"`
			Endpoints []struct {
				Port        string `json:"port"`
				Path        string `json:"path"`
				Interval    string `json:"interval"`
				Relabelings []struct {
					Action       string   `json:"action"`
					SourceLabels []string `json:"sourceLabels"`
					TargetLabel  string   `json:"targetLabel"`
				} `json:"relabelings"`
			} `json:"endpoints"`
		} `json:"spec"`
	}
	if err := sigsyaml.Unmarshal([]byte(docs[1]), &sm); err != nil {
		t.Fatal(err)
	}
	ds := render[appsv1.DaemonSet](t, "daemonset.yaml", args...)
	for k, v := range svc.Spec.Selector {
		if ds.Spec.Template.Labels[k] != v {
			t.Errorf("Service selector %v does not select the pod's labels %v", svc.Spec.Selector, ds.Spec.Template.Labels)
		}
	}
	for k, v := range sm.Spec.Selector.MatchLabels {
		if svc.Labels[k] != v {
			t.Errorf("ServiceMonitor selector %v does not select the Service's labels %v", sm.Spec.Selector.MatchLabels, svc.Labels)
		}
	}
	if sm.APIVersion != "monitoring.coreos.com/v1" || sm.Kind != "ServiceMonitor" || sm.Metadata.Namespace != manifests.Namespace ||
		sm.Metadata.Labels["release"] != "prometheus" || len(sm.Spec.Endpoints) != 1 ||
		sm.Spec.Endpoints[0].Port != "metrics" || sm.Spec.Endpoints[0].Path != "/metrics" || sm.Spec.Endpoints[0].Interval != "30s" {
		t.Errorf("ServiceMonitor %+v", sm)
	}
	// Every series gets the node's name as node, which the dashboard's
	// variable and the alerts' summaries use (TestChartGrafanaDashboard).
	if r := sm.Spec.Endpoints[0].Relabelings; len(r) != 1 || r[0].Action != "replace" ||
		!slices.Equal(r[0].SourceLabels, []string{"__meta_kubernetes_pod_node_name"}) || r[0].TargetLabel != nodeLabel {
		t.Errorf("ServiceMonitor relabelings %+v, want __meta_kubernetes_pod_node_name replaced into %s", r, nodeLabel)
	}
	if len(svc.Spec.Ports) != 1 || svc.Spec.Ports[0].Port != 9767 || svc.Spec.Ports[0].TargetPort.StrVal != "metrics" {
		t.Errorf("Service ports %+v, want 9767 to the pod's metrics port", svc.Spec.Ports)
	}
	if _, ok := files["servicemonitor.yaml"]; !ok {
		t.Error("no servicemonitor.yaml")
	}
	def, err := manifests.Template(context.Background(), root)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := def["servicemonitor.yaml"]; ok {
		t.Error("the default values render a ServiceMonitor")
	}
}

// A config change changes the pod template (checksum/config), so helm
// upgrade rolls the pods; the same config keeps it.
func TestChartConfigChecksum(t *testing.T) {
	needGo(t)
	sum := func(args ...string) string {
		t.Helper()
		ds := render[appsv1.DaemonSet](t, "daemonset.yaml", args...)
		s := ds.Spec.Template.Annotations["checksum/config"]
		if len(s) != 64 {
			t.Fatalf("%v: checksum/config %q, want a sha256", args, s)
		}
		return s
	}
	def, again := sum(), sum()
	changed := sum("--set", "config.maxDepth=7")
	metrics := sum("--set", "metrics.enabled=true")
	if def != again {
		t.Errorf("the same values give checksums %s and %s", def, again)
	}
	if changed == def || metrics == def {
		t.Errorf("a changed config keeps checksum/config %s (maxDepth 7: %s, metrics on: %s)", def, changed, metrics)
	}
}

// The readiness probe runs the plugin's status -ready with the config the
// plugin runs with.
func TestChartReadinessProbe(t *testing.T) {
	needGo(t)
	ds := render[appsv1.DaemonSet](t, "daemonset.yaml")
	c := ds.Spec.Template.Spec.Containers[0]
	p := c.ReadinessProbe
	if p == nil || p.Exec == nil {
		t.Fatalf("container %s: readinessProbe %+v, want an exec probe", c.Name, p)
	}
	want := []string{"/usr/local/bin/cgdelegate", "status", "-ready", "-config", "/etc/cgdelegate/config.yaml"}
	if !slices.Equal(p.Exec.Command, want) {
		t.Errorf("probe command %q, want %q", p.Exec.Command, want)
	}
	if i := slices.Index(c.Args, "-config"); i < 0 || i+1 >= len(c.Args) || c.Args[i+1] != want[4] {
		t.Errorf("plugin args %q: not the probe's -config %s", c.Args, want[4])
	}
	if p.PeriodSeconds < 5 || p.PeriodSeconds > 30 || p.TimeoutSeconds < 5 {
		t.Errorf("probe period %ds timeout %ds: want a modest period (5-30 s) and a timeout a slow node meets", p.PeriodSeconds, p.TimeoutSeconds)
	}
}

// The install-hook container installs the hook at the config's hookPath,
// from a hostPath volume of its directory.
func TestChartHookPath(t *testing.T) {
	needGo(t)
	for _, tc := range []struct{ hookPath, dir string }{
		{"", "/usr/local/bin"},
		{"/opt/cgdelegate/bin/hook", "/opt/cgdelegate/bin"},
	} {
		var args []string
		want := config.DefaultHookPath
		if tc.hookPath != "" {
			args, want = []string{"--set", "config.hookPath=" + tc.hookPath}, tc.hookPath
		}
		ds := render[appsv1.DaemonSet](t, "daemonset.yaml", args...)
		spec := ds.Spec.Template.Spec
		ic := spec.InitContainers[0]
		if i := slices.Index(ic.Command, "-install-to"); i < 0 || i+1 >= len(ic.Command) {
			t.Fatalf("%v: install-hook command %q has no -install-to", args, ic.Command)
		} else if got, m := hostPathOf(t, spec, ic, ic.Command[i+1]); got != want || m.ReadOnly {
			t.Errorf("%v: install-hook writes %s on the node (-install-to %s, mount read-only %t), want %s, writable", args, got, ic.Command[i+1], m.ReadOnly, want)
		}
		for _, v := range spec.Volumes {
			if v.Name == "host-bin" && v.HostPath.Path != tc.dir {
				t.Errorf("%v: host-bin volume %s, want %s", args, v.HostPath.Path, tc.dir)
			}
		}
	}
}

// Every object's name starts with the release's (cgdelegate.fullname), and
// the policies and bindings name that release's service accounts: a
// release team-a renders no object of the default release's names.
func TestChartReleaseName(t *testing.T) {
	needGo(t)
	out, err := manifests.Helm(t.Context(), root, "template", "team-a", manifests.ChartDir, "--namespace", "ops",
		"--set", "metrics.enabled=true", "--set", "metrics.serviceMonitor.enabled=true", "--set", "admissionPolicy.requireUserNamespace=true",
		"--set", "metrics.prometheusRule.enabled=true", "--set", "metrics.grafanaDashboard.enabled=true")
	if err != nil {
		t.Fatal(err)
	}
	files, err := manifests.Split(out)
	if err != nil {
		t.Fatal(err)
	}
	type object struct {
		Kind     string `json:"kind"`
		Metadata struct {
			Name   string            `json:"name"`
			Labels map[string]string `json:"labels"`
		} `json:"metadata"`
	}
	n := 0
	for file, data := range files {
		for doc := range strings.SplitSeq(string(data), "\n---\n") {
			var o object
			if err := sigsyaml.Unmarshal([]byte(doc), &o); err != nil {
				t.Fatalf("%s: %v", file, err)
			}
			n++
			if !strings.HasPrefix(o.Metadata.Name, "team-a-cgdelegate") {
				t.Errorf("%s: %s %q does not carry the release's name team-a-cgdelegate", file, o.Kind, o.Metadata.Name)
			}
			if o.Metadata.Labels != nil && o.Metadata.Labels["app.kubernetes.io/instance"] != "team-a" {
				t.Errorf("%s: %s %s labels %v, want app.kubernetes.io/instance team-a", file, o.Kind, o.Metadata.Name, o.Metadata.Labels)
			}
		}
		if strings.Contains(string(data), ":cgdelegate'") || strings.Contains(string(data), ":cgdelegate-uninstall'") {
			t.Errorf("%s names the default release's service account", file)
		}
	}
	if n < 17 {
		t.Errorf("%d objects rendered, want every template's", n)
	}
	for _, tc := range []struct{ release, want string }{
		{"cgdelegate", "cgdelegate"},
		{"my-cgdelegate-2", "my-cgdelegate-2"},
		{"a-very-long-release-name-that-goes-on-and-on", "a-very-long-release-name-that-goes-on-and"},
	} {
		out, err := manifests.Helm(t.Context(), root, "template", tc.release, manifests.ChartDir, "--show-only", "templates/daemonset.yaml")
		if err != nil {
			t.Fatal(err)
		}
		var ds appsv1.DaemonSet
		if err := sigsyaml.Unmarshal(out, &ds); err != nil {
			t.Fatal(err)
		}
		if ds.Name != tc.want {
			t.Errorf("release %s: DaemonSet %q, want %q", tc.release, ds.Name, tc.want)
		}
	}
}

// NOTES.txt gives commands that work after a helm install: kubectl exec
// into the release's DaemonSet with the plugin's config, no command to run
// on the node; and it says what uninstall leaves on the nodes.
func TestChartNotes(t *testing.T) {
	needGo(t)
	out, err := manifests.Helm(t.Context(), root, "install", "team-a", manifests.ChartDir, "--namespace", "ops", "--dry-run=client",
		"--set", "config.hookPath=/opt/cgd/hook")
	if err != nil {
		t.Fatal(err)
	}
	_, notes, ok := strings.Cut(string(out), "NOTES:\n")
	if !ok {
		t.Fatalf("no NOTES in\n%s", out)
	}
	for _, want := range []string{
		"kubectl -n ops exec ds/team-a-cgdelegate -c cgdelegate -- /usr/local/bin/cgdelegate status -config /etc/cgdelegate/config.yaml",
		"kubectl -n ops logs ds/team-a-cgdelegate -c cgdelegate",
		"kubectl get nodes -l cgdelegate.io/supports-cgroup-options=true",
		"rm -f /opt/cgd/hook /run/cgdelegate/status.json",
	} {
		if !strings.Contains(notes, want) {
			t.Errorf("NOTES lack %q:\n%s", want, notes)
		}
	}
	if strings.Contains(notes, "on the node)") {
		t.Errorf("NOTES give a command to run on the node:\n%s", notes)
	}
}

// events.enabled renders the pod Events' ClusterRole and policy (with the
// node label's account); false renders neither and turns the plugin's
// podEvents off; with nodeLabel.enabled false there is no account, so
// neither is rendered either.
func TestChartEvents(t *testing.T) {
	needGo(t)
	files := []string{"pod-events-rbac.yaml", "pod-events-policy.yaml"}
	tests := []struct {
		name     string
		args     []string
		rendered bool
		want     config.NodeLabelMode
	}{
		{name: "default", rendered: true, want: config.NodeLabelAuto},
		{name: "events off", args: []string{"--set", "events.enabled=false"}, want: config.NodeLabelOff},
		{name: "node label off", args: []string{"--set", "nodeLabel.enabled=false"}, want: config.NodeLabelAuto},
		{name: "config podEvents on", args: []string{"--set", "config.podEvents=on"}, rendered: true, want: config.NodeLabelOn},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			out, err := manifests.Template(context.Background(), root, tc.args...)
			if err != nil {
				t.Fatal(err)
			}
			for _, f := range files {
				if _, ok := out[f]; ok != tc.rendered {
					t.Errorf("%s rendered %v, want %v", f, ok, tc.rendered)
				}
			}
			cm := render[corev1.ConfigMap](t, "configmap.yaml", tc.args...)
			cfg, err := config.Parse(strings.NewReader(cm.Data["config.yaml"]))
			if err != nil {
				t.Fatal(err)
			}
			if cfg.PodEvents != tc.want {
				t.Errorf("podEvents %q, want %q", cfg.PodEvents, tc.want)
			}
		})
	}
	if _, err := manifests.Template(context.Background(), root, "--set", "events.enabled=maybe"); err == nil {
		t.Error("events.enabled=maybe rendered; want the schema's refusal")
	}
}
