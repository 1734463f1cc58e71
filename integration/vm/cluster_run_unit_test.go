//go:build integration_vm

package vm

import (
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestQemuNet: only a boot with Net gets a NIC, on qemu's user network.
func TestQemuNet(t *testing.T) {
	for _, tc := range []struct {
		net        bool
		want, none string
	}{
		{true, "-netdev user,id=n0 -device virtio-net-pci,netdev=n0", "-nic none"},
		{false, "-nic none", "-netdev"},
	} {
		args := strings.Join(bootSpec{Kernel: "k", Initramfs: "i", SMP: 1, MemoryMiB: 512, Net: tc.net}.args(), " ")
		if !strings.Contains(args, tc.want) || strings.Contains(args, tc.none) {
			t.Errorf("Net %v: %s; want %q and no %q", tc.net, args, tc.want, tc.none)
		}
	}
}

// TestQemuTap: a boot on a tap gets that tap, with its MAC, and no user
// network.
func TestQemuTap(t *testing.T) {
	args := strings.Join(bootSpec{Kernel: "k", Initramfs: "i", SMP: 1, MemoryMiB: 512, Net: true, Tap: "cgdtap1", MAC: "52:54:00:cd:00:01"}.args(), " ")
	want := "-netdev tap,id=n0,ifname=cgdtap1,script=no,downscript=no -device virtio-net-pci,netdev=n0,mac=52:54:00:cd:00:01"
	if !strings.Contains(args, want) || strings.Contains(args, "user,") || strings.Contains(args, "-nic none") {
		t.Errorf("args %s; want %q and no other network", args, want)
	}
}

// TestHostProcStop: a process that ends on SIGTERM is stopped without an
// error; one that ignores it is killed after the timeout, with an error
// saying so.
func TestHostProcStop(t *testing.T) {
	for _, tc := range []struct {
		name    string
		script  string
		wantErr bool
	}{
		{"ends on SIGTERM", "exec sleep 60", false},
		{"ignores SIGTERM", "trap '' TERM; sleep 60 & wait; wait", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := startHostProc("test", filepath.Join(t.TempDir(), "log"), "sh", "-c", tc.script)
			if err != nil {
				t.Fatal(err)
			}
			time.Sleep(200 * time.Millisecond) // let the trap be set
			start := time.Now()
			err = p.stop(time.Second)
			if (err != nil) != tc.wantErr {
				t.Fatalf("stop: %v, want an error %v", err, tc.wantErr)
			}
			if !p.exited() || time.Since(start) > 5*time.Second {
				t.Fatalf("exited %v after %s", p.exited(), time.Since(start))
			}
		})
	}
}

func TestFreeLoopbackPorts(t *testing.T) {
	ports, err := freeLoopbackPorts(4)
	if err != nil {
		t.Fatal(err)
	}
	if len(slices.Compact(slices.Sorted(slices.Values(ports)))) != 4 {
		t.Errorf("ports %v, want four distinct", ports)
	}
}

func TestAPIServerPort(t *testing.T) {
	p, err := apiServerPort()
	if err != nil {
		t.Fatal(err)
	}
	if p < 20000 || p > 32767 {
		t.Errorf("port %d, want one in 20000-32767, below the ephemeral range", p)
	}
}
