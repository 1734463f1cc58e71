package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"reflect"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

// Parse decodes YAML (or JSON) from r over the defaults and validates the
// result. Unknown keys are an error, so a typo never silently falls back to
// a default.
func Parse(r io.Reader) (Config, error) {
	data, err := io.ReadAll(r)
	if err != nil {
		return Config{}, fmt.Errorf("read config: %w", err)
	}
	return decodeValid(Default(), data, "config")
}

// Load reads and parses the config file at path.
func Load(path string) (Config, error) {
	f, err := os.Open(path)
	if err != nil {
		return Config{}, fmt.Errorf("open config %q: %w", path, err)
	}
	defer f.Close()
	c, err := Parse(f)
	if err != nil {
		return Config{}, fmt.Errorf("config %q: %w", path, err)
	}
	return c, nil
}

// Merge overlays the keys present in a Configure blob onto base and
// validates the result. The blob follows the same rules as the file: a key
// it sets to 0 or "" is an error, not a return to base or the default.
func Merge(base Config, blob string) (Config, error) {
	return decodeValid(base, []byte(blob), "NRI config blob")
}

// decodeValid decodes data over base and validates the result, reporting
// every problem with a key or a value at once.
func decodeValid(base Config, data []byte, what string) (Config, error) {
	keys, err := parseMapping(data)
	if err != nil {
		return Config{}, fmt.Errorf("decode %s: %w", what, err)
	}
	c, err := decodeOver(base, keys)
	if err := errors.Join(err, c.Validate()); err != nil {
		return Config{}, err
	}
	return c, nil
}

// parseMapping parses data as one YAML (or JSON) document and returns its
// top-level mapping node, or nil for an empty document.
func parseMapping(data []byte) (*yaml.Node, error) {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, nil
		}
		return nil, err
	}
	var next yaml.Node
	switch err := dec.Decode(&next); {
	case err == nil:
		return nil, fmt.Errorf("line %d: want one YAML document, found more", next.Line)
	case !errors.Is(err, io.EOF):
		return nil, err
	}
	if len(doc.Content) == 0 {
		return nil, nil
	}
	top := resolve(doc.Content[0])
	if top.Kind != yaml.MappingNode {
		if top.Kind == yaml.ScalarNode && top.ShortTag() == "!!null" {
			return nil, nil
		}
		return nil, fmt.Errorf("line %d: want a mapping of keys, got %s", top.Line, describe(top))
	}
	return top, nil
}

// decodeOver sets the field of every key in the mapping m on a copy of
// base; an absent key keeps base's value. Scalars are taken as written:
// strings verbatim, whole numbers and booleans only when YAML 1.2 reads them
// so; a list replaces the base list whole; a nested mapping (optIn) is
// merged key by key. Every unknown, repeated or mistyped key is reported;
// such a key leaves its field as it was in base.
func decodeOver(base Config, m *yaml.Node) (Config, error) {
	c := base
	if m == nil {
		return c, nil
	}
	return c, decodeStruct(reflect.ValueOf(&c).Elem(), "", m)
}

// decodeStruct sets the fields of the struct v from the mapping m; prefix
// is the path of v's keys in errors ("optIn.").
func decodeStruct(v reflect.Value, prefix string, m *yaml.Node) error {
	index := fieldIndex(v.Type())
	seen := make(map[string]int)
	var errs []error
	for i := 0; i+1 < len(m.Content); i += 2 {
		k, val := resolve(m.Content[i]), resolve(m.Content[i+1])
		key := prefix + k.Value
		idx, known := index[k.Value]
		switch line, dup := seen[key]; {
		case !known:
			errs = append(errs, fmt.Errorf("%s: unknown key (line %d)", key, k.Line))
		case dup:
			errs = append(errs, fmt.Errorf("%s: set twice (lines %d and %d)", key, line, k.Line))
		default:
			seen[key] = k.Line
			if err := setField(v.FieldByIndex(idx), key, val); err != nil {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}

// fieldIndex maps every YAML key (the field's json tag name) to the field's
// index in t. The fields of an embedded struct (a part of Config) are keys
// of t, as encoding/json flattens them.
func fieldIndex(t reflect.Type) map[string][]int {
	index := make(map[string][]int, t.NumField())
	for i := range t.NumField() {
		f := t.Field(i)
		if f.Anonymous && f.Type.Kind() == reflect.Struct {
			for name, sub := range fieldIndex(f.Type) {
				index[name] = append([]int{i}, sub...)
			}
			continue
		}
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		index[name] = []int{i}
	}
	return index
}

// setField stores n in f: a string, int or bool field from a scalar, a
// string list from a sequence of scalars, a struct from a mapping.
func setField(f reflect.Value, key string, n *yaml.Node) error {
	isScalar := n.Kind == yaml.ScalarNode
	switch f.Kind() {
	case reflect.String:
		if !isScalar {
			return fmt.Errorf("%s: %s is not a string", key, describe(n))
		}
		f.SetString(n.Value)
	case reflect.Int:
		var i int
		if !isScalar || n.ShortTag() != "!!int" || n.Decode(&i) != nil {
			return fmt.Errorf("%s: %s is not a whole number", key, describe(n))
		}
		f.SetInt(int64(i))
	case reflect.Bool:
		var b bool
		if !isScalar || n.ShortTag() != "!!bool" || n.Decode(&b) != nil {
			return fmt.Errorf("%s: %s is not true or false", key, describe(n))
		}
		f.SetBool(b)
	case reflect.Slice:
		if n.Kind != yaml.SequenceNode || f.Type().Elem().Kind() != reflect.String {
			return fmt.Errorf("%s: %s is not a list of strings", key, describe(n))
		}
		list := make([]string, 0, len(n.Content))
		var errs []error
		for i, item := range n.Content {
			item = resolve(item)
			if item.Kind != yaml.ScalarNode {
				errs = append(errs, fmt.Errorf("%s[%d]: %s is not a string", key, i, describe(item)))
				continue
			}
			list = append(list, item.Value)
		}
		if len(errs) > 0 {
			return errors.Join(errs...)
		}
		f.Set(reflect.ValueOf(list))
	case reflect.Struct:
		if n.Kind != yaml.MappingNode {
			return fmt.Errorf("%s: %s is not a mapping", key, describe(n))
		}
		return decodeStruct(f, key+".", n)
	default:
		panic(fmt.Sprintf("config: field %s has unsupported kind %s", key, f.Kind()))
	}
	return nil
}

// resolve follows an alias to the node it names.
func resolve(n *yaml.Node) *yaml.Node {
	for n.Kind == yaml.AliasNode && n.Alias != nil {
		n = n.Alias
	}
	return n
}

// describe renders a value in YAML terms for an error: a scalar quoted as
// written, otherwise what kind of node it is.
func describe(n *yaml.Node) string {
	switch n.Kind {
	case yaml.ScalarNode:
		return strconv.Quote(n.Value)
	case yaml.SequenceNode:
		return "a list"
	case yaml.MappingNode:
		return "a mapping"
	default:
		return "nothing"
	}
}
