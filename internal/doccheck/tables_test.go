package doccheck

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"maps"
	"os"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"testing/fstest"

	sigsyaml "sigs.k8s.io/yaml"

	"github.com/cgdelegate/cgdelegate/internal/config"
)

// The tables of the pages that document a name the code defines, each
// checked against it both ways: docs/configuration.md's config keys and
// their defaults and the plugin's flags, and docs/deploying.md's Helm
// values.

// row is a row of a Markdown table: its line and its cells, trimmed.
type row struct {
	line  int
	cells []string
}

// tableRows returns the rows of the tables of md whose header line starts
// with header, without the header and the separator.
func tableRows(md, header string) []row {
	var rows []row
	in := false
	for i, line := range strings.Split(md, "\n") {
		switch {
		case strings.HasPrefix(line, header):
			in = true
		case !in || strings.HasPrefix(line, "|---"):
		case !strings.HasPrefix(line, "|"):
			in = false
		default:
			cells := strings.Split(strings.Trim(line, "|"), "|")
			for j := range cells {
				cells[j] = strings.TrimSpace(cells[j])
			}
			rows = append(rows, row{line: i + 1, cells: cells})
		}
	}
	return rows
}

// spans are the code spans of a table cell.
func spans(cell string) []string {
	var out []string
	for _, m := range keySpan.FindAllStringSubmatch(cell, -1) {
		out = append(out, m[1])
	}
	return out
}

// configDefaults renders the default of every config key, optIn's keys as
// optIn.<key>, as docs/configuration.md writes them: a string as is ("" when
// empty), a number, true or false, [] for an empty list.
func configDefaults() map[string]string {
	out := map[string]string{}
	var walk func(prefix string, v reflect.Value)
	walk = func(prefix string, v reflect.Value) {
		t := v.Type()
		for i := range t.NumField() {
			f, fv := t.Field(i), v.Field(i)
			name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
			switch {
			case f.Anonymous:
				walk(prefix, fv)
			case fv.Kind() == reflect.Struct:
				walk(prefix+name+".", fv)
			case fv.Kind() == reflect.String && fv.String() == "":
				out[prefix+name] = `""`
			case fv.Kind() == reflect.Slice && fv.Len() == 0:
				out[prefix+name] = "[]"
			default:
				out[prefix+name] = fmt.Sprint(fv.Interface())
			}
		}
	}
	walk("", reflect.ValueOf(config.Default()))
	return out
}

// checkConfigTable returns a problem for every row of the key table of
// docs/configuration.md that names no key or gives another default (the
// first code span of its default cell), and for every key without a row.
func checkConfigTable(md string, defaults map[string]string) []string {
	var problems []string
	seen := map[string]bool{}
	for _, r := range tableRows(md, "| key |") {
		at := fmt.Sprintf("%s:%d", configurationPage, r.line)
		keys, def := spans(r.cells[0]), spans(r.cells[1])
		if len(keys) != 1 || len(r.cells) < 3 {
			problems = append(problems, fmt.Sprintf("%s: a row of the key table names not one key in a code span", at))
			continue
		}
		key := keys[0]
		seen[key] = true
		want, ok := defaults[key]
		switch {
		case !ok:
			problems = append(problems, fmt.Sprintf("%s: %s is no config key (internal/config)", at, key))
		case len(def) == 0 || def[0] != want:
			problems = append(problems, fmt.Sprintf("%s: the default of %s is `%s`, not %q", at, key, want, def))
		}
	}
	for _, k := range slices.Sorted(maps.Keys(defaults)) {
		if !seen[k] {
			problems = append(problems, fmt.Sprintf("%s: the key table has no row for %s", configurationPage, k))
		}
	}
	return problems
}

// configurationPage documents every key and the command line.
const configurationPage = "docs/configuration.md"

// flagFuncs are the flag.FlagSet methods that define a flag, with the
// index of the flag's name among their arguments.
var flagFuncs = map[string]int{
	"String": 0, "Bool": 0, "Int": 0, "Duration": 0, "Func": 0,
	"StringVar": 1, "BoolVar": 1, "IntVar": 1, "DurationVar": 1, "Var": 1,
}

