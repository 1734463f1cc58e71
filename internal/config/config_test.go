package config

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"reflect"
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
		c.FeatureFilePath() != "/etc/kubernetes/node-feature-discovery/features.d/cgdelegate" || c.TopologyScope != ScopePod ||
		c.StrictCPUReservation {
		t.Fatalf("unexpected defaults: %+v", c)
	}
}

// checkErr asserts that err is non-nil and mentions every string in want.
func checkErr(t *testing.T, err error, want []string) {
	t.Helper()
	if err == nil {
		t.Fatalf("want an error mentioning %q", want)
	}
	for _, w := range want {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("error %q does not mention %q", err, w)
		}
	}
}

func TestParse(t *testing.T) {
	tests := []struct {
		name    string
		in      string
		check   func(Config) bool
		wantErr []string
	}{
		{name: "empty", in: "", check: func(c Config) bool { return reflect.DeepEqual(c, Default()) }},
		{name: "comments only", in: "# nothing set\n", check: func(c Config) bool { return reflect.DeepEqual(c, Default()) }},
		{name: "guard warn", in: "guard: warn\n", check: func(c Config) bool { return c.Guard == GuardWarn }},
		{name: "guard off", in: "guard: off\n", check: func(c Config) bool { return c.Guard == GuardOff }},
		{name: "guard quoted off", in: "guard: \"off\"\n", check: func(c Config) bool { return c.Guard == GuardOff }},
		{name: "node budget", in: "nodeMaxDelegatedCgroups: 2000\n", check: func(c Config) bool { return c.NodeMaxDelegatedCgroups == 2000 }},
		{name: "node budget off", in: "nodeMaxDelegatedCgroups: 0\n", check: func(c Config) bool { return c.NodeMaxDelegatedCgroups == 0 }},
		{name: "node budget default", in: "", check: func(c Config) bool { return c.NodeMaxDelegatedCgroups == DefaultNodeMaxDelegatedCgroups }},
		{name: "caps", in: "maxDescendants: 100\nmaxDepth: 10\n", check: func(c Config) bool { return c.MaxDescendants == 100 && c.MaxDepth == 10 }},
		{name: "hex whole number", in: "maxDepth: 0x10\n", check: func(c Config) bool { return c.MaxDepth == 16 }},
		{name: "anchor and alias", in: "maxDepth: &n 7\nmaxDescendants: *n\n", check: func(c Config) bool { return c.MaxDepth == 7 && c.MaxDescendants == 7 }},
		{name: "booleans", in: "cpuPinning: true\nallowKubeletStaticCPUManager: false\n", check: func(c Config) bool { return c.CPUPinning && !c.AllowKubeletStaticCPUManager }},
		{name: "feature file disabled", in: "featureFile: none\n", check: func(c Config) bool { return c.FeatureFilePath() == "" }},
		{name: "CRI-O config default", in: "", check: func(c Config) bool {
			f, d := c.CRIOConfigPaths()
			return f == "/etc/crio/crio.conf" && d == "/etc/crio/crio.conf.d"
		}},
		{name: "CRI-O config disabled", in: "crioConfig: none\ncrioConfigDir: /srv/crio.d\n", check: func(c Config) bool {
			f, d := c.CRIOConfigPaths()
			return f == "" && d == "/srv/crio.d"
		}},
		{name: "json works too", in: `{"cgroupRoot": "/run/cgroup2"}`, check: func(c Config) bool { return c.CgroupRoot == "/run/cgroup2" }},
		{name: "json numbers and booleans", in: `{"maxDepth": 5, "cpuPinning": true}`, check: func(c Config) bool { return c.MaxDepth == 5 && c.CPUPinning }},
		{name: "reserved", in: "reservedCPUs: 0-1,4\n", check: func(c Config) bool { return c.Reserved().Size() == 3 }},
		{name: "reserved single CPU", in: "reservedCPUs: 0\n", check: func(c Config) bool { return c.ReservedCPUs == "0" }},
		{name: "strict reservation", in: "reservedCPUs: 0\nstrictCPUReservation: true\n", check: func(c Config) bool { return c.StrictCPUReservation }},
		{name: "optIn", in: "optIn:\n  namespaces: [\"team-*\", ml]\n  runtimeHandlers: [runc]\n  requireUserNamespace: true\n", check: func(c Config) bool {
			return reflect.DeepEqual(c.OptIn, OptIn{Namespaces: []string{"team-*", "ml"}, RuntimeHandlers: []string{"runc"}, RequireUserNamespace: true})
		}},
		{name: "optIn empty lists allow all", in: "optIn:\n  namespaces: []\n", check: func(c Config) bool { return c.OptIn.IsZero() }},
		{name: "optIn default handler", in: "optIn: {runtimeHandlers: [\"\", runc]}\n", check: func(c Config) bool { return len(c.OptIn.RuntimeHandlers) == 2 }},
		{name: "reserved explicitly none", in: "reservedCPUs: \"\"\n", check: func(c Config) bool { return c.Reserved().Size() == 0 }},
		{name: "metrics address", in: "metricsAddress: 127.0.0.1:9767\n", check: func(c Config) bool { return c.MetricsAddress == "127.0.0.1:9767" }},
		{name: "metrics on every address", in: "metricsAddress: \":9767\"\n", check: func(c Config) bool { return c.MetricsAddress == ":9767" }},
		{name: "metrics ipv6", in: "metricsAddress: \"[::1]:9767\"\n", check: func(c Config) bool { return c.MetricsAddress == "[::1]:9767" }},
		{name: "metrics explicitly off", in: "metricsAddress: \"\"\n", check: func(c Config) bool { return c.MetricsAddress == "" }},
		{name: "profiling", in: "metricsAddress: 127.0.0.1:9767\nprofiling: true\n", check: func(c Config) bool { return c.Profiling }},
		{name: "profiling on IPv6 loopback", in: "metricsAddress: \"[::1]:9767\"\nprofiling: true\n", check: func(c Config) bool { return c.Profiling }},
		{name: "profiling on localhost", in: "metricsAddress: localhost:9767\nprofiling: true\n", check: func(c Config) bool { return c.Profiling }},
		{name: "profiling on 127.0.0.2", in: "metricsAddress: 127.0.0.2:9767\nprofiling: true\n", check: func(c Config) bool { return c.Profiling }},
		{name: "profiling off by default", in: "metricsAddress: 127.0.0.1:9767\n", check: func(c Config) bool { return !c.Profiling }},

		{name: "unknown field", in: "guardmode: warn\n", wantErr: []string{"guardmode: unknown key"}},
		{name: "key set twice", in: "guard: warn\nguard: off\n", wantErr: []string{"guard: set twice (lines 1 and 2)"}},
		{name: "bad guard", in: "guard: maybe\n", wantErr: []string{`guard: "maybe"`}},
		// YAML 1.1 reads these as booleans; cgdelegate takes them as written.
		{name: "guard no", in: "guard: no\n", wantErr: []string{`guard: "no" is not one of enforce, warn, off`}},
		{name: "guard false", in: "guard: false\n", wantErr: []string{`guard: "false" is not one of`}},
		{name: "guard on", in: "guard: on\n", wantErr: []string{`guard: "on" is not one of`}},
		{name: "guard yes", in: "guard: yes\n", wantErr: []string{`guard: "yes" is not one of`}},
		{name: "guard true", in: "guard: true\n", wantErr: []string{`guard: "true" is not one of`}},
		{name: "guard Off", in: "guard: Off\n", wantErr: []string{`guard: "Off" is not one of`}},
		{name: "guard empty", in: "guard:\n", wantErr: []string{`guard: "" is not one of`}},
		{name: "guard list", in: "guard: [enforce]\n", wantErr: []string{"guard: a list is not a string"}},
		{name: "maxDescendants zero", in: "maxDescendants: 0\n", wantErr: []string{"maxDescendants: 0 must be at least 1"}},
		{name: "maxDepth zero", in: "maxDepth: 0\n", wantErr: []string{"maxDepth: 0 must be at least 1"}},
		{name: "nodeMaxDelegatedCgroups negative", in: "nodeMaxDelegatedCgroups: -1\n", wantErr: []string{"nodeMaxDelegatedCgroups: -1 must be 0 (no node budget) or more"}},
		{name: "hookTimeout zero", in: "hookTimeout: 0\n", wantErr: []string{"hookTimeout: 0 must be at least 1 second"}},
		{name: "maxDepth word", in: "maxDepth: abc\n", wantErr: []string{`maxDepth: "abc" is not a whole number`}},
		{name: "maxDepth quoted number", in: "maxDepth: \"5\"\n", wantErr: []string{`maxDepth: "5" is not a whole number`}},
		{name: "maxDepth fraction", in: "maxDepth: 1.5\n", wantErr: []string{`maxDepth: "1.5" is not a whole number`}},
		{name: "maxDepth empty", in: "maxDepth:\n", wantErr: []string{`maxDepth: "" is not a whole number`}},
		{name: "maxDescendants mapping", in: "maxDescendants: {a: 1}\n", wantErr: []string{"maxDescendants: a mapping is not a whole number"}},
		{name: "hookTimeout with unit", in: "hookTimeout: 10s\n", wantErr: []string{`hookTimeout: "10s" is not a whole number`}},
		{name: "cpuPinning yes", in: "cpuPinning: yes\n", wantErr: []string{`cpuPinning: "yes" is not true or false`}},
		{name: "cpuPinning number", in: "cpuPinning: 1\n", wantErr: []string{`cpuPinning: "1" is not true or false`}},
		{name: "allowKubelet quoted", in: "allowKubeletStaticCPUManager: \"true\"\n", wantErr: []string{`allowKubeletStaticCPUManager: "true" is not true or false`}},
		{name: "optIn bad namespace pattern", in: "optIn:\n  namespaces: [\"team-[\"]\n", wantErr: []string{`optIn.namespaces: "team-[" is not a valid pattern`}},
		{name: "optIn bad handler pattern", in: "optIn:\n  runtimeHandlers: [\"run[\"]\n", wantErr: []string{`optIn.runtimeHandlers: "run[" is not a valid pattern`}},
		{name: "optIn empty namespace", in: "optIn:\n  namespaces: [\"\"]\n", wantErr: []string{`optIn.namespaces: "" is not a pattern`}},
		{name: "optIn namespaces not a list", in: "optIn:\n  namespaces: team-a\n", wantErr: []string{`optIn.namespaces: "team-a" is not a list of strings`}},
		{name: "optIn namespaces null", in: "optIn:\n  namespaces:\n", wantErr: []string{`optIn.namespaces: "" is not a list of strings`}},
		{name: "optIn list of lists", in: "optIn:\n  namespaces: [[a]]\n", wantErr: []string{"optIn.namespaces[0]: a list is not a string"}},
		{name: "optIn unknown key", in: "optIn:\n  namespace: [a]\n", wantErr: []string{"optIn.namespace: unknown key"}},
		{name: "optIn set twice", in: "optIn:\n  namespaces: [a]\n  namespaces: [b]\n", wantErr: []string{"optIn.namespaces: set twice (lines 2 and 3)"}},
		{name: "optIn requireUserNamespace yes", in: "optIn:\n  requireUserNamespace: yes\n", wantErr: []string{`optIn.requireUserNamespace: "yes" is not true or false`}},
		{name: "optIn not a mapping", in: "optIn: [a]\n", wantErr: []string{"optIn: a list is not a mapping"}},
		{name: "empty path", in: "cgroupRoot: \"\"\n", wantErr: []string{`cgroupRoot: "" is not an absolute path`}},
		{name: "empty feature file", in: "featureFile:\n", wantErr: []string{`featureFile: "" is not an absolute path`}},
		{
			name:    "every problem at once",
			in:      "guard: maybe\nmaxDescendants: -1\nmaxDepth: -2\ncgroupRoot: relative/path\nreservedCPUs: x\ntopologyScope: node\nhookTimeout: -1\n",
			wantErr: []string{`guard: "maybe"`, "maxDescendants: -1", "maxDepth: -2", `cgroupRoot: "relative/path"`, `reservedCPUs: "x"`, `topologyScope: "node"`, "hookTimeout: -1"},
		},
		{
			name:    "decoding and validation problems at once",
			in:      "maxDepth: abc\nguard: no\nbogus: 1\nmaxDescendants: 0\n",
			wantErr: []string{`maxDepth: "abc" is not a whole number`, `guard: "no"`, "bogus: unknown key", "maxDescendants: 0"},
		},
		{name: "metrics address without port", in: "metricsAddress: 127.0.0.1\n", wantErr: []string{`metricsAddress: "127.0.0.1" is not host:port`}},
		{name: "metrics named port", in: "metricsAddress: localhost:http\n", wantErr: []string{`metricsAddress: "localhost:http" has port "http", not a number`}},
		{name: "metrics port too large", in: "metricsAddress: \":70000\"\n", wantErr: []string{`metricsAddress: ":70000" has port "70000"`}},
		{name: "metrics port number", in: "metricsAddress: 9767\n", wantErr: []string{`metricsAddress: "9767" is not host:port`}},
		{name: "profiling without metrics", in: "profiling: true\n", wantErr: []string{"profiling: true needs metricsAddress"}},
		// The profiles are never served on an address other pods reach.
		{name: "profiling on every address", in: "metricsAddress: \":9767\"\nprofiling: true\n", wantErr: []string{`profiling: true needs metricsAddress on a loopback address`, `not ":9767"`}},
		{name: "profiling on every IPv4 address", in: "metricsAddress: 0.0.0.0:9767\nprofiling: true\n", wantErr: []string{`not "0.0.0.0:9767"`}},
		{name: "profiling on every IPv6 address", in: "metricsAddress: \"[::]:9767\"\nprofiling: true\n", wantErr: []string{`not "[::]:9767"`}},
		{name: "profiling on the pod network", in: "metricsAddress: 10.244.1.7:9767\nprofiling: true\n", wantErr: []string{`not "10.244.1.7:9767"`}},
		{name: "profiling on a host name", in: "metricsAddress: node1:9767\nprofiling: true\n", wantErr: []string{`not "node1:9767"`}},
		{name: "profiling not a boolean", in: "metricsAddress: 127.0.0.1:9767\nprofiling: yes\n", wantErr: []string{"profiling"}},
		{name: "relative feature file", in: "featureFile: features\n", wantErr: []string{`featureFile: "features"`}},
		{name: "relative CRI-O config", in: "crioConfig: crio.conf\ncrioConfigDir: \"\"\n", wantErr: []string{
			`crioConfig: "crio.conf" is not an absolute path`, `crioConfigDir: "" is not an absolute path`,
		}},
		{name: "nodeLabel off", in: "nodeLabel: off\n", check: func(c Config) bool { return c.NodeLabel == NodeLabelOff }},
		{name: "nodeLabel on", in: "nodeLabel: on\n", check: func(c Config) bool { return c.NodeLabel == NodeLabelOn }},
		{name: "nodeLabel default auto", in: "", check: func(c Config) bool {
			return c.NodeLabel == NodeLabelAuto && c.ServiceAccountDir == "/var/run/secrets/kubernetes.io/serviceaccount"
		}},
		{name: "podEvents off", in: "podEvents: off\n", check: func(c Config) bool { return c.PodEvents == NodeLabelOff && c.NodeLabel == NodeLabelAuto }},
		{name: "podEvents on", in: "podEvents: on\n", check: func(c Config) bool { return c.PodEvents == NodeLabelOn }},
		{name: "podEvents default auto", in: "", check: func(c Config) bool { return c.PodEvents == NodeLabelAuto }},
		{name: "podEvents boolean", in: "podEvents: false\n", wantErr: []string{`podEvents: "false" is not one of auto, on, off`}},
		{name: "podEvents unknown word", in: "podEvents: never\n", wantErr: []string{`podEvents: "never" is not one of auto, on, off`}},
		{name: "serviceAccountDir", in: "serviceAccountDir: /srv/sa\n", check: func(c Config) bool { return c.ServiceAccountDir == "/srv/sa" }},
		{name: "nodeLabel unknown word", in: "nodeLabel: yes\n", wantErr: []string{`nodeLabel: "yes" is not one of auto, on, off`}},
		{name: "nodeLabel boolean", in: "nodeLabel: true\n", wantErr: []string{`nodeLabel: "true" is not one of auto, on, off`}},
		{name: "nodeLabel empty", in: "nodeLabel: \"\"\n", wantErr: []string{`nodeLabel: "" is not one of auto, on, off`}},
		{name: "nodeLabel list", in: "nodeLabel: [on]\n", wantErr: []string{`nodeLabel: a list is not a string`}},
		{name: "relative serviceAccountDir", in: "serviceAccountDir: sa\n", wantErr: []string{`serviceAccountDir: "sa" is not an absolute path`}},
		{name: "serviceAccountDir none", in: "serviceAccountDir: none\n", wantErr: []string{`serviceAccountDir: "none" is not an absolute path`}},
		{name: "not yaml", in: "guard: [\n", wantErr: []string{"decode config"}},
		{name: "not a mapping", in: "- guard\n", wantErr: []string{"decode config", "want a mapping of keys, got a list"}},
		{name: "two documents", in: "guard: warn\n---\nguard: off\n", wantErr: []string{"decode config", "want one YAML document"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c, err := Parse(strings.NewReader(tc.in))
			if tc.wantErr != nil {
				checkErr(t, err, tc.wantErr)
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

// TestEveryKeyDecodes round-trips a config that sets every field, so a
// field of a kind the decoder does not handle fails here.
func TestEveryKeyDecodes(t *testing.T) {
	want := Config{
		Reloadable: Reloadable{
			CgroupRoot: "/a", MountinfoPath: "/b", ProcRoot: "/c", HookPath: "/e",
			HookTimeout: 3, Guard: GuardWarn, MaxDescendants: 4, MaxDepth: 5, NodeMaxDelegatedCgroups: 6, FeatureFile: Disabled, StatusFile: "/f",
			ContainerdConfig: "/h", CRIOConfig: "/i", CRIOConfigDir: "/j",
			OptIn: OptIn{Namespaces: []string{"team-*"}, RuntimeHandlers: []string{"runc"}, RequireUserNamespace: true},
		},
		Pinning: Pinning{
			SysfsRoot: "/d", CPUPinning: true, TopologyScope: ScopeContainer, ReservedCPUs: "0", StrictCPUReservation: true, ReservedMemory: "0:memory=1Gi",
			KubeletCPUManagerState: "/g", AllowKubeletStaticCPUManager: true,
		},
		StartOnly: StartOnly{MetricsAddress: "127.0.0.1:9767", Profiling: true, NodeLabel: NodeLabelOff, PodEvents: NodeLabelOn, ServiceAccountDir: "/k"},
	}
	v := reflect.ValueOf(want)
	for _, k := range Keys() {
		if v.FieldByIndex(k.index).IsZero() {
			t.Fatalf("key %s is not set by this test", k.Name)
		}
	}
	if n := len(fieldIndex(v.Type())); n != len(Keys()) {
		t.Fatalf("the decoder knows %d keys, Keys lists %d: a field of Config is not in a part", n, len(Keys()))
	}
	data, err := json.Marshal(want)
	if err != nil {
		t.Fatal(err)
	}
	got, err := Parse(strings.NewReader(string(data)))
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("round trip:\n got %+v\nwant %+v", got, want)
	}
}

func TestMerge(t *testing.T) {
	base := Default()
	base.MaxDepth = 20
	base.OptIn.Namespaces = []string{"team-*"}
	tests := []struct {
		name    string
		blob    string
		check   func(Config) bool
		wantErr []string
	}{
		{name: "guard off keeps base values", blob: "guard: off\n", check: func(c Config) bool { return c.Guard == GuardOff && c.MaxDepth == 20 }},
		{name: "empty blob", blob: "  ", check: func(c Config) bool { return reflect.DeepEqual(c, base) }},
		{name: "blob overrides", blob: "maxDepth: 3\n", check: func(c Config) bool { return c.MaxDepth == 3 && c.Guard == GuardEnforce }},
		{name: "negative", blob: "maxDepth: -5\n", wantErr: []string{"maxDepth: -5"}},
		{name: "maxDepth zero is not base", blob: "maxDepth: 0\n", wantErr: []string{"maxDepth: 0 must be at least 1"}},
		{name: "maxDescendants zero", blob: "maxDescendants: 0\n", wantErr: []string{"maxDescendants: 0 must be at least 1"}},
		{name: "hookTimeout zero", blob: "hookTimeout: 0\n", wantErr: []string{"hookTimeout: 0 must be at least 1 second"}},
		{name: "guard no", blob: "guard: no\n", wantErr: []string{`guard: "no" is not one of enforce, warn, off`}},
		{name: "type error", blob: "maxDepth: abc\n", wantErr: []string{`maxDepth: "abc" is not a whole number`}},
		{name: "empty path is not base", blob: "hookPath: \"\"\n", wantErr: []string{`hookPath: "" is not an absolute path`}},
		{name: "optIn merges key by key", blob: "optIn: {requireUserNamespace: true}\n", check: func(c Config) bool {
			return c.OptIn.RequireUserNamespace && reflect.DeepEqual(c.OptIn.Namespaces, []string{"team-*"})
		}},
		{name: "optIn list replaces", blob: "optIn: {namespaces: [ml]}\n", check: func(c Config) bool { return reflect.DeepEqual(c.OptIn.Namespaces, []string{"ml"}) }},
		{name: "optIn empty list allows all", blob: "optIn: {namespaces: []}\n", check: func(c Config) bool { return len(c.OptIn.Namespaces) == 0 }},
		{name: "unknown key", blob: "maxDepht: 3\n", wantErr: []string{"maxDepht: unknown key"}},
		{name: "not yaml", blob: "guard: [\n", wantErr: []string{"decode NRI config blob"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c, err := Merge(base, tc.blob)
			if tc.wantErr != nil {
				checkErr(t, err, tc.wantErr)
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
