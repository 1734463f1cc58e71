package host

import (
	"errors"
	"fmt"
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

func TestChurnBound(t *testing.T) {
	tests := []struct{ limit, dying, want int }{
		{250, 0, 250},
		{250, 200, 50},
		{250, 250, 0},
		{250, 400, 0},
		{40, -1, 40}, // a count never read is no dying cgroup
	}
	for _, tc := range tests {
		t.Run(fmt.Sprintf("%d-%d", tc.limit, tc.dying), func(t *testing.T) {
			if got := ChurnBound(tc.limit, tc.dying); got != tc.want {
				t.Errorf("ChurnBound(%d, %d) = %d, want %d", tc.limit, tc.dying, got, tc.want)
			}
		})
	}
}

func TestSetDescendants(t *testing.T) {
	fs := fakeTree(t, "kubepods/pod1", map[string]string{FileMaxDescendants: "250\n"})
	tests := []struct {
		name, rel string
		n         int
		want      string // the file afterwards; "" when the write is refused
		wantErr   error
	}{
		{name: "lower", rel: "/kubepods/pod1", n: 0, want: "0"},
		{name: "raise", rel: "/kubepods/pod1", n: 200, want: "200"},
		{name: "not a limit", rel: "/kubepods/pod1", n: -1},
		{name: "a shared cgroup", rel: "/kubepods", n: 10, wantErr: ErrSharedCgroup},
		{name: "missing", rel: "/kubepods/pod2", n: 10, wantErr: ErrNotFound},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := fs.SetDescendants(tc.rel, tc.n)
			if tc.want == "" {
				if err == nil || (tc.wantErr != nil && !errors.Is(err, tc.wantErr)) {
					t.Fatalf("SetDescendants(%s, %d) = %v, want an error (%v)", tc.rel, tc.n, err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got, _ := fs.Read(tc.rel, FileMaxDescendants); got != tc.want {
				t.Errorf("%s = %q, want %q", FileMaxDescendants, got, tc.want)
			}
		})
	}
}
