package config

import (
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
)

// Part says when the keys of a part of Config take effect.
type Part string

const (
	// PartReloadable keys are put in force by a Configure and by a reload.
	PartReloadable Part = "reloadable"
	// PartPinning keys are put in force when the runtime configures the
	// plugin, never by a reload.
	PartPinning Part = "pinning"
	// PartStartOnly keys are read once, when the plugin starts.
	PartStartOnly Part = "start-only"
)

// NeedsRestart reports whether a reload can not put the part's keys in
// force.
func (p Part) NeedsRestart() bool { return p != PartReloadable }

// parts are the parts embedded in Config, in the order of its fields.
var parts = []struct {
	t    reflect.Type
	part Part
}{
	{reflect.TypeFor[Reloadable](), PartReloadable},
	{reflect.TypeFor[Pinning](), PartPinning},
	{reflect.TypeFor[StartOnly](), PartStartOnly},
}

// Key is one top-level YAML key of Config and the part it belongs to.
type Key struct {
	Name string
	Part Part
	// index is the field's index in Config, for reflect.Value.FieldByIndex.
	index []int
}

// Keys lists every top-level YAML key of Config with its part, part by
// part in the order of the fields (optIn is one key).
func Keys() []Key {
	var keys []Key
	config := reflect.TypeFor[Config]()
	for _, p := range parts {
		f, _ := config.FieldByName(p.t.Name())
		for j := range p.t.NumField() {
			name, _, _ := strings.Cut(p.t.Field(j).Tag.Get("json"), ",")
			keys = append(keys, Key{Name: name, Part: p.part, index: []int{f.Index[0], j}})
		}
	}
	return keys
}

// RestartKeys lists the keys of part, a part whose keys need a restart
// (PartPinning or PartStartOnly), in the order of the fields. The check of a
// reload (RestartChanges), its error and the list in
// docs/configuration.md all come from these lists.
func RestartKeys(part Part) []string {
	var names []string
	for _, k := range Keys() {
		if k.Part == part && part.NeedsRestart() {
			names = append(names, k.Name)
		}
	}
	return names
}

// ErrNeedsRestart is wrapped by the error of a reload that changes keys
// that need a restart (RestartKeys).
var ErrNeedsRestart = errors.New("keys changed that take effect only when the plugin restarts")

// Change is a key whose value differs between two configs.
type Change struct {
	Key  string `json:"key"`
	Part Part   `json:"part"`
	// Old (the value in force) and New (the value asked) are the values
	// as JSON: "pod", true, 3.
	Old string `json:"inForce"`
	New string `json:"asked"`
}

func (c Change) String() string {
	return fmt.Sprintf("%s: %s in force, %s asked", c.Key, c.Old, c.New)
}

// Changes lists the keys of the given parts whose values differ from old
// to cfg, in the order of the fields.
func Changes(old, cfg Config, in ...Part) []Change {
	var out []Change
	a, b := reflect.ValueOf(old), reflect.ValueOf(cfg)
	for _, k := range Keys() {
		va, vb := a.FieldByIndex(k.index).Interface(), b.FieldByIndex(k.index).Interface()
		if !slices.Contains(in, k.Part) || reflect.DeepEqual(va, vb) {
			continue
		}
		out = append(out, Change{Key: k.Name, Part: k.Part, Old: jsonValue(va), New: jsonValue(vb)})
	}
	return out
}

// RestartChanges lists the keys that need a restart (RestartKeys) whose
// values differ from old, the config in force, to cfg, a reloaded one.
func RestartChanges(old, cfg Config) []Change {
	return Changes(old, cfg, PartPinning, PartStartOnly)
}

// RestartError returns nil for no changes, and otherwise an error wrapping
// ErrNeedsRestart that names every changed key with its value in force and
// the value asked.
func RestartError(changes []Change) error {
	if len(changes) == 0 {
		return nil
	}
	list := make([]string, len(changes))
	for i, c := range changes {
		list[i] = c.String()
	}
	return fmt.Errorf("%w: %s", ErrNeedsRestart, strings.Join(list, "; "))
}

// jsonValue renders a key's value as JSON; the values of Config always
// encode.
func jsonValue(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprintf("%v", v)
	}
	return string(b)
}
