package config

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestDefault(t *testing.T) {
	c := Default()
	if err := c.Validate(); err != nil {
		t.Fatalf("default config invalid: %v", err)
	}
	if c.CgroupRoot != "/sys/fs/cgroup" || c.MountinfoPath != "/proc/1/mountinfo" || c.HookPath != "/usr/local/bin/cgdelegate-hook" ||
		c.Guard != GuardEnforce || c.MaxDescendants != 250 || c.MaxDepth != 50 ||
		c.FeatureFilePath() != "/etc/kubernetes/node-feature-discovery/features.d/cgdelegate" || c.TopologyScope != ScopePod {
		t.Fatalf("unexpected defaults: %+v", c)
	}
}

func TestParse(t *testing.T) {
	tests := []struct {
		name    string
		in      string
		check   func(Config) bool
		wantErr []string
	}{
		{name: "empty", in: "", check: func(c Config) bool { return c.Guard == GuardEnforce }},
		{name: "guard warn", in: "guard: warn\n", check: func(c Config) bool { return c.Guard == GuardWarn }},
		{name: "caps", in: "maxDescendants: 100\nmaxDepth: 10\n", check: func(c Config) bool { return c.MaxDescendants == 100 && c.MaxDepth == 10 }},
		{name: "feature file disabled", in: "featureFile: none\n", check: func(c Config) bool { return c.FeatureFilePath() == "" }},
		{name: "json works too", in: `{"cgroupRoot": "/run/cgroup2"}`, check: func(c Config) bool { return c.CgroupRoot == "/run/cgroup2" }},
		{name: "reserved", in: "reservedCPUs: 0-1,4\n", check: func(c Config) bool { return c.Reserved().Size() == 3 }},
		{name: "unknown field", in: "guardmode: warn\n", wantErr: []string{"guardmode"}},
		{name: "bad guard", in: "guard: maybe\n", wantErr: []string{`guard: "maybe"`}},
		{
			name:    "every problem at once",
			in:      "guard: maybe\nmaxDescendants: -1\nmaxDepth: -2\ncgroupRoot: relative/path\nreservedCPUs: x\ntopologyScope: node\nhookTimeout: -1\n",
			wantErr: []string{`guard: "maybe"`, "maxDescendants: -1", "maxDepth: -2", `cgroupRoot: "relative/path"`, `reservedCPUs: "x"`, `topologyScope: "node"`, "hookTimeout: -1"},
		},
		{name: "relative feature file", in: "featureFile: features\n", wantErr: []string{`featureFile: "features"`}},
		{name: "not yaml", in: "guard: [\n", wantErr: []string{"decode config"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c, err := Parse(strings.NewReader(tc.in))
			if tc.wantErr != nil {
				if err == nil {
					t.Fatal("want an error")
				}
				for _, w := range tc.wantErr {
					if !strings.Contains(err.Error(), w) {
						t.Errorf("error %q does not mention %q", err, w)
					}
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !tc.check(c) {
				t.Fatalf("unexpected config: %+v", c)
			}
		})
	}
}

func TestMerge(t *testing.T) {
	base := Default()
	base.MaxDepth = 20
	c, err := Merge(base, "guard: off\n")
	if err != nil {
		t.Fatal(err)
	}
	if c.Guard != GuardOff || c.MaxDepth != 20 {
		t.Fatalf("merge lost base values: %+v", c)
	}
	if c, err := Merge(base, "  "); err != nil || c.MaxDepth != 20 {
		t.Fatalf("empty blob: %+v %v", c, err)
	}
	if _, err := Merge(base, "maxDepth: -5\n"); err == nil || !strings.Contains(err.Error(), "maxDepth: -5") {
		t.Fatalf("bad blob: %v", err)
	}
}

func TestLoad(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "cgdelegate.yaml")
	if err := os.WriteFile(p, []byte("guard: warn\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if c, err := Load(p); err != nil || c.Guard != GuardWarn {
		t.Fatalf("Load = %+v, %v", c, err)
	}
	if _, err := Load(filepath.Join(dir, "absent")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("missing file: %v", err)
	}
}
