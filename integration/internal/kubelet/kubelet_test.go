package kubelet

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"
)

func validConfig(d CgroupDriver) Config {
	return Config{CgroupDriver: d, StaticPodPath: "/etc/kubernetes/manifests", RuntimeEndpoint: "unix:///run/containerd/containerd.sock"}
}

func TestConfigYAML(t *testing.T) {
	for _, d := range []CgroupDriver{CgroupFS, Systemd} {
		t.Run(string(d), func(t *testing.T) {
			c := validConfig(d)
			c.FeatureGates = map[string]bool{"PodLevelResources": true}
			b, err := c.YAML()
			if err != nil {
				t.Fatal(err)
			}
			var got map[string]any
			if err := yaml.Unmarshal(b, &got); err != nil {
				t.Fatalf("%v\n%s", err, b)
			}
			want := map[string]any{
				"apiVersion": "kubelet.config.k8s.io/v1beta1", "kind": "KubeletConfiguration",
				"cgroupDriver": string(d), "staticPodPath": c.StaticPodPath, "containerRuntimeEndpoint": c.RuntimeEndpoint,
				"failSwapOn": false, "readOnlyPort": float64(DefaultReadOnlyPort), "cpuManagerPolicy": "none",
				"localStorageCapacityIsolation": false,
			}
			for k, v := range want {
				if got[k] != v {
					t.Errorf("%s = %#v, want %#v", k, got[k], v)
				}
			}
			if s := string(b); !strings.Contains(s, "mode: AlwaysAllow") || !strings.Contains(s, "memory.available: 0%") ||
				!strings.Contains(s, "PodLevelResources: true") {
				t.Errorf("config lacks authorization, eviction or feature gates:\n%s", s)
			}
		})
	}
}

func TestConfigResourceManagers(t *testing.T) {
	c := validConfig(CgroupFS)
	c.CPUManagerPolicy, c.ReservedSystemCPUs = "static", "0"
	c.TopologyManagerPolicy, c.TopologyManagerScope = "best-effort", "pod"
	c.MemoryManagerPolicy = "Static"
	c.ReservedMemory = []MemoryReservation{{NUMANode: 0, Memory: "96Mi"}, {NUMANode: 1, Memory: "32Mi"}}
	b, err := c.YAML()
	if err != nil {
		t.Fatal(err)
	}
	var got struct {
		CPUManagerPolicy      string            `json:"cpuManagerPolicy"`
		ReservedSystemCPUs    string            `json:"reservedSystemCPUs"`
		TopologyManagerPolicy string            `json:"topologyManagerPolicy"`
		TopologyManagerScope  string            `json:"topologyManagerScope"`
		MemoryManagerPolicy   string            `json:"memoryManagerPolicy"`
		SystemReserved        map[string]string `json:"systemReserved"`
		ReservedMemory        []struct {
			NUMANode int               `json:"numaNode"`
			Limits   map[string]string `json:"limits"`
		} `json:"reservedMemory"`
	}
	if err := yaml.Unmarshal(b, &got); err != nil {
		t.Fatalf("%v\n%s", err, b)
	}
	if got.CPUManagerPolicy != "static" || got.ReservedSystemCPUs != "0" || got.TopologyManagerPolicy != "best-effort" ||
		got.TopologyManagerScope != "pod" || got.MemoryManagerPolicy != "Static" {
		t.Errorf("resource managers not written:\n%s", b)
	}
	if got.SystemReserved["memory"] != "128Mi" {
		t.Errorf("systemReserved %v, want memory 128Mi (the sum of reservedMemory)", got.SystemReserved)
	}
	if len(got.ReservedMemory) != 2 || got.ReservedMemory[1].NUMANode != 1 || got.ReservedMemory[1].Limits["memory"] != "32Mi" {
		t.Errorf("reservedMemory %+v", got.ReservedMemory)
	}
	// Without them, none of the fields is written.
	b, err = validConfig(CgroupFS).YAML()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"reservedSystemCPUs", "topologyManager", "memoryManagerPolicy", "systemReserved", "reservedMemory"} {
		if strings.Contains(string(b), f) {
			t.Errorf("default config writes %s:\n%s", f, b)
		}
	}
}

