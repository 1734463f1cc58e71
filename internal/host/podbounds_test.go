package host

import (
	"os"
	"path/filepath"
	"testing"
)

func TestPodBoundsRemembersAndForgets(t *testing.T) {
	fs := fakeTree(t, "kubepods/pod1", nil)
	pod := fs.Dir("/kubepods/pod1")
	write := func(file, v string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(pod, file), []byte(v), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write(FileMaxDescendants, "max\n")
	write(FileMaxDepth, "max\n")
	p := NewPodBounds(fs)
	want := Bounds{Descendants: 250, Depth: 50}
	if got, err := p.Ensure("/kubepods/pod1", want); err != nil || got != want {
		t.Fatalf("Ensure = %v, %v", got, err)
	}
	// Remembered: a change behind its back is not read again.
	write(FileMaxDescendants, "max\n")
	if got, err := p.Ensure("/kubepods/pod1", want); err != nil || got != want {
		t.Fatalf("second Ensure = %v, %v", got, err)
	}
	if b, _ := os.ReadFile(filepath.Join(pod, FileMaxDescendants)); string(b) != "max\n" {
		t.Fatalf("second Ensure wrote %q; want it served from memory", b)
	}
	// Forgotten: the next Ensure writes again.
	p.Forget("/kubepods/pod1")
	if _, err := p.Ensure("/kubepods/pod1", want); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(filepath.Join(pod, FileMaxDescendants)); string(b) != "250" {
		t.Fatalf("after Forget, Ensure left %q", b)
	}
	// A failure is not remembered.
	if _, err := p.Ensure("/kubepods/missing", want); err == nil {
		t.Fatal("Ensure on a missing pod cgroup: want an error")
	}
}