// flagNames returns the flags the Go files under dirs of fsys define, by
// the function (with its file) that defines them: "cmd/x/flags.go
// parseFlags" -> [config socket ...].
func flagNames(fsys fs.FS, dirs ...string) (map[string][]string, error) {
	out := map[string][]string{}
	fset := token.NewFileSet()
	for _, dir := range dirs {
		err := fs.WalkDir(fsys, dir, func(p string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() || !strings.HasSuffix(p, ".go") || strings.HasSuffix(p, "_test.go") {
				return err
			}
			src, err := fs.ReadFile(fsys, p)
			if err != nil {
				return err
			}
			f, err := parser.ParseFile(fset, p, src, parser.SkipObjectResolution)
			if err != nil {
				return err
			}
			for _, decl := range f.Decls {
				fn, ok := decl.(*ast.FuncDecl)
				if !ok {
					continue
				}
				ast.Inspect(fn, func(n ast.Node) bool {
					call, ok := n.(*ast.CallExpr)
					if !ok {
						return true
					}
					sel, ok := call.Fun.(*ast.SelectorExpr)
					if !ok {
						return true
					}
					i, ok := flagFuncs[sel.Sel.Name]
					if !ok || len(call.Args) <= i {
						return true
					}
					if lit, ok := call.Args[i].(*ast.BasicLit); ok && lit.Kind == token.STRING {
						if name, err := strconv.Unquote(lit.Value); err == nil {
							key := p + " " + fn.Name.Name
							out[key] = append(out[key], name)
						}
					}
					return true
				})
			}
			return nil
		})
		if err != nil {
			return nil, err
		}
	}
	return out, nil
}

// flagSpan is a code span that is one flag as the page writes the
// binaries' (Go's flag package): -config. A double dash is left alone: the
// page names the kubelet's (--reserved-memory) that way.
var flagSpan = regexp.MustCompile(`^-[a-z][a-z0-9-]*$`)

// checkFlags returns a problem for every row of the plugin's flag table
// that is not one of plugin (its flags), for every flag of plugin but
// -version without a row, and for every code span of the page that is a
// flag (one dash) none of the binaries has (all: every flag of cmd/ and
// the hook's; -h is the flag package's).
func checkFlags(md string, plugin []string, all map[string]bool) []string {
	var problems []string
	seen := map[string]bool{}
	for _, r := range tableRows(md, "| `cgdelegate` flag |") {
		at := fmt.Sprintf("%s:%d", configurationPage, r.line)
		for _, s := range spans(r.cells[0]) {
			name := strings.TrimPrefix(s, "-")
			seen[name] = true
			if !slices.Contains(plugin, name) {
				problems = append(problems, fmt.Sprintf("%s: the flag table lists %s, which cgdelegate does not have", at, s))
			}
		}
	}
	for _, f := range plugin {
		if f != "version" && !seen[f] {
			problems = append(problems, fmt.Sprintf("%s: the flag table has no row for cgdelegate's -%s", configurationPage, f))
		}
	}
	reported := map[string]bool{}
	for _, s := range codeSpans(md) {
		name := strings.TrimPrefix(s, "-")
		if !flagSpan.MatchString(s) || all[name] || name == "h" || reported[s] {
			continue
		}
		reported[s] = true
		problems = append(problems, fmt.Sprintf("%s: %s is a flag of none of the binaries (cmd/, internal/hook)", where(configurationPage, md, "`"+s+"`"), s))
	}
	return problems
}

func TestTableRows(t *testing.T) {
	md := "text\n\n| key | default |\n|---|---|\n| `a` | `1` |\n| `b` | |\n\n| other | x |\n|---|---|\n| `c` | `2` |\n"
	got := tableRows(md, "| key |")
	want := []row{{5, []string{"`a`", "`1`"}}, {6, []string{"`b`", ""}}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("tableRows = %v, want %v", got, want)
	}
}

