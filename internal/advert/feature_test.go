package advert

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
)

func TestFeatureFileSet(t *testing.T) {
	p := filepath.Join(t.TempDir(), "features.d", "cgdelegate")
	f := newFeatureFile(p)
	steps := []struct {
		supported bool
		wantWrite bool
	}{{true, true}, {true, false}, {false, true}, {false, false}, {true, true}}
	for i, s := range steps {
		wrote, err := f.Set(s.supported)
		if err != nil {
			t.Fatal(err)
		}
		if wrote != s.wantWrite {
			t.Fatalf("step %d: wrote=%v, want %v", i, wrote, s.wantWrite)
		}
		got, err := os.ReadFile(p)
		if err != nil || string(got) != FeatureContent(s.supported) {
			t.Fatalf("step %d: file %q, %v", i, got, err)
		}
	}
	if err := f.Remove(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(p); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("file not removed: %v", err)
	}
	if err := f.Remove(); err != nil {
		t.Fatalf("second remove: %v", err)
	}
}

func TestFeatureFileDisabled(t *testing.T) {
	f := newFeatureFile("")
	if wrote, err := f.Set(true); wrote || err != nil {
		t.Fatalf("disabled file wrote=%v err=%v", wrote, err)
	}
}

func TestFeatureContent(t *testing.T) {
	if got := FeatureContent(true); got != "# Written by cgdelegate; do not edit.\ncgdelegate.io/supports-cgroup-options=true\n" {
		t.Fatalf("FeatureContent(true) = %q", got)
	}
}
