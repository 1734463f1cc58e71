package variant

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// Prefix starts every kernel parameter of a variant.
const Prefix = "cgd."

// The parameter keys, without Prefix. integration/vm/init.sh reads
// cgd.nsdelegate=0 itself, to mount cgroup2 before the guest runs, and
// cgd.kubelet=1 or cgd.cluster=1, to give the guest tests more time (and,
// for cgd.cluster=1, to bring up the guest's network); the systemd variant's
// guest unit (integration/vm/systemd.go) reads cgd.nsdelegate=0 to
// remount the cgroup2 systemd mounted.
const (
	keyName           = "variant"
	keyContainerd     = "containerd"
	keyNSDelegate     = "nsdelegate"
	keyPlugin         = "plugin"
	keyCgroupWritable = "cgroup_writable"
	keyPinning        = "pinning"
	keyFailClosed     = "failclosed"
	keySystemd        = "systemd"
	keyAppArmor       = "apparmor"
	keySMP            = "smp"
	keyNUMA           = "numa"
	keyKubelet        = "kubelet"
	keyCluster        = "cluster"
	keyScenarios      = "scenarios"
)

// keys are every parameter of a variant, in the order Encode writes them.
var keys = []string{
	keyName, keyContainerd, keyNSDelegate, keyPlugin, keyCgroupWritable,
	keyPinning, keyFailClosed, keySystemd, keyAppArmor, keySMP, keyNUMA, keyKubelet, keyCluster, keyScenarios,
}

// Sentinels of ParamError.
var (
	ErrMissing  = errors.New("missing")
	ErrUnknown  = errors.New("unknown parameter")
	ErrRepeated = errors.New("given more than once")
	ErrInvalid  = errors.New("invalid value")
)

// ParamError is a problem with one cgd.* kernel parameter.
type ParamError struct {
	Key   string // without Prefix
	Value string
	Err   error
}

func (e *ParamError) Error() string {
	if errors.Is(e.Err, ErrMissing) {
		return fmt.Sprintf("kernel parameter %s%s: %v", Prefix, e.Key, e.Err)
	}
	return fmt.Sprintf("kernel parameter %s%s=%q: %v", Prefix, e.Key, e.Value, e.Err)
}

func (e *ParamError) Unwrap() error { return e.Err }

func invalid(key, value, why string) error {
	return &ParamError{Key: key, Value: value, Err: fmt.Errorf("%w: %s", ErrInvalid, why)}
}

// params are the variant's parameter values by key.
func (v Variant) params() map[string]string {
	scenarios := make([]string, len(v.Scenarios))
	for i, s := range v.Scenarios {
		scenarios[i] = string(s)
	}
	return map[string]string{
		keyName:           v.Name,
		keyContainerd:     v.Containerd,
		keyNSDelegate:     formatBool(v.NSDelegate),
		keyPlugin:         string(v.Plugin),
		keyCgroupWritable: formatBool(v.CgroupWritable),
		keyPinning:        formatBool(v.Pinning),
		keyFailClosed:     formatBool(v.FailClosed),
		keySystemd:        formatBool(v.Systemd),
		keyAppArmor:       formatBool(v.AppArmor),
		keySMP:            strconv.Itoa(v.SMP),
		keyNUMA:           formatBool(v.NUMA),
		keyKubelet:        formatBool(v.Kubelet),
		keyCluster:        formatBool(v.Cluster),
		keyScenarios:      strings.Join(scenarios, ","),
	}
}

func formatBool(b bool) string {
	if b {
		return "1"
	}
	return "0"
}

// Encode returns the variant's kernel parameters, space-separated, every
// key once in a fixed order. It fails when the variant is not valid.
func (v Variant) Encode() (string, error) {
	if err := v.Validate(); err != nil {
		return "", fmt.Errorf("variant %q: %w", v.Name, err)
	}
	p := v.params()
	out := make([]string, len(keys))
	for i, k := range keys {
		out[i] = Prefix + k + "=" + p[k]
	}
	return strings.Join(out, " "), nil
}

// Decode reads the variant from a kernel command line such as the content
// of /proc/cmdline. Parameters without Prefix are ignored. Every variant
// parameter must be given exactly once, no other cgd.* parameter may be,
// and the result must be valid. Every problem is a *ParamError: all those
// of the parameters' form, else all those Validate finds.
func Decode(cmdline string) (Variant, error) {
	d := decoder{raw: map[string]string{}}
	seen := map[string]bool{}
	for _, f := range strings.Fields(cmdline) {
		k, value, hasValue := strings.Cut(f, "=")
		key, ok := strings.CutPrefix(k, Prefix)
		if !ok {
			continue
		}
		switch {
		case !slices.Contains(keys, key):
			d.fail(&ParamError{Key: key, Value: value, Err: ErrUnknown})
		case seen[key]:
			d.fail(&ParamError{Key: key, Value: value, Err: ErrRepeated})
		case !hasValue:
			d.fail(invalid(key, value, "want "+Prefix+key+"=value"))
		default:
			d.raw[key] = value
		}
		seen[key] = true
	}
	for _, k := range keys {
		if !seen[k] {
			d.fail(&ParamError{Key: k, Err: ErrMissing})
		}
	}
	v := Variant{
		Name:           d.raw[keyName],
		Containerd:     d.raw[keyContainerd],
		NSDelegate:     d.bool(keyNSDelegate),
		Plugin:         Plugin(d.raw[keyPlugin]),
		CgroupWritable: d.bool(keyCgroupWritable),
		Pinning:        d.bool(keyPinning),
		FailClosed:     d.bool(keyFailClosed),
		Systemd:        d.bool(keySystemd),
		AppArmor:       d.bool(keyAppArmor),
		SMP:            d.int(keySMP),
		NUMA:           d.bool(keyNUMA),
		Kubelet:        d.bool(keyKubelet),
		Cluster:        d.bool(keyCluster),
	}
	if s := d.raw[keyScenarios]; s != "" {
		for _, id := range strings.Split(s, ",") {
			v.Scenarios = append(v.Scenarios, Scenario(id))
		}
	}
	if len(d.errs) > 0 {
		return Variant{}, errors.Join(d.errs...)
	}
	if err := v.Validate(); err != nil {
		return Variant{}, err
	}
	return v, nil
}

// decoder collects the problems of the parameters it converts.
type decoder struct {
	raw  map[string]string
	errs []error
}

func (d *decoder) fail(err error) { d.errs = append(d.errs, err) }

func (d *decoder) bool(key string) bool {
	value, ok := d.raw[key]
	if !ok {
		return false
	}
	switch value {
	case "1":
		return true
	case "0":
		return false
	}
	d.fail(invalid(key, value, "want 0 or 1"))
	return false
}

func (d *decoder) int(key string) int {
	value, ok := d.raw[key]
	if !ok {
		return 0
	}
	n, err := strconv.Atoi(value)
	if err != nil {
		d.fail(invalid(key, value, "want a decimal number"))
	}
	return n
}
