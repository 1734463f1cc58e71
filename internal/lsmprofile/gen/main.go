// Command gen writes internal/lsmprofile's seccomp profiles,
// engines-amd64.json and engines-arm64.json: containerd's RuntimeDefault
// (contrib/seccomp DefaultProfile, of the containerd version in go.mod) for
// a container holding containerd's default capabilities plus CAP_SYS_ADMIN
// and CAP_NET_ADMIN, plus one rule allowing keyctl and pivot_root, as a flat
// OCI LinuxSeccomp (what containerd reads from a Localhost profile).
//
//	go run . -arch amd64 -o ../engines-amd64.json
//	go run . -arch arm64 -o ../engines-arm64.json
//
// or `go generate ./internal/lsmprofile` from cgdelegate's module root.
//
// DefaultProfile reads runtime.GOARCH, so the generator cannot ask it for
// another architecture: it builds the profile for its own (amd64 or arm64)
// and, for the other, swaps the architecture list and the one
// architecture-specific group of allowed calls (amd64: arch_prctl,
// modify_ldt; arm64: arm_fadvise64_64, ... set_tls), as DefaultProfile's
// own switches would. DefaultProfile also allows ptrace and
// process_vm_readv/writev only on kernels 4.8 and later, reading the running
// kernel: the generator refuses to write a profile without them.
//
// A module of its own: it requires containerd, which cgdelegate's module
// must not. The test of this module (go test in this directory) fails when
// the committed files differ from what it writes.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"

	"github.com/containerd/containerd/v2/contrib/seccomp"
	"github.com/containerd/containerd/v2/core/containers"
	"github.com/containerd/containerd/v2/pkg/namespaces"
	"github.com/containerd/containerd/v2/pkg/oci"
	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// AddedCapabilities are the capabilities the engine pods add to
// containerd's defaults (docs/stories/docker.md): the profile is
// RuntimeDefault for exactly this set.
var AddedCapabilities = []string{"CAP_SYS_ADMIN", "CAP_NET_ADMIN"}

// Extra are the calls the engines need beyond RuntimeDefault: runc and
// crun join a session keyring (keyctl) and switch roots (pivot_root).
var Extra = []string{"keyctl", "pivot_root"}

// archs are the architectures the release builds: each one's seccomp
// architectures (contrib/seccomp's arches()) and its group of
// architecture-specific calls (DefaultProfile's switch on runtime.GOARCH).
var archs = map[string]struct {
	arches []specs.Arch
	group  []string
}{
	"amd64": {
		arches: []specs.Arch{specs.ArchX86_64, specs.ArchX86, specs.ArchX32},
		group:  []string{"arch_prctl", "modify_ldt"},
	},
	"arm64": {
		arches: []specs.Arch{specs.ArchARM, specs.ArchAARCH64},
		group:  []string{"arm_fadvise64_64", "arm_sync_file_range", "sync_file_range2", "breakpoint", "cacheflush", "set_tls"},
	},
}

func main() {
	arch := flag.String("arch", runtime.GOARCH, "the profile's architecture: amd64 or arm64")
	out := flag.String("o", "", "write the profile to this file (atomically); empty: standard output")
	flag.Parse()
	if err := run(*arch, *out); err != nil {
		fmt.Fprintln(os.Stderr, "gen:", err)
		os.Exit(1)
	}
}

func run(arch, out string) error {
	data, err := Generate(arch)
	if err != nil {
		return err
	}
	if out == "" {
		_, err := os.Stdout.Write(data)
		return err
	}
	return writeAtomic(out, data)
}

// Generate returns the profile for arch as indented JSON, ending in a
// newline.
func Generate(arch string) ([]byte, error) {
	target, ok := archs[arch]
	if !ok {
		return nil, fmt.Errorf("-arch %q: want amd64 or arm64", arch)
	}
	own, ok := archs[runtime.GOARCH]
	if !ok {
		return nil, fmt.Errorf("the generator runs on %s: DefaultProfile's architecture-specific rules are known here for amd64 and arm64 only; run it on one of those", runtime.GOARCH)
	}
	// The spec containerd's CRI plugin starts from (its default
	// capabilities), with the engines' capabilities added.
	ctx := namespaces.WithNamespace(context.Background(), "k8s.io")
	spec, err := oci.GenerateSpec(ctx, nil, &containers.Container{ID: "engines"}, oci.WithAddedCapabilities(AddedCapabilities))
	if err != nil {
		return nil, fmt.Errorf("containerd's default spec: %w", err)
	}
	if spec.Process == nil || spec.Process.Capabilities == nil {
		return nil, errors.New("containerd's default spec has no capabilities")
	}
	p := seccomp.DefaultProfile(spec)
	if !slices.ContainsFunc(p.Syscalls, func(sc specs.LinuxSyscall) bool {
		return sc.Action == specs.ActAllow && slices.Contains(sc.Names, "ptrace") && len(sc.Args) == 0
	}) {
		return nil, errors.New("DefaultProfile left out ptrace and process_vm_readv/writev: it does so on kernels before 4.8; run the generator on a newer kernel")
	}
	i := slices.IndexFunc(p.Syscalls, func(sc specs.LinuxSyscall) bool { return slices.Equal(sc.Names, own.group) })
	if i < 0 {
		return nil, fmt.Errorf("DefaultProfile has no rule allowing exactly %q (the %s group): containerd changed; update archs", own.group, runtime.GOARCH)
	}
	if !slices.Equal(p.Architectures, own.arches) {
		return nil, fmt.Errorf("DefaultProfile's architectures are %q, want %q for %s: containerd changed; update archs", p.Architectures, own.arches, runtime.GOARCH)
	}
	p.Architectures = slices.Clone(target.arches)
	p.Syscalls[i].Names = slices.Clone(target.group)
	p.Syscalls = append(p.Syscalls, specs.LinuxSyscall{Names: slices.Clone(Extra), Action: specs.ActAllow})
	data, err := json.MarshalIndent(p, "", "  ")
	if err != nil {
		return nil, err
	}
	return append(data, '\n'), nil
}

// writeAtomic replaces path with data: a temp file in its directory,
// renamed over it.
func writeAtomic(path string, data []byte) (err error) {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			_ = os.Remove(tmp.Name())
		}
	}()
	if _, err := tmp.Write(data); err != nil {
		_ = tmp.Close()
		return err
	}
	if err := tmp.Chmod(0o644); err != nil {
		_ = tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}
