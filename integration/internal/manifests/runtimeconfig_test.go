package manifests_test

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"

	"github.com/cgdelegate/cgdelegate/contrib"
	"github.com/cgdelegate/cgdelegate/integration/internal/manifests"
)

// runtimeConfig.install adds the init container install-nri-config, first,
// as root with no capability: the runtime's config directories read-write,
// systemd's private socket only to restart; the defaults render none of it
// and the plugin's container and the other init containers stay as they
// are.
func TestChartRuntimeConfig(t *testing.T) {
	needGo(t)
	type mount struct {
		path, volume, host string
	}
	ctdMount := mount{"/etc/containerd", "containerd-config", "/etc/containerd"}
	crioMount := mount{"/etc/crio", "crio-config", "/etc/crio"}
	sdMount := mount{"/run/systemd/private", "systemd-private", "/run/systemd/private"}
	tests := []struct {
		name      string
		args      []string
		wantCmd   []string
		wantMount []mount
	}{
		{
			name:      "install, auto, restart",
			args:      []string{"--set", "runtimeConfig.install=true"},
			wantCmd:   []string{"/usr/local/bin/cgdelegate", "install-nri-config", "-runtime", "auto", "-restart=true", "-log-format", "json"},
			wantMount: []mount{ctdMount, crioMount, sdMount},
		},
		{
			name:      "containerd, restart",
			args:      []string{"--set", "runtimeConfig.install=true", "--set", "runtimeConfig.runtime=containerd"},
			wantCmd:   []string{"/usr/local/bin/cgdelegate", "install-nri-config", "-runtime", "containerd", "-restart=true", "-log-format", "json"},
			wantMount: []mount{ctdMount, sdMount},
		},
		{
			name:      "cri-o, no restart",
			args:      []string{"--set", "runtimeConfig.install=true", "--set", "runtimeConfig.runtime=cri-o", "--set", "runtimeConfig.restart=false"},
			wantCmd:   []string{"/usr/local/bin/cgdelegate", "install-nri-config", "-runtime", "cri-o", "-restart=false", "-log-format", "json"},
			wantMount: []mount{crioMount},
		},
	}
	def := render[appsv1.DaemonSet](t, "daemonset.yaml").Spec.Template.Spec
	for _, c := range def.InitContainers {
		if c.Name == "install-nri-config" {
			t.Fatal("the defaults render install-nri-config")
		}
	}
	for _, v := range def.Volumes {
		if v.Name == "systemd-private" {
			t.Fatal("the defaults mount systemd's private socket")
		}
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			spec := render[appsv1.DaemonSet](t, "daemonset.yaml", tc.args...).Spec.Template.Spec
			if len(spec.InitContainers) != len(def.InitContainers)+1 || spec.InitContainers[0].Name != "install-nri-config" {
				t.Fatalf("init containers %d, want install-nri-config then the default's", len(spec.InitContainers))
			}
			if !equalJSON(t, spec.Containers, def.Containers) || !equalJSON(t, spec.InitContainers[1:], def.InitContainers) || spec.HostPID != def.HostPID {
				t.Error("the plugin's container, the other init containers or hostPID differ from the default render")
			}
			c := spec.InitContainers[0]
			if !slices.Equal(c.Command, tc.wantCmd) || len(c.Args) != 0 {
				t.Errorf("command %q args %q, want %q", c.Command, c.Args, tc.wantCmd)
			}
			if c.Image != def.Containers[0].Image {
				t.Errorf("image %s, want the plugin's", c.Image)
			}
			sc := c.SecurityContext
			if sc == nil || sc.Privileged == nil || *sc.Privileged || sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation ||
				sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem || sc.Capabilities == nil ||
				!slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) || len(sc.Capabilities.Add) != 0 ||
				sc.SeccompProfile == nil || sc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault || sc.AppArmorProfile != nil {
				t.Errorf("securityContext %+v: want unprivileged, no capability, RuntimeDefault seccomp, read-only root", sc)
			}
			var got []mount
			for _, m := range c.VolumeMounts {
				host := ""
				for _, v := range spec.Volumes {
					if v.Name == m.Name && v.HostPath != nil {
						host = v.HostPath.Path
					}
				}
				if m.ReadOnly {
					t.Errorf("mount %s read-only", m.MountPath)
				}
				got = append(got, mount{m.MountPath, m.Name, host})
			}
			if !slices.Equal(got, tc.wantMount) {
				t.Errorf("mounts %+v, want %+v", got, tc.wantMount)
			}
			// The plugin's container keeps the runtime's config read-only.
			for _, m := range spec.Containers[0].VolumeMounts {
				if (m.Name == "containerd-config" || m.Name == "crio-config") && !m.ReadOnly {
					t.Errorf("the plugin mounts %s read-write", m.MountPath)
				}
				if m.Name == "systemd-private" {
					t.Error("the plugin mounts systemd's private socket")
				}
			}
		})
	}
	if _, err := manifests.Template(t.Context(), root, "--set", "runtimeConfig.install=true", "--set", "runtimeConfig.restart=false"); err == nil ||
		!strings.Contains(err.Error(), `runtimeConfig.runtime "auto" asks systemd`) {
		t.Errorf("restart false with runtime auto: %v, want a render error naming runtimeConfig.runtime", err)
	}
}

