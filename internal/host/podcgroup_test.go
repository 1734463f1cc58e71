package host

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestCheckPodCgroup(t *testing.T) {
	tests := []struct {
		name   string
		parent string // as the runtime reports it, resolved with PodPath
		// wantMsg is in the refusal; empty: accepted.
		wantMsg string
	}{
		// What real runtimes send (containerd and CRI-O, as the kubelet
		// asks them), and CRI clients' own parents.
		{"cgroupfs guaranteed", "/kubepods/pod0f0b8a8e-6c1d-4b7e-9a55-3d2c1b0a9f8e", ""},
		{"cgroupfs burstable", "/kubepods/burstable/pod0f0b8a8e-6c1d-4b7e-9a55-3d2c1b0a9f8e", ""},
		{"cgroupfs best-effort", "/kubepods/besteffort/pod0f0b8a8e-6c1d-4b7e-9a55-3d2c1b0a9f8e", ""},
		{"cgroupfs, kubelet cgroup root /k8s", "/k8s/kubepods/burstable/pod0f0b8a8e", ""},
		{"systemd guaranteed", "kubepods-pod0f0b8a8e_6c1d_4b7e_9a55_3d2c1b0a9f8e.slice", ""},
		{"systemd burstable", "kubepods-burstable-pod0f0b8a8e_6c1d_4b7e_9a55_3d2c1b0a9f8e.slice", ""},
		{"systemd best-effort", "kubepods-besteffort-pod0f0b8a8e_6c1d_4b7e_9a55_3d2c1b0a9f8e.slice", ""},
		{"systemd, kubelet cgroup root k8s.slice", "k8s-kubepods-burstable-pod0f0b8a8e.slice", ""},
		{"crictl cgroupfs parent", "/mypod", ""},
		{"crictl systemd parent", "pod_123-456.slice", ""},
		{"crictl parent in a slice of its own", "system-mypods.slice", ""},
		{"nested custom parent", "/tenants/a/pod-x", ""},
		// Node-wide or shared cgroups.
		{"root", "/", `"/" is the cgroup root`},
		{"root, spelled //", "//", `"/" is the cgroup root`},
		{"cgroupfs kubepods", "/kubepods", "every pod"},
		{"cgroupfs kubepods, relative", "kubepods", "every pod"},
		{"cgroupfs burstable QoS", "/kubepods/burstable", "every burstable pod"},
		{"cgroupfs best-effort QoS", "/kubepods/besteffort/", "every best-effort pod"},
		{"systemd kubepods", "kubepods.slice", "every pod"},
		{"systemd burstable QoS", "kubepods-burstable.slice", "every burstable pod"},
		{"systemd best-effort QoS", "kubepods-besteffort.slice", "every best-effort pod"},
		{"systemd kubepods, custom root", "k8s-kubepods.slice", "every pod"},
		{"systemd QoS, custom root", "k8s-kubepods-burstable.slice", `below the kubelet's "k8s-kubepods.slice"`},
		{"cgroupfs, custom root, QoS", "/k8s/kubepods/besteffort", "every best-effort pod"},
		{"below kubepods, not a pod", "/kubepods/other", `below the kubelet's "kubepods"`},
		{"a container of a pod", "/kubepods/burstable/pod1/ctr1", `below the kubelet's "kubepods"`},
		{"system.slice", "system.slice", "every system service"},
		{"systemd root slice", "-.slice", "is the cgroup root"},
		{"user.slice", "/user.slice", "every user session"},
		{"machine.slice", "machine.slice", "every virtual machine"},
		{"init.scope", "/init.scope", "init process"},
		{"the runtime's service", "/system.slice/containerd.service", "systemd unit"},
		{"a container's scope", "/kubepods.slice/kubepods-pod1.slice/cri-containerd-abc.scope", "systemd unit"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			rel, err := PodPath(tc.parent)
			if err != nil {
				t.Fatalf("PodPath(%q): %v", tc.parent, err)
			}
			err = CheckPodCgroup(rel)
			if tc.wantMsg == "" {
				if err != nil {
					t.Fatalf("CheckPodCgroup(%q) = %v, want accepted", rel, err)
				}
				return
			}
			if !errors.Is(err, ErrSharedCgroup) {
				t.Fatalf("CheckPodCgroup(%q) = %v, want ErrSharedCgroup", rel, err)
			}
			if !strings.Contains(err.Error(), tc.wantMsg) || !strings.Contains(err.Error(), rel) {
				t.Errorf("CheckPodCgroup(%q) = %q, want it to name %q and say %q", rel, err, rel, tc.wantMsg)
			}
		})
	}
}

// TestFSCheckPodCgroup: a cgroup named like a pod's own that holds the
// kubelet's cgroups, or other pods, is refused; a pod cgroup holding its
// containers is not.
func TestFSCheckPodCgroup(t *testing.T) {
	tests := []struct {
		name     string
		rel      string
		children []string
		// wantMsg is in the refusal; empty: accepted.
		wantMsg string
	}{
		{"cgroupfs pod with containers", "/kubepods/burstable/pod1", []string{"0f3c9a7e5b", "4a1d2c"}, ""},
		{"systemd pod with containers", "/kubepods.slice/kubepods-pod1.slice", []string{"cri-containerd-0f3c.scope", "crio-conmon-4a1d.scope"}, ""},
		{"CRI client's pod with a container", "/mypod", []string{"0f3c9a7e5b"}, ""},
		{"not created yet", "/mypod", nil, ""},
		{"kubelet cgroup root /k8s", "/k8s", []string{"kubepods"}, `"/k8s" holds "kubepods"`},
		{"kubelet cgroup root k8s.slice", "/k8s.slice", []string{"k8s-kubepods.slice"}, `holds "k8s-kubepods.slice"`},
		{"a CRI client's pods", "/tenants", []string{"pod-a", "pod-b"}, `holds "pod-a"`},
		{"systemd pods", "/tenants.slice", []string{"tenants-poda.slice"}, `holds "tenants-poda.slice"`},
		{"the system's slices", "/machine", []string{"system.slice"}, `holds "system.slice"`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			fs := NewFS(root, filepath.Join(root, "sys"))
			for _, c := range tc.children {
				if err := os.MkdirAll(filepath.Join(fs.Dir(tc.rel), c), 0o755); err != nil {
					t.Fatal(err)
				}
			}
			err := fs.CheckPodCgroup(tc.rel)
			if tc.wantMsg == "" {
				if err != nil {
					t.Fatalf("CheckPodCgroup(%q) = %v, want accepted", tc.rel, err)
				}
				return
			}
			if !errors.Is(err, ErrSharedCgroup) || !strings.Contains(err.Error(), tc.wantMsg) {
				t.Fatalf("CheckPodCgroup(%q) = %v, want ErrSharedCgroup saying %q", tc.rel, err, tc.wantMsg)
			}
			if _, err := fs.ApplyBounds(tc.rel, Bounds{Descendants: 10, Depth: 2}); !errors.Is(err, ErrSharedCgroup) {
				t.Fatalf("ApplyBounds(%q) = %v, want ErrSharedCgroup", tc.rel, err)
			}
		})
	}
}
