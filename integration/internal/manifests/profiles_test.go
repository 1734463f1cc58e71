package manifests_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"

	"github.com/cgdelegate/cgdelegate/integration/internal/manifests"
)

// engineProfilesPolicy is the template of the engine profiles' admission
// policy (contrib/kubernetes/policy_test.go evaluates its rule).
const engineProfilesPolicy = "engine-profiles-policy.yaml"

// The engine profiles' values add the init container install-profiles,
// which runs `cgdelegate install-profiles` with the flags, mounts and
// capabilities each profile needs and no more (docs/engine-profiles.md);
// the plugin's container and install-hook stay as they are; the defaults
// render neither the container nor the policy.
func TestChartEngineProfiles(t *testing.T) {
	needGo(t)
	type mount struct {
		path, host string
		readOnly   bool
	}
	tests := []struct {
		name      string
		args      []string
		wantCmd   []string
		wantCaps  []corev1.Capability
		wantMount []mount
		wantAA    bool
		policy    bool
	}{
		{
			name:      "seccomp",
			args:      []string{"--set", "engineProfiles.seccomp=true"},
			wantCmd:   []string{"/usr/local/bin/cgdelegate", "install-profiles", "-seccomp-dir", "/host-seccomp/cgdelegate", "-log-format", "json"},
			wantMount: []mount{{"/host-seccomp/cgdelegate", "/var/lib/kubelet/seccomp/cgdelegate", false}},
			policy:    true,
		},
		{
			name:      "seccomp, another kubelet root, no policy",
			args:      []string{"--set", "engineProfiles.seccomp=true", "--set", "engineProfiles.kubeletRootDir=/data/kubelet/", "--set", "admissionPolicy.enabled=false"},
			wantCmd:   []string{"/usr/local/bin/cgdelegate", "install-profiles", "-seccomp-dir", "/host-seccomp/cgdelegate", "-log-format", "json"},
			wantMount: []mount{{"/host-seccomp/cgdelegate", "/data/kubelet/seccomp/cgdelegate", false}},
		},
		{
			name:     "AppArmor",
			args:     []string{"--set", "engineProfiles.appArmor=true"},
			wantCmd:  []string{"/usr/local/bin/cgdelegate", "install-profiles", "-apparmor", "-host-root", "/host", "-log-format", "json"},
			wantCaps: []corev1.Capability{"SYS_CHROOT", "MAC_ADMIN"},
			wantMount: []mount{
				{"/host", "/", true},
				{"/host/etc/apparmor.d", "/etc/apparmor.d", false},
				{"/host/sys/kernel/security", "/sys/kernel/security", false},
			},
			wantAA: true, policy: true,
		},
		{
			name: "both",
			args: []string{"--set", "engineProfiles.seccomp=true", "--set", "engineProfiles.appArmor=true"},
			wantCmd: []string{
				"/usr/local/bin/cgdelegate", "install-profiles", "-seccomp-dir", "/host-seccomp/cgdelegate",
				"-apparmor", "-host-root", "/host", "-log-format", "json",
			},
			wantCaps: []corev1.Capability{"SYS_CHROOT", "MAC_ADMIN"},
			wantMount: []mount{
				{"/host-seccomp/cgdelegate", "/var/lib/kubelet/seccomp/cgdelegate", false},
				{"/host", "/", true},
				{"/host/etc/apparmor.d", "/etc/apparmor.d", false},
				{"/host/sys/kernel/security", "/sys/kernel/security", false},
			},
			wantAA: true, policy: true,
		},
	}
	def := render[appsv1.DaemonSet](t, "daemonset.yaml")
	defSpec := def.Spec.Template.Spec
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			files, err := manifests.Template(context.Background(), root, tc.args...)
			if err != nil {
				t.Fatal(err)
			}
			if _, ok := files[engineProfilesPolicy]; ok != tc.policy {
				t.Errorf("%s rendered %v, want %v", engineProfilesPolicy, ok, tc.policy)
			}
			spec := render[appsv1.DaemonSet](t, "daemonset.yaml", tc.args...).Spec.Template.Spec
			if len(spec.InitContainers) != 2 || spec.InitContainers[0].Name != "install-hook" || spec.InitContainers[1].Name != "install-profiles" {
				t.Fatalf("init containers %d, want install-hook then install-profiles", len(spec.InitContainers))
			}
			// Nothing else changes: the plugin's container and install-hook
			// are the default's.
			if !equalJSON(t, spec.Containers, defSpec.Containers) || !equalJSON(t, spec.InitContainers[0], defSpec.InitContainers[0]) {
				t.Error("the plugin's container or install-hook differ from the default render")
			}
			c := spec.InitContainers[1]
			if !slices.Equal(c.Command, tc.wantCmd) || len(c.Args) != 0 {
				t.Errorf("command %q args %q, want %q", c.Command, c.Args, tc.wantCmd)
			}
			if c.Image != defSpec.Containers[0].Image || c.ImagePullPolicy != defSpec.Containers[0].ImagePullPolicy {
				t.Errorf("image %s %s, want the plugin's", c.Image, c.ImagePullPolicy)
			}
			if c.Resources.Requests.Memory().IsZero() || c.Resources.Limits.Memory().IsZero() {
				t.Errorf("resources %+v, want requests and a memory limit", c.Resources)
			}
			if len(c.Env) != 0 || len(c.Ports) != 0 {
				t.Errorf("env %v ports %v, want none", c.Env, c.Ports)
			}
			sc := c.SecurityContext
			if sc == nil || sc.Capabilities == nil {
				t.Fatal("no securityContext or capabilities")
			}
			for _, check := range []struct {
				field string
				ok    bool
			}{
				{"privileged: false", sc.Privileged != nil && !*sc.Privileged},
				{"allowPrivilegeEscalation: false", sc.AllowPrivilegeEscalation != nil && !*sc.AllowPrivilegeEscalation},
				{"readOnlyRootFilesystem: true", sc.ReadOnlyRootFilesystem != nil && *sc.ReadOnlyRootFilesystem},
				{"capabilities.drop: [ALL]", slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"})},
				{fmt.Sprintf("capabilities.add: %v", tc.wantCaps), slices.Equal(sc.Capabilities.Add, tc.wantCaps)},
				{"seccompProfile: RuntimeDefault", sc.SeccompProfile != nil && sc.SeccompProfile.Type == corev1.SeccompProfileTypeRuntimeDefault},
				{"appArmorProfile Unconfined only for AppArmor", (sc.AppArmorProfile != nil && sc.AppArmorProfile.Type == corev1.AppArmorProfileTypeUnconfined) == tc.wantAA && (sc.AppArmorProfile == nil) != tc.wantAA},
				{"no runAsUser, procMount or SELinux override", sc.RunAsUser == nil && sc.ProcMount == nil && sc.SELinuxOptions == nil},
			} {
				if !check.ok {
					t.Errorf("want %s, got %+v", check.field, sc)
				}
			}
			if len(c.VolumeMounts) != len(tc.wantMount) {
				t.Errorf("mounts %+v, want %d", c.VolumeMounts, len(tc.wantMount))
			}
			for _, w := range tc.wantMount {
				host, m := hostPathOf(t, spec, c, w.path)
				if host != w.host || m.MountPath != w.path || m.ReadOnly != w.readOnly {
					t.Errorf("%s: host %s mount %+v, want the node's %s (readOnly %v)", w.path, host, m, w.host, w.readOnly)
				}
				if w.readOnly && (m.RecursiveReadOnly == nil || *m.RecursiveReadOnly != corev1.RecursiveReadOnlyIfPossible) {
					t.Errorf("%s: recursiveReadOnly %v, want IfPossible", w.path, m.RecursiveReadOnly)
				}
			}
			// The volumes other than the default's are exactly those the
			// mounts use.
			extra := map[string]bool{}
			for _, v := range spec.Volumes {
				if !slices.ContainsFunc(defSpec.Volumes, func(d corev1.Volume) bool { return d.Name == v.Name }) {
					extra[v.Name] = true
				}
			}
			for _, m := range c.VolumeMounts {
				delete(extra, m.Name)
			}
			if len(extra) != 0 {
				t.Errorf("volumes %v are mounted by no container", extra)
			}
		})
	}
	files, err := manifests.Template(context.Background(), root)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := files[engineProfilesPolicy]; ok {
		t.Errorf("the default values render %s", engineProfilesPolicy)
	}
	if len(defSpec.InitContainers) != 1 {
		t.Errorf("the default values render %d init containers, want install-hook alone", len(defSpec.InitContainers))
	}
}