func TestConfigInvalid(t *testing.T) {
	tests := []struct {
		name   string
		modify func(*Config)
		words  []string
	}{
		{"unknown driver", func(c *Config) { c.CgroupDriver = "sytemd" }, []string{"CgroupDriver", `"sytemd"`}},
		{"relative manifests", func(c *Config) { c.StaticPodPath = "manifests" }, []string{"StaticPodPath", `"manifests"`}},
		{"tcp endpoint", func(c *Config) { c.RuntimeEndpoint = "tcp://x" }, []string{"RuntimeEndpoint", `"tcp://x"`}},
		{"cpu manager", func(c *Config) { c.CPUManagerPolicy = "dynamic" }, []string{"CPUManagerPolicy", `"dynamic"`}},
		{"port", func(c *Config) { c.ReadOnlyPort = 70000 }, []string{"ReadOnlyPort", `"70000"`}},
		{"static without reserved cpus", func(c *Config) { c.CPUManagerPolicy = "static" }, []string{"ReservedSystemCPUs", "reserved CPUs"}},
		{"reserved cpus", func(c *Config) { c.ReservedSystemCPUs = "0-" }, []string{"ReservedSystemCPUs", `"0-"`}},
		{"topology policy", func(c *Config) { c.TopologyManagerPolicy = "best_effort" }, []string{"TopologyManagerPolicy", `"best_effort"`}},
		{"topology scope", func(c *Config) { c.TopologyManagerScope = "node" }, []string{"TopologyManagerScope", `"node"`}},
		{"memory policy", func(c *Config) { c.MemoryManagerPolicy = "static" }, []string{"MemoryManagerPolicy", `"static"`}},
		{"static memory without reservation", func(c *Config) { c.MemoryManagerPolicy = "Static" }, []string{"ReservedMemory", "Static"}},
		{"reserved memory", func(c *Config) {
			c.ReservedMemory = []MemoryReservation{{NUMANode: 0, Memory: "lots"}, {NUMANode: 0, Memory: "1Mi"}}
		}, []string{"ReservedMemory[0].Memory", `"lots"`, "ReservedMemory[1].NUMANode"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := validConfig(CgroupFS)
			tc.modify(&c)
			_, err := c.YAML()
			if !errors.Is(err, ErrInvalidConfig) {
				t.Fatalf("YAML() error %v, want ErrInvalidConfig", err)
			}
			for _, w := range tc.words {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not name %s", err, w)
				}
			}
		})
	}
}

const manifest = `apiVersion: v1
kind: Pod
metadata:
  name: box
  annotations:
    writable-cgroups.noderesource.dev: "true"
spec:
  containers:
  - name: work
    image: cgd.local/busybox:1
    resources:
      limits:
        memory: 64Mi
`

func TestDecodePod(t *testing.T) {
	p, err := DecodePod([]byte(manifest))
	if err != nil {
		t.Fatal(err)
	}
	if p.Name != "box" || p.Annotations["writable-cgroups.noderesource.dev"] != "true" || p.Spec.Containers[0].Resources.Limits.Memory().String() != "64Mi" {
		t.Errorf("decoded %+v", p)
	}
	for _, tc := range []struct{ name, in, word string }{
		{"unknown field", strings.Replace(manifest, "  containers:", "  containerz: []\n  containers:", 1), "containerz"},
		{"not a pod", strings.Replace(manifest, "kind: Pod", "kind: Deployment", 1), "Deployment"},
		{"no name", strings.Replace(manifest, "name: box", "name: \"\"", 1), "metadata.name"},
		{"no containers", strings.SplitN(manifest, "  containers:", 2)[0], "no containers"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := DecodePod([]byte(tc.in))
			if !errors.Is(err, ErrInvalidManifest) || !strings.Contains(err.Error(), tc.word) {
				t.Errorf("DecodePod: %v, want ErrInvalidManifest naming %s", err, tc.word)
			}
		})
	}
}

func TestStaticPods(t *testing.T) {
	s := StaticPods{Dir: filepath.Join(t.TempDir(), "manifests")}
	p, err := DecodePod([]byte(manifest))
	if err != nil {
		t.Fatal(err)
	}
	path, err := s.Write(p)
	if err != nil {
		t.Fatal(err)
	}
	entries, err := os.ReadDir(s.Dir)
	if err != nil || len(entries) != 1 || entries[0].Name() != "box.yaml" || path != filepath.Join(s.Dir, "box.yaml") {
		t.Fatalf("directory after Write: %v %v (path %s)", entries, err, path)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	back, err := DecodePod(b)
	if err != nil || back.Name != "box" || back.Spec.Containers[0].Image != "cgd.local/busybox:1" {
		t.Errorf("written manifest does not decode back: %v %+v", err, back)
	}
	if err := s.Remove("box"); err != nil {
		t.Fatal(err)
	}
	if err := s.Remove("box"); err != nil {
		t.Errorf("second Remove: %v", err)
	}
	if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("manifest still there: %v", err)
	}
	if _, err := s.Write(&corev1.Pod{}); !errors.Is(err, ErrInvalidManifest) {
		t.Errorf("Write of a pod without a name: %v", err)
	}
	if got := StaticPodName("box", "cgd-vm"); got != "box-cgd-vm" {
		t.Errorf("StaticPodName = %q", got)
	}
}

