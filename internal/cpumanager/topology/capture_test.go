package topology

import (
	"archive/tar"
	"compress/gzip"
	"errors"
	"io"
	"io/fs"
	"maps"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"reflect"
	"slices"
	"testing"

	"k8s.io/utils/cpuset"

	"github.com/cgdelegate/cgdelegate/internal/cpumanager/topology/topologytest"
)

// TestDiscoverCaptures runs Discover on real sysfs trees, captured with
// testdata/capture.sh and unpacked into a temporary directory, and compares
// the result with a literal model of the machine.
func TestDiscoverCaptures(t *testing.T) {
	cases := []struct {
		file string
		want *Topology
	}{
		{
			// The development VM: two vCPUs of an AMD EPYC host, one core
			// each (no SMT), one package, one node; Linux 6.18 with
			// cluster_id 65535 ("no cluster") and cpu_capacity 1024. The
			// node's meminfo reports 6252320 kB although /proc/meminfo
			// reports 24 GiB.
			file: "host-2cpu-1node.tar.gz",
			want: &Topology{
				CPUs: map[int]CPUInfo{
					0: {ID: 0, Core: 0, Package: 0, Die: 0, NUMANode: 0, Cluster: 65535, Capacity: 1024},
					1: {ID: 1, Core: 1, Package: 0, Die: 0, NUMANode: 0, Cluster: 65535, Capacity: 1024},
				},
				NUMANodes: map[int]NUMANode{
					0: {ID: 0, CPUs: cpuset.New(0, 1), MemoryBytes: 6252320 << 10, Distances: map[int]int{0: 10}},
				},
				Offline:  cpuset.New(),
				Isolated: cpuset.New(),
			},
		},
		{
			// The VM of the pinning scenarios (integration/vm variant
			// ctd24-numa-smp4): qemu TCG, -cpu max -smp 4 -m 2048, two NUMA
			// nodes of two CPUs and 1 GiB each, Debian's 6.12 kernel. No
			// SMT, no cpu_capacity; SLIT distance 20 between the nodes.
			file: "qemu-smp4-2node.tar.gz",
			want: &Topology{
				CPUs: map[int]CPUInfo{
					0: {ID: 0, Core: 0, Package: 0, Die: 0, NUMANode: 0, Cluster: 65535},
					1: {ID: 1, Core: 1, Package: 0, Die: 0, NUMANode: 0, Cluster: 65535},
					2: {ID: 2, Core: 2, Package: 0, Die: 0, NUMANode: 1, Cluster: 65535},
					3: {ID: 3, Core: 3, Package: 0, Die: 0, NUMANode: 1, Cluster: 65535},
				},
				NUMANodes: map[int]NUMANode{
					0: {ID: 0, CPUs: cpuset.New(0, 1), MemoryBytes: 1030452 << 10, Distances: map[int]int{0: 10, 1: 20}},
					1: {ID: 1, CPUs: cpuset.New(2, 3), MemoryBytes: 991052 << 10, Distances: map[int]int{0: 20, 1: 10}},
				},
				Offline:  cpuset.New(),
				Isolated: cpuset.New(),
			},
		},
	}
	for _, tc := range cases {
		t.Run(tc.file, func(t *testing.T) {
			root := t.TempDir()
			if err := readTarGz(t, filepath.Join("testdata", tc.file)).Write(root); err != nil {
				t.Fatal(err)
			}
			got, err := Discover(root)
			if err != nil {
				t.Fatalf("Discover: %v", err)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("Discover model differs:\n got %+v\nwant %+v", got, tc.want)
			}
			checkInvariants(t, got)
		})
	}
}

// TestCaptureScript runs testdata/capture.sh on synthetic trees written to
// disk: the archive must hold exactly the files discovery reads, which are
// all the synthetic trees have. The three machines cover every optional
// file (each CPU costs the script a few forks, so the larger ones are left
// out).
func TestCaptureScript(t *testing.T) {
	for _, tool := range []string{"sh", "tar"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("capture.sh needs %s: %v", tool, err)
		}
	}
	script, err := filepath.Abs(filepath.Join("testdata", "capture.sh"))
	if err != nil {
		t.Fatal(err)
	}
	machines := []struct {
		name    string
		machine topologytest.Machine
	}{
		{"offline", topologytest.Offline()},
		{"hybrid", topologytest.Hybrid()},
		{"no-numa", topologytest.NoNUMA()},
	}
	for _, tc := range machines {
		t.Run(tc.name, func(t *testing.T) {
			want := tc.machine.Tree()
			dir := t.TempDir()
			root := filepath.Join(dir, "sys")
			if err := want.Write(root); err != nil {
				t.Fatal(err)
			}
			out := filepath.Join(dir, "capture.tar.gz")
			cmd := exec.Command("sh", script, root, out)
			if b, err := cmd.CombinedOutput(); err != nil {
				t.Fatalf("%s: %v\n%s", cmd, err, b)
			}
			got := readTarGz(t, out)
			for _, name := range slices.Sorted(maps.Keys(want)) {
				if got[name] != want[name] {
					t.Errorf("%s: captured %q, want %q", name, got[name], want[name])
				}
			}
			for name := range got {
				if _, ok := want[name]; !ok {
					t.Errorf("%s: captured but not in the tree", name)
				}
			}
		})
	}
}

// readTarGz loads a capture: regular files keyed by their slash-separated
// path, directories implied.
func readTarGz(t testing.TB, file string) topologytest.Tree {
	t.Helper()
	f, err := os.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		t.Fatalf("%s: %v", file, err)
	}
	tr := tar.NewReader(zr)
	tree := topologytest.Tree{}
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return tree
		}
		if err != nil {
			t.Fatalf("%s: %v", file, err)
		}
		name := path.Clean(hdr.Name)
		switch {
		case hdr.Typeflag == tar.TypeDir:
			continue
		case hdr.Typeflag != tar.TypeReg || !fs.ValidPath(name):
			t.Fatalf("%s: %s: want a regular file below the root", file, hdr.Name)
		}
		b, err := io.ReadAll(io.LimitReader(tr, maxFileSize))
		if err != nil {
			t.Fatalf("%s: %s: %v", file, hdr.Name, err)
		}
		tree[name] = string(b)
	}
}