// equalJSON reports whether a and b marshal to the same JSON.
func equalJSON(t *testing.T, a, b any) bool {
	t.Helper()
	ja, erra := json.Marshal(a)
	jb, errb := json.Marshal(b)
	if err := errors.Join(erra, errb); err != nil {
		t.Fatal(err)
	}
	return bytes.Equal(ja, jb)
}

// NOTES.txt says where the profiles are, how pods name them, and how to
// remove them after helm uninstall; without the values it says nothing of
// them.
func TestChartEngineProfilesNotes(t *testing.T) {
	needGo(t)
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
	n := notes("--set", "engineProfiles.seccomp=true", "--set", "engineProfiles.appArmor=true", "--set", "engineProfiles.kubeletRootDir=/data/kubelet")
	for _, want := range []string{
		"/data/kubelet/seccomp/cgdelegate/engines.json", "localhostProfile: cgdelegate/engines.json",
		"/etc/apparmor.d/cgdelegate-engines", "localhostProfile: cgdelegate-engines",
		"kubectl -n ops logs ds/team-a-cgdelegate -c install-profiles",
		"spec.hostUsers: false (ValidatingAdmissionPolicy\nteam-a-cgdelegate-engine-profiles)",
		"apparmor_parser -R /etc/apparmor.d/cgdelegate-engines && rm /etc/apparmor.d/cgdelegate-engines",
		"rm -f /data/kubelet/seccomp/cgdelegate/engines.json",
	} {
		if !strings.Contains(n, want) {
			t.Errorf("NOTES lack %q:\n%s", want, n)
		}
	}
	if n := notes(); strings.Contains(n, "install-profiles") || strings.Contains(n, "engines") {
		t.Errorf("NOTES of the defaults mention the engine profiles:\n%s", n)
	}
}
