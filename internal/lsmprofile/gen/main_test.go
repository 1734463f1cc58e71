package main

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/containerd/containerd/v2/contrib/apparmor"
)

// The committed profiles are what the generator writes: run
// `go generate ./internal/lsmprofile` from the module root when this fails.
func TestCommittedProfiles(t *testing.T) {
	for _, arch := range []string{"amd64", "arm64"} {
		t.Run(arch, func(t *testing.T) {
			want, err := Generate(arch)
			if err != nil {
				t.Fatal(err)
			}
			file := filepath.Join("..", "engines-"+arch+".json")
			got, err := os.ReadFile(file)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, want) {
				t.Errorf("%s differs from what the generator writes: run go generate ./internal/lsmprofile", file)
			}
		})
	}
}

func TestGenerateRefusesUnknownArch(t *testing.T) {
	if _, err := Generate("riscv64"); err == nil {
		t.Error("Generate(riscv64) succeeded, want an error naming -arch")
	}
}

// appArmorRules returns a profile's rules, one per line: comments, blank
// lines, the abi line and variable definitions left out, @{PROC} written
// as /proc/, each rule once, sorted.
func appArmorRules(text string) []string {
	var out []string
	for l := range strings.Lines(text) {
		l, _, _ = strings.Cut(l, "#")
		l = strings.TrimSpace(strings.ReplaceAll(l, "@{PROC}/", "/proc/"))
		if l == "" || strings.HasPrefix(l, "abi ") || strings.HasPrefix(l, "@{") {
			continue
		}
		out = append(out, l)
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// The AppArmor profile is containerd's default profile (as this
// containerd renders it) with its three documented changes: mount allowed
// instead of denied, pivot_root allowed, /proc/sys/net writable.
func TestAppArmorFollowsContainerd(t *testing.T) {
	const name = "cgdelegate-engines"
	theirs, err := apparmor.DumpDefaultProfile(name)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(theirs, "#include") {
		t.Skip("this machine has /etc/apparmor.d: containerd's profile includes its abstractions; compare on a machine without")
	}
	want := appArmorRules(theirs)
	change := map[string]string{"deny mount,": "mount,", "deny /proc/sys/[^k]** w,": "deny /proc/sys/[^kn]** w,"}
	for i, r := range want {
		n, ok := change[r]
		if !ok {
			continue
		}
		want[i] = n
		delete(change, r)
	}
	if len(change) != 0 {
		t.Fatalf("containerd's profile has no rule %q any more: revisit ../cgdelegate-engines", change)
	}
	want = append(want, "pivot_root,")
	if rk := slices.IndexFunc(want, func(r string) bool { return strings.Contains(r, "rootlesskit") }); rk >= 0 {
		want = slices.Delete(want, rk, rk+1)
	}
	slices.Sort(want)
	want = slices.Compact(want)
	ours, err := os.ReadFile(filepath.Join("..", name))
	if err != nil {
		t.Fatal(err)
	}
	got := appArmorRules(string(ours))
	if !slices.Equal(got, want) {
		t.Errorf("../%s differs from containerd's profile with the three changes:\n got %q\nwant %q", name, got, want)
	}
}
