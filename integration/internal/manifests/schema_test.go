package manifests_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/cgdelegate/cgdelegate/integration/internal/manifests"
	"github.com/cgdelegate/cgdelegate/internal/config"
)

// schemaNode is the part of a JSON schema the chart's config uses.
type schemaNode struct {
	Ref                  string                 `json:"$ref"`
	Type                 string                 `json:"type"`
	Enum                 []string               `json:"enum"`
	Minimum              *int                   `json:"minimum"`
	Pattern              string                 `json:"pattern"`
	AdditionalProperties json.RawMessage        `json:"additionalProperties"`
	Properties           map[string]*schemaNode `json:"properties"`
	Items                *schemaNode            `json:"items"`
}

// chartSchema reads the chart's values.schema.json: its config node and
// its definitions.
func chartSchema(t *testing.T) (*schemaNode, map[string]*schemaNode) {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(root, manifests.ChartDir, "values.schema.json"))
	if err != nil {
		t.Fatal(err)
	}
	// Only config is decoded as a schemaNode: other values use schema
	// keywords (an enum of lists) the config does not.
	var s struct {
		Properties  map[string]json.RawMessage `json:"properties"`
		Definitions map[string]*schemaNode     `json:"definitions"`
	}
	if err := json.Unmarshal(data, &s); err != nil {
		t.Fatal(err)
	}
	raw, ok := s.Properties["config"]
	if !ok {
		t.Fatal("values.schema.json has no config")
	}
	var cfg *schemaNode
	if err := json.Unmarshal(raw, &cfg); err != nil {
		t.Fatal(err)
	}
	return cfg, s.Definitions
}

// The schema's config is config.Config key by key, both ways: every field's
// key is in the schema with the type it decodes from, every schema key is a
// field, no other key passes (additionalProperties false, at every level);
// every enum value and minimum is one config.Validate accepts, and the
// value just outside it one it refuses; every default matches its pattern.
func TestChartConfigSchema(t *testing.T) {
	node, defs := chartSchema(t)
	deref := func(n *schemaNode) *schemaNode {
		if name, ok := strings.CutPrefix(n.Ref, "#/definitions/"); ok {
			if d := defs[name]; d != nil {
				return d
			}
			t.Fatalf("$ref %s names no definition", n.Ref)
		}
		return n
	}
	// validates sets key (a dotted path) to v on the defaults, as the
	// ConfigMap would, and returns what config.Parse says.
	validates := func(key string, v any) error {
		doc := v
		parts := strings.Split(key, ".")
		for i := len(parts) - 1; i >= 0; i-- {
			doc = map[string]any{parts[i]: doc}
		}
		out, err := yaml.Marshal(doc)
		if err != nil {
			t.Fatal(err)
		}
		_, err = config.Parse(strings.NewReader(string(out)))
		return err
	}
	defaults := reflect.ValueOf(config.Default())

	var walk func(prefix string, typ reflect.Type, val reflect.Value, n *schemaNode)
	walk = func(prefix string, typ reflect.Type, val reflect.Value, n *schemaNode) {
		if n.Type != "object" || string(n.AdditionalProperties) != "false" {
			t.Errorf("%s: schema type %q additionalProperties %v, want an object with additionalProperties false", strings.TrimSuffix(prefix, "."), n.Type, string(n.AdditionalProperties))
		}
		var keys []string
		for _, i := range keyFields(typ) {
			f := typ.FieldByIndex(i)
			key, _, _ := strings.Cut(f.Tag.Get("json"), ",")
			keys = append(keys, key)
			path := prefix + key
			p := n.Properties[key]
			if p == nil {
				t.Errorf("config.%s (field %s) is not in the chart's schema", path, f.Name)
				continue
			}
			p = deref(p)
			fv := val.FieldByIndex(i)
			want := map[reflect.Kind]string{
				reflect.String: "string", reflect.Int: "integer", reflect.Bool: "boolean",
				reflect.Slice: "array", reflect.Struct: "object",
			}[f.Type.Kind()]
			if p.Type != want {
				t.Errorf("config.%s: schema type %q, field %s is %s (want %q)", path, p.Type, f.Name, f.Type, want)
				continue
			}
			switch f.Type.Kind() {
			case reflect.Struct:
				walk(path+".", f.Type, fv, p)
			case reflect.Slice:
				if p.Items == nil || deref(p.Items).Type != "string" {
					t.Errorf("config.%s: schema items %+v, want strings", path, p.Items)
				}
			case reflect.String:
				if p.Pattern != "" && fv.String() != "" && !regexp.MustCompile(p.Pattern).MatchString(fv.String()) {
					t.Errorf("config.%s: the default %q does not match the schema's pattern %s", path, fv.String(), p.Pattern)
				}
			}
			for _, e := range p.Enum {
				if err := validates(path, e); err != nil {
					t.Errorf("config.%s: the schema allows %q, the plugin refuses it: %v", path, e, err)
				}
			}
			if len(p.Enum) > 0 {
				if err := validates(path, "not-"+strings.Join(p.Enum, "-")); err == nil {
					t.Errorf("config.%s: the plugin takes a value outside the schema's enum %v", path, p.Enum)
				}
			}
			if p.Minimum != nil {
				if err := validates(path, *p.Minimum); err != nil {
					t.Errorf("config.%s: the schema's minimum %d is refused by the plugin: %v", path, *p.Minimum, err)
				}
				if err := validates(path, *p.Minimum-1); err == nil {
					t.Errorf("config.%s: the plugin takes %d, below the schema's minimum %d", path, *p.Minimum-1, *p.Minimum)
				}
			} else if p.Type == "integer" {
				t.Errorf("config.%s: an integer without a minimum in the schema", path)
			}
		}
		for k := range n.Properties {
			if !slices.Contains(keys, k) {
				t.Errorf("config.%s is in the chart's schema but the plugin has no such key", prefix+k)
			}
		}
	}
	walk("", defaults.Type(), defaults, node)
}

