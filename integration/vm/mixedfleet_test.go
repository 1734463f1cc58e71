//go:build integration_vm

package vm

// The second node of the cluster boot (variant.MixedFleetNode): a smaller
// VM without nsdelegate that the host boots beside the first, on the same
// pod network, for the first node's ClusterMixedFleet scenario. It boots
// while the first node boots and then idles (its guest starts only
// containerd) until that scenario asks it to join; so it costs the boot
// little CPU beyond its own start.

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cgdelegate/cgdelegate/integration/internal/podnet"
	"github.com/cgdelegate/cgdelegate/integration/internal/variant"
)

// followerMemoryMiB is the second node's memory. Its initramfs is the
// first node's without the engines image (600 to 711 MB: the systemd root
// filesystem, containerd, the kubelet, kube-proxy, kubectl and helm), which
// the kernel unpacks while it still holds the image, and which init then
// copies into the tmpfs. The kernel's unpacking failed ("Initramfs
// unpacking failed: write error", no init) with 1536 MiB and a 600 MB
// image, and with 2048 MiB and a 711 MB one (CI, 2026-11-27): 3072 leaves
// room. Memory the guest does not touch costs the host nothing.
const followerMemoryMiB = 3072

// withFollowers is vs and the second nodes their cluster boots start
// (variant.MixedFleetNode), each once: prepare packs their initramfs too.
func withFollowers(vs []variant.Variant) []variant.Variant {
	out := slices.Clone(vs)
	for _, v := range vs {
		if f, ok := variant.MixedFleetNode(v); ok && !slices.ContainsFunc(out, func(o variant.Variant) bool { return o.Name == f.Name }) {
			out = append(out, f)
		}
	}
	return out
}

// followerSpec is the qemu boot of f as node of plan: one virtio NIC on
// the node's tap, the node's cgdnet.* parameters after f's, no NUMA, the
// smallest memory that holds it (followerMemoryMiB), and the cluster
// boot's timeouts (the host stops it when the first node is done anyway).
func followerSpec(kernel, initrd, accel string, plan podnet.Plan, node string, f variant.Variant) (bootSpec, error) {
	n, err := plan.Node(node)
	if err != nil {
		return bootSpec{}, err
	}
	cl, err := cmdline(f)
	if err != nil {
		return bootSpec{}, err
	}
	params, err := plan.KernelParams(n.Name)
	if err != nil {
		return bootSpec{}, err
	}
	if initrd == "" {
		return bootSpec{}, fmt.Errorf("second node %s: no initramfs packed for %s", n.Name, bootOf(f))
	}
	return bootSpec{
		Kernel: kernel, Initramfs: initrd, Cmdline: cl + " " + params,
		SMP: f.SMP, Tap: n.Tap, MAC: n.MAC, MemoryMiB: followerMemoryMiB, Accel: accel,
		BootTimeout: 8 * time.Minute, Timeout: 50 * time.Minute,
	}, nil
}

// follower is a second node's boot running in the background.
type follower struct {
	v      variant.Variant
	spec   bootSpec
	cancel context.CancelFunc
	done   chan struct{}
	// rep and err are boot's, set when done is closed.
	rep *consoleReport
	err error
}

// startFollower boots f in the background; stop ends it. Its console's
// marker lines go to onLine (the first node's test log).
func startFollower(log *slog.Logger, f variant.Variant, spec bootSpec, onLine func(string)) *follower {
	ctx, cancel := context.WithCancel(context.Background())
	fl := &follower{v: f, spec: spec, cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(fl.done)
		fl.rep, fl.err = boot(ctx, log, spec, func(line string) {
			if strings.HasPrefix(line, "CGD-") || strings.HasPrefix(line, "--- ") {
				onLine(line)
			}
		})
	}()
	return fl
}

// stop ends the second node's boot (a no-op when its guest has powered
// off already) and reports whether the host had to kill it.
func (fl *follower) stop() (killed bool) {
	select {
	case <-fl.done:
	default:
		killed = true
	}
	fl.cancel()
	<-fl.done
	return killed
}

// report stops the second node and reports its boot as the first node's
// test: its console's problems (CGD-FATAL lines), a failed boot, and its
// scenarios as subtests, each with its console output when it failed.
func (fl *follower) report(t *testing.T) {
	t.Helper()
	killed := fl.stop()
	rep := fl.rep
	if rep == nil {
		rep = newConsoleReport()
	}
	if rep.QemuCPU > 0 {
		t.Logf("second node %s: qemu used %s of CPU", fl.v.Name, rep.QemuCPU.Round(100*time.Millisecond))
	}
	switch {
	case fl.err == nil:
	case killed && errors.Is(fl.err, errTimeout) && rep.Booted:
		// Stopped by the host after the first node: its scenario's
		// result (below) says whether it did its part.
		t.Logf("second node %s stopped by the host after the first node finished (console log %s)", fl.v.Name, fl.spec.LogPath)
	default:
		t.Errorf("second node %s: boot failed: %v\nconsole log: %s\n--- console tail ---\n%s", fl.v.Name, fl.err, fl.spec.LogPath, fileTail(fl.spec.LogPath, 60))
	}
	for _, p := range rep.Problems {
		t.Errorf("second node %s console: %s", fl.v.Name, p)
	}
	reportScenarios(t, rep, fl.v.Scenarios, "the second node "+fl.v.Name, fl.spec.LogPath)
}

// startSecondNode boots v's second node (variant.MixedFleetNode) on
// clusterPlan's second node, when v has one; the control plane and the
// registry must be up.
func startSecondNode(t *testing.T, log *slog.Logger, arts *artifacts, initrds map[bootKind]string, workDir string, v variant.Variant) *follower {
	t.Helper()
	f, ok := variant.MixedFleetNode(v)
	if !ok {
		return nil
	}
	if len(clusterPlan.Nodes) < 2 {
		t.Fatalf("%s needs a second node but the cluster's plan has %d", v.Name, len(clusterPlan.Nodes))
	}
	spec, err := followerSpec(arts.Kernel, initrds[bootOf(f)], os.Getenv("CGD_QEMU_ACCEL"), clusterPlan, clusterPlan.Nodes[1].Name, f)
	if err != nil {
		t.Fatal(err)
	}
	spec.LogPath = filepath.Join(workDir, "console-"+f.Name+".log")
	return startFollower(log.With("variant", f.Name), f, spec, func(line string) { t.Log("second node: " + line) })
}
