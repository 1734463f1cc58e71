package config

import (
	"errors"
	"reflect"
	"slices"
	"testing"
)

// TestParts: every key is in exactly one part, and the parts say when the
// keys apply as docs/configuration.md does (internal/doccheck compares the
// page's lists with RestartKeys).
func TestParts(t *testing.T) {
	seen := map[string]Part{}
	for _, k := range Keys() {
		if p, dup := seen[k.Name]; dup {
			t.Errorf("key %s in parts %s and %s", k.Name, p, k.Part)
		}
		seen[k.Name] = k.Part
	}
	if n := len(fieldIndex(reflect.TypeFor[Config]())); n != len(seen) {
		t.Errorf("the decoder knows %d keys, the parts %d", n, len(seen))
	}
	tests := []struct {
		part Part
		want []string
	}{
		{PartPinning, []string{
			"cpuPinning", "topologyScope", "reservedCPUs", "strictCPUReservation", "reservedMemory",
			"sysfsRoot", "kubeletCPUManagerState", "allowKubeletStaticCPUManager",
		}},
		{PartStartOnly, []string{"metricsAddress", "profiling", "nodeLabel", "podEvents", "serviceAccountDir"}},
		{PartReloadable, nil},
	}
	for _, tc := range tests {
		t.Run(string(tc.part), func(t *testing.T) {
			if got := RestartKeys(tc.part); !slices.Equal(got, tc.want) {
				t.Errorf("RestartKeys(%s) = %q, want %q", tc.part, got, tc.want)
			}
		})
	}
}

func TestRestartChanges(t *testing.T) {
	old := Default()
	tests := []struct {
		name    string
		mutate  func(*Config)
		want    []Change
		wantErr string
	}{
		{name: "reloadable only", mutate: func(c *Config) { c.MaxDepth = 3; c.OptIn.Namespaces = []string{"ml"} }},
		{
			name:    "a pinning key",
			mutate:  func(c *Config) { c.TopologyScope = ScopeContainer },
			want:    []Change{{Key: "topologyScope", Part: PartPinning, Old: `"pod"`, New: `"container"`}},
			wantErr: `keys changed that take effect only when the plugin restarts: topologyScope: "pod" in force, "container" asked`,
		},
		{
			name:   "keys of both parts, in field order",
			mutate: func(c *Config) { c.NodeLabel = NodeLabelOff; c.CPUPinning = true; c.MaxDepth = 3 },
			want: []Change{
				{Key: "cpuPinning", Part: PartPinning, Old: "false", New: "true"},
				{Key: "nodeLabel", Part: PartStartOnly, Old: `"auto"`, New: `"off"`},
			},
			wantErr: `cpuPinning: false in force, true asked; nodeLabel: "auto" in force, "off" asked`,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg := Default()
			tc.mutate(&cfg)
			got := RestartChanges(old, cfg)
			if !slices.Equal(got, tc.want) {
				t.Fatalf("RestartChanges = %+v, want %+v", got, tc.want)
			}
			err := RestartError(got)
			switch {
			case tc.wantErr == "" && err != nil:
				t.Fatalf("RestartError = %v, want nil", err)
			case tc.wantErr != "":
				checkErr(t, err, []string{tc.wantErr})
				if !errors.Is(err, ErrNeedsRestart) {
					t.Fatalf("RestartError = %v, not ErrNeedsRestart", err)
				}
			}
		})
	}
}