// podsJSON is /pods of a kubelet with one running and one refused container
// (the shape of kubelet 1.37's answer, trimmed).
const podsJSON = `{"kind":"PodList","apiVersion":"v1","metadata":{},"items":[
{"metadata":{"name":"box-cgd-vm","namespace":"default","uid":"0b1c"},
 "spec":{"containers":[{"name":"work","image":"cgd.local/busybox:1"},{"name":"other","image":"cgd.local/busybox:1"}]},
 "status":{"phase":"Pending","qosClass":"Burstable","containerStatuses":[
  {"name":"work","state":{"running":{"startedAt":"2026-11-23T12:00:00Z"}},"ready":true,"restartCount":0,"image":"cgd.local/busybox:1","imageID":"","containerID":"containerd://abc123"},
  {"name":"other","state":{"waiting":{"reason":"CreateContainerError","message":"cgdelegate: no nsdelegate"}},"ready":false,"restartCount":0,"image":"cgd.local/busybox:1","imageID":""}]}}]}`

func TestClient(t *testing.T) {
	var calls atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/healthz":
			_, _ = w.Write([]byte("ok"))
		case "/pods":
			// The pod appears on the third request.
			if calls.Add(1) < 3 {
				_, _ = w.Write([]byte(`{"kind":"PodList","apiVersion":"v1","items":[]}`))
				return
			}
			_, _ = w.Write([]byte(podsJSON))
		default:
			http.NotFound(w, r)
		}
	}))
	defer srv.Close()
	c := NewClient(srv.URL + "/")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := c.Healthz(ctx); err != nil {
		t.Fatal(err)
	}
	p, err := c.WaitPod(ctx, "default", "box-cgd-vm", time.Millisecond, func(p *corev1.Pod) (bool, error) { return Running(p, "work"), nil })
	if err != nil {
		t.Fatal(err)
	}
	if n := calls.Load(); n != 3 {
		t.Errorf("WaitPod returned after %d requests, want 3", n)
	}
	id, err := ContainerID(ContainerStatus(p, "work"))
	if err != nil || id != "abc123" {
		t.Errorf("ContainerID = %q, %v", id, err)
	}
	other := ContainerStatus(p, "other")
	if other == nil || other.State.Waiting == nil || other.State.Waiting.Reason != "CreateContainerError" {
		t.Fatalf("other: %+v", other)
	}
	if _, err := ContainerID(other); err == nil {
		t.Errorf("ContainerID of a container never created: no error")
	}
	d := Describe(p)
	for _, w := range []string{"qos=Burstable", "work: restarts=0 running", `other: restarts=0 waiting CreateContainerError: "cgdelegate: no nsdelegate"`} {
		if !strings.Contains(d, w) {
			t.Errorf("Describe = %q, want %q", d, w)
		}
	}

	short, cancelShort := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancelShort()
	_, err = c.WaitPod(short, "default", "box-cgd-vm", time.Millisecond, func(*corev1.Pod) (bool, error) { return false, nil })
	if !errors.Is(err, ErrWait) || !strings.Contains(err.Error(), "waiting CreateContainerError") {
		t.Errorf("WaitPod timeout: %v, want ErrWait with the last view", err)
	}
	if err := NewClient(srv.URL + "/nothing").Healthz(ctx); err == nil {
		t.Errorf("Healthz of a 404: no error")
	}
}

func TestPodCgroup(t *testing.T) {
	pod := func(qos corev1.PodQOSClass) *corev1.Pod {
		p := &corev1.Pod{}
		p.Name, p.UID, p.Status.QOSClass = "p", "1a2b-3c", qos
		return p
	}
	tests := []struct {
		driver CgroupDriver
		qos    corev1.PodQOSClass
		want   string
	}{
		{CgroupFS, corev1.PodQOSGuaranteed, "kubepods/pod1a2b-3c"},
		{CgroupFS, corev1.PodQOSBurstable, "kubepods/burstable/pod1a2b-3c"},
		{CgroupFS, corev1.PodQOSBestEffort, "kubepods/besteffort/pod1a2b-3c"},
		{Systemd, corev1.PodQOSGuaranteed, "kubepods.slice/kubepods-pod1a2b_3c.slice"},
		{Systemd, corev1.PodQOSBurstable, "kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod1a2b_3c.slice"},
		{Systemd, corev1.PodQOSBestEffort, "kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod1a2b_3c.slice"},
	}
	for _, tc := range tests {
		t.Run(string(tc.driver)+"/"+string(tc.qos), func(t *testing.T) {
			got, err := PodCgroup(tc.driver, pod(tc.qos))
			if err != nil || got != tc.want {
				t.Errorf("PodCgroup = %q, %v; want %q", got, err, tc.want)
			}
		})
	}
	for _, tc := range []struct {
		name   string
		driver CgroupDriver
		pod    *corev1.Pod
		word   string
	}{
		{"no qos yet", CgroupFS, pod(""), "qosClass"},
		{"no uid", CgroupFS, &corev1.Pod{}, "UID"},
		{"bad driver", "cgroupv1", pod(corev1.PodQOSBurstable), "cgroupv1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := PodCgroup(tc.driver, tc.pod); err == nil || !strings.Contains(err.Error(), tc.word) {
				t.Errorf("PodCgroup: %v, want an error naming %s", err, tc.word)
			}
		})
	}
}