// keyFields returns the index of every field of t that is a YAML key: the
// fields of an embedded struct (a part of config.Config) are keys of t, as
// the plugin's decoder and encoding/json flatten them.
func keyFields(t reflect.Type) [][]int {
	var out [][]int
	for i := range t.NumField() {
		f := t.Field(i)
		if f.Anonymous && f.Type.Kind() == reflect.Struct {
			for _, sub := range keyFields(f.Type) {
				out = append(out, append([]int{i}, sub...))
			}
			continue
		}
		out = append(out, []int{i})
	}
	return out
}

// A misspelt or unknown config key, or a value of the wrong type or out of
// range, fails helm template with the key named (not a crash-looping pod).
func TestChartRefusesBadConfig(t *testing.T) {
	needGo(t)
	const schema = "values don't meet the specifications of the schema"
	tests := []struct {
		name string
		args []string
		want []string
	}{
		{"misspelt key", []string{"--set", "config.cpuPining=true"}, []string{schema, "/config", "'cpuPining' not allowed"}},
		{"misspelt nested key", []string{"--set-json", `config.optIn={"namespace":["a"]}`}, []string{schema, "/config/optIn", "'namespace' not allowed"}},
		{"string for a bool", []string{"--set-string", "config.cpuPinning=true"}, []string{schema, "/config/cpuPinning", "want boolean"}},
		{"unknown guard", []string{"--set", "config.guard=audit"}, []string{schema, "/config/guard", "'enforce', 'warn', 'off'"}},
		{"maxDepth 0", []string{"--set", "config.maxDepth=0"}, []string{schema, "/config/maxDepth", "minimum"}},
		{"relative path", []string{"--set", "config.cgroupRoot=sys/fs/cgroup"}, []string{schema, "/config/cgroupRoot"}},
		{"statusFile none", []string{"--set", "config.statusFile=none"}, []string{schema, "/config/statusFile"}},
		{"hookPath in /", []string{"--set", "config.hookPath=/cgdelegate-hook"}, []string{schema, "/config/hookPath"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := manifests.Template(t.Context(), root, tc.args...)
			if err == nil {
				t.Fatal("rendered, want an error")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not name %q", err, w)
				}
			}
		})
	}
}