// The drop-ins have one source, contrib's files, embedded in the binary
// (package contrib); the chart's copies under files/ are the same, and
// NOTES.txt shows them whole when the chart does not install them.
func TestChartDropIns(t *testing.T) {
	needGo(t)
	for file, text := range map[string]string{
		"containerd-cgdelegate.toml": contrib.ContainerdDropIn,
		"crio-10-cgdelegate.conf":    contrib.CRIODropIn,
	} {
		got, err := os.ReadFile(filepath.Join(root, manifests.ChartDir, "files", file))
		if err != nil {
			t.Fatal(err)
		}
		if string(got) != text {
			t.Errorf("chart's files/%s differs from contrib's (cp contrib/containerd/cgdelegate.toml contrib/helm/cgdelegate/files/containerd-cgdelegate.toml; cp contrib/crio/10-cgdelegate.conf contrib/helm/cgdelegate/files/crio-10-cgdelegate.conf)", file)
		}
	}
	notes := func(args ...string) string {
		t.Helper()
		out, err := manifests.Helm(t.Context(), root, append([]string{"install", "team-a", manifests.ChartDir, "--namespace", "ops", "--dry-run=client"}, args...)...)
		if err != nil {
			t.Fatal(err)
		}
		_, n, ok := strings.Cut(string(out), "NOTES:\n")
		if !ok {
			t.Fatalf("no NOTES in\n%s", out)
		}
		return n
	}
	indent := func(s string) string {
		lines := strings.Split(strings.TrimSuffix(s, "\n"), "\n")
		for i, l := range lines {
			lines[i] = strings.TrimRight("    "+l, " ")
		}
		return strings.Join(lines, "\n")
	}
	n := notes()
	trimmed := func(s string) string { // helm's indent leaves the blank lines' spaces
		lines := strings.Split(s, "\n")
		for i, l := range lines {
			lines[i] = strings.TrimRight(l, " ")
		}
		return strings.Join(lines, "\n")
	}(n)
	for _, text := range []string{contrib.ContainerdDropIn, contrib.CRIODropIn} {
		if !strings.Contains(trimmed, indent(text)) {
			t.Errorf("NOTES lack the drop-in\n%s\nin\n%s", indent(text), n)
		}
	}
	if strings.Contains(n, "contrib/containerd/cgdelegate.toml") {
		t.Error("NOTES name a file of the repository instead of showing the drop-in")
	}
	n = notes("--set", "runtimeConfig.install=true")
	if strings.Contains(n, "[crio.nri]") || !strings.Contains(n, "kubectl -n ops logs ds/team-a-cgdelegate -c install-nri-config") {
		t.Errorf("NOTES with runtimeConfig.install show the drop-in or lack the init container's log command:\n%s", n)
	}
}
