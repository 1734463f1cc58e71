package budget

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

// Amount is one annotated request/limit pair. Zero means unset.
type Amount struct {
	Request, Limit int64
}

// Annotation is a parsed resources annotation. A nil field was not stated.
type Annotation struct {
	CPU    *Amount // millicores
	Memory *Amount // bytes
}

// ParseAnnotation parses the value of the annotation key. Errors wrap
// ErrAnnotation and name the key and the value.
func ParseAnnotation(key, value string) (Annotation, error) {
	a, err := parseAnnotation(value)
	if err != nil {
		return Annotation{}, fmt.Errorf("%w: %s=%q: %w", ErrAnnotation, key, value, err)
	}
	return a, nil
}

func parseAnnotation(value string) (Annotation, error) {
	var a Annotation
	if strings.TrimSpace(value) == "" {
		return a, fmt.Errorf("empty value")
	}
	for _, field := range strings.Split(value, ",") {
		name, amount, ok := strings.Cut(field, "=")
		name = strings.TrimSpace(name)
		if !ok {
			return a, fmt.Errorf("field %q is not name=amount", strings.TrimSpace(field))
		}
		var (
			dst   **Amount
			parse func(string) (int64, error)
		)
		switch name {
		case "cpu":
			dst, parse = &a.CPU, ParseCPU
		case "memory":
			dst, parse = &a.Memory, ParseMemory
		default:
			return a, fmt.Errorf("unknown field %q (want cpu or memory)", name)
		}
		if *dst != nil {
			return a, fmt.Errorf("field %q given twice", name)
		}
		amt, err := parseAmount(amount, parse)
		if err != nil {
			return a, fmt.Errorf("%s: %w", name, err)
		}
		*dst = &amt
	}
	return a, nil
}

func parseAmount(s string, parse func(string) (int64, error)) (Amount, error) {
	reqS, limS, split := strings.Cut(s, "/")
	req, err := parse(strings.TrimSpace(reqS))
	if err != nil {
		return Amount{}, err
	}
	if !split {
		if req == 0 {
			return Amount{}, fmt.Errorf("%q: a limit must be positive; write %q for no request and no limit", s, "0/")
		}
		return Amount{Request: req, Limit: req}, nil
	}
	limS = strings.TrimSpace(limS)
	if limS == "" {
		return Amount{Request: req}, nil
	}
	lim, err := parse(limS)
	if err != nil {
		return Amount{}, err
	}
	if lim == 0 {
		return Amount{}, fmt.Errorf("limit %q must be positive", limS)
	}
	if req > lim {
		return Amount{}, fmt.Errorf("request %q exceeds limit %q", strings.TrimSpace(reqS), limS)
	}
	return Amount{Request: req, Limit: lim}, nil
}

// ParseCPU parses a CPU quantity: "2", "1.5", "0.25" (CPUs, at most three
// decimals) or "1500m" (millicores). The result is in millicores.
func ParseCPU(s string) (int64, error) {
	if s == "" {
		return 0, fmt.Errorf("empty cpu quantity")
	}
	if m, ok := strings.CutSuffix(s, "m"); ok {
		v, err := parseDigits(m)
		if err != nil || v > maxMilli {
			return 0, fmt.Errorf("cpu quantity %q is not whole millicores", s)
		}
		return v, nil
	}
	whole, frac, hasFrac := strings.Cut(s, ".")
	w, err := parseDigits(whole)
	if err != nil || w > maxMilli/1000 {
		return 0, fmt.Errorf("cpu quantity %q is not a number of cpus", s)
	}
	v := w * 1000
	if hasFrac {
		if frac == "" || len(frac) > 3 {
			return 0, fmt.Errorf("cpu quantity %q needs 1 to 3 decimals (finest unit 1m)", s)
		}
		f, err := parseDigits(frac)
		if err != nil {
			return 0, fmt.Errorf("cpu quantity %q is not a number of cpus", s)
		}
		for i := len(frac); i < 3; i++ {
			f *= 10
		}
		v += f
	}
	return v, nil
}

var memorySuffixes = []struct {
	suffix string
	mult   int64
}{
	{"Ki", 1 << 10},
	{"Mi", 1 << 20},
	{"Gi", 1 << 30},
	{"Ti", 1 << 40},
	{"Pi", 1 << 50},
	{"k", 1e3},
	{"M", 1e6},
	{"G", 1e9},
	{"T", 1e12},
	{"P", 1e15},
}

// ParseMemory parses a memory quantity: whole bytes with an optional k, M,
// G, T, P or Ki, Mi, Gi, Ti, Pi suffix. The result is in bytes.
func ParseMemory(s string) (int64, error) {
	if s == "" {
		return 0, fmt.Errorf("empty memory quantity")
	}
	num, mult := s, int64(1)
	for _, u := range memorySuffixes {
		if n, ok := strings.CutSuffix(s, u.suffix); ok {
			num, mult = n, u.mult
			break
		}
	}
	v, err := parseDigits(num)
	if err != nil {
		return 0, fmt.Errorf("memory quantity %q is not whole bytes with an optional k/M/G/T/P or Ki/Mi/Gi/Ti/Pi suffix", s)
	}
	if v > math.MaxInt64/mult {
		return 0, fmt.Errorf("memory quantity %q is too large", s)
	}
	return v * mult, nil
}

// parseDigits accepts only ASCII digits: no sign, no spaces, no exponent.
func parseDigits(s string) (int64, error) {
	if s == "" {
		return 0, fmt.Errorf("no digits")
	}
	for _, r := range s {
		if r < '0' || r > '9' {
			return 0, fmt.Errorf("%q is not a number", s)
		}
	}
	return strconv.ParseInt(s, 10, 64)
}