func TestConfigTable(t *testing.T) {
	defaults := map[string]string{"guard": "enforce", "maxDepth": "50", "metricsAddress": `""`, "optIn.namespaces": "[]"}
	md := "| key | default | meaning |\n|---|---|---|\n" +
		"| `guard` | `enforce` | g |\n" +
		"| `maxDepth` | `5` | planted: a wrong default |\n" +
		"| `metricsAdress` | `\"\"` | planted: a misspelt key |\n" +
		"| `optIn.namespaces` | `[]` (all) | globs |\n"
	got := checkConfigTable(md, defaults)
	want := []string{
		`docs/configuration.md:4: the default of maxDepth is ` + "`50`" + `, not ["5"]`,
		"docs/configuration.md:5: metricsAdress is no config key (internal/config)",
		"docs/configuration.md: the key table has no row for metricsAddress",
	}
	if !slices.Equal(got, want) {
		t.Errorf("checkConfigTable =\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	d := configDefaults()
	for k, v := range map[string]string{"guard": "enforce", "maxDepth": "50", "cpuPinning": "false", "reservedCPUs": `""`, "optIn.namespaces": "[]", "optIn.requireUserNamespace": "false"} {
		if d[k] != v {
			t.Errorf("configDefaults()[%q] = %q, want %q", k, d[k], v)
		}
	}
	if _, ok := d["optIn"]; ok {
		t.Error("configDefaults has optIn itself, not only its keys")
	}
}

func TestFlags(t *testing.T) {
	fsys := fstest.MapFS{
		"cmd/x/flags.go":  {Data: []byte("package main\n\nfunc parseFlags() {\n\tfs.StringVar(&f.config, \"config\", \"\", \"\")\n\tfs.BoolVar(&f.version, \"version\", false, \"\")\n\tlevel := fs.String(\"log-level\", \"info\", \"\")\n}\n")},
		"internal/h/o.go": {Data: []byte("package h\n\nfunc (o *O) RegisterFlags(fs *flag.FlagSet) {\n\tfs.IntVar(&o.D, \"max-depth\", 1, \"\")\n}\n")},
	}
	got, err := flagNames(fsys, "cmd", "internal")
	if err != nil {
		t.Fatal(err)
	}
	want := map[string][]string{"cmd/x/flags.go parseFlags": {"config", "version", "log-level"}, "internal/h/o.go RegisterFlags": {"max-depth"}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("flagNames = %q, want %q", got, want)
	}
	all := map[string]bool{"config": true, "version": true, "log-level": true, "max-depth": true}
	md := "| `cgdelegate` flag | default | meaning |\n|---|---|---|\n| `-config` | none | c |\n| `-socket` | x | planted: no such flag |\n\n" +
		"The hook takes `-max-depth`; `-h` or `--help`; `-verson` is planted, `-max-dpth` too; `--reserved-memory` is the kubelet's; `-` is not a flag.\n"
	problems := checkFlags(md, want["cmd/x/flags.go parseFlags"], all)
	wantProblems := []string{
		"docs/configuration.md:4: the flag table lists -socket, which cgdelegate does not have",
		"docs/configuration.md: the flag table has no row for cgdelegate's -log-level",
		"docs/configuration.md:4: -socket is a flag of none of the binaries (cmd/, internal/hook)",
		"docs/configuration.md:6: -verson is a flag of none of the binaries (cmd/, internal/hook)",
		"docs/configuration.md:6: -max-dpth is a flag of none of the binaries (cmd/, internal/hook)",
	}
	if !slices.Equal(problems, wantProblems) {
		t.Errorf("checkFlags =\n%s\nwant\n%s", strings.Join(problems, "\n"), strings.Join(wantProblems, "\n"))
	}
}

// TestConfigurationTables: docs/configuration.md has one row for every
// config key (optIn's by theirs) with its default, and lists the plugin's
// flags; every flag it names is one of a binary's.
func TestConfigurationTables(t *testing.T) {
	root := os.DirFS("../..")
	md, err := fs.ReadFile(root, configurationPage)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range checkConfigTable(string(md), configDefaults()) {
		t.Error(p)
	}
	defs, err := flagNames(root, "cmd", "internal")
	if err != nil {
		t.Fatal(err)
	}
	// The plugin's flags: parseFlags's own and the -log-* flags every
	// cgdelegate command registers through logFlags.register.
	plugin := append(defs["cmd/cgdelegate/flags.go parseFlags"], defs["cmd/cgdelegate/flags.go register"]...)
	all := map[string]bool{}
	for _, names := range defs {
		for _, n := range names {
			all[n] = true
		}
	}
	if !slices.Contains(plugin, "config") || !all["install-to"] || !all["max-depth"] || !all["ready"] {
		t.Fatalf("the flags found, %q, lack the plugin's -config or another binary's: the code no longer reads as this test expects", defs)
	}
	for _, p := range checkFlags(string(md), plugin, all) {
		t.Error(p)
	}
}

// valuesTable is the page with the table of the chart's values.
const valuesTable = "docs/deploying.md"

// valuePaths returns every path of a values tree: "image",
// "image.repository", ... with whether it is a map with keys.
func valuePaths(prefix string, v any, out map[string]bool) {
	m, ok := v.(map[string]any)
	if !ok || len(m) == 0 {
		out[prefix] = false
		return
	}
	if prefix != "" {
		out[prefix] = true
	}
	for k, sub := range m {
		p := k
		if prefix != "" {
			p = prefix + "." + k
		}
		valuePaths(p, sub, out)
	}
}

// checkValuesTable returns a problem for every value the values table of
// docs/deploying.md names that the chart's values.yaml does not have, and
// for every value of values.yaml that no row covers (a row names it or a
// map above it). A cell may name a value relative to the one before it:
// `metrics.serviceMonitor.enabled`, `.interval`.
func checkValuesTable(md string, paths map[string]bool) []string {
	var problems []string
	var rows []string
	for _, r := range tableRows(md, "| value |") {
		at := fmt.Sprintf("%s:%d", valuesTable, r.line)
		var last string
		for _, s := range spans(r.cells[0]) {
			p := s
			if i := strings.LastIndex(last, "."); strings.HasPrefix(s, ".") && i >= 0 {
				p = last[:i] + s
			}
			last = p
			rows = append(rows, p)
			if _, ok := paths[p]; !ok {
				problems = append(problems, fmt.Sprintf("%s: the values table names %s, which values.yaml does not have", at, p))
			}
		}
	}
	covered := func(p string) bool {
		for {
			if slices.Contains(rows, p) {
				return true
			}
			i := strings.LastIndex(p, ".")
			if i < 0 {
				return false
			}
			p = p[:i]
		}
	}
	for _, p := range slices.Sorted(maps.Keys(paths)) {
		if !paths[p] && !covered(p) {
			problems = append(problems, fmt.Sprintf("%s: the values table has no row for %s", valuesTable, p))
		}
	}
	return problems
}

func TestValuesTable(t *testing.T) {
	values := map[string]any{
		"image":       map[string]any{"repository": "r", "tag": ""},
		"config":      map[string]any{"guard": "enforce"},
		"metrics":     map[string]any{"enabled": false, "serviceMonitor": map[string]any{"enabled": false, "interval": ""}},
		"tolerations": []any{map[string]any{"operator": "Exists"}},
		"extra":       map[string]any{},
	}
	paths := map[string]bool{}
	valuePaths("", values, paths)
	md := "| value | default | what |\n|---|---|---|\n" +
		"| `image.repository`, `image.tga` | r | planted: a misspelt value |\n" +
		"| `config` | the defaults | c |\n" +
		"| `metrics.serviceMonitor.enabled`, `.interval` | `false`, `\"\"` | s |\n" +
		"| `tolerations` | x | t |\n"
	got := checkValuesTable(md, paths)
	want := []string{
		"docs/deploying.md:3: the values table names image.tga, which values.yaml does not have",
		"docs/deploying.md: the values table has no row for extra",
		"docs/deploying.md: the values table has no row for image.tag",
		"docs/deploying.md: the values table has no row for metrics.enabled",
	}
	if !slices.Equal(got, want) {
		t.Errorf("checkValuesTable =\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// TestChartValuesTable: docs/deploying.md's table of the chart's values
// names only values of contrib/helm/cgdelegate/values.yaml, and every one
// of them.
func TestChartValuesTable(t *testing.T) {
	root := os.DirFS("../..")
	data, err := fs.ReadFile(root, "contrib/helm/cgdelegate/values.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var values map[string]any
	if err := sigsyaml.Unmarshal(data, &values); err != nil {
		t.Fatal(err)
	}
	paths := map[string]bool{}
	valuePaths("", values, paths)
	md, err := fs.ReadFile(root, valuesTable)
	if err != nil {
		t.Fatal(err)
	}
	if len(tableRows(string(md), "| value |")) < 5 {
		t.Fatalf("%s: no table of values (header | value | default | what |) found", valuesTable)
	}
	for _, p := range checkValuesTable(string(md), paths) {
		t.Error(p)
	}
}
