package topology

import (
	"errors"
	"strings"
	"testing"
)

func TestParseCPUList(t *testing.T) {
	tests := []struct {
		in, want string
		err      bool
	}{
		{in: "", want: ""},
		{in: "\n", want: ""},
		{in: "0\n", want: "0"},
		{in: "0-3,8,10-11\n", want: "0-3,8,10-11"},
		{in: "5-5", want: "5"},
		{in: "3,1,2", want: "1-3"},
		{in: "65535", want: "65535"},
		{in: "65536", err: true},
		{in: "0-4294967295", err: true},
		{in: "3-1", err: true},
		{in: "1,,2", err: true},
		{in: "1-", err: true},
		{in: "-1", err: true},
		{in: "+1", err: true},
		{in: "1 ,2", err: true},
		{in: "0-3:2", err: true},
		{in: "a", err: true},
	}
	for _, tc := range tests {
		t.Run(tc.in, func(t *testing.T) {
			got, err := ParseCPUList(tc.in)
			if tc.err {
				if !errors.Is(err, ErrMalformed) {
					t.Fatalf("ParseCPUList(%q) = %v, %v; want ErrMalformed", tc.in, got, err)
				}
				return
			}
			if err != nil || got.String() != tc.want {
				t.Fatalf("ParseCPUList(%q) = %q, %v; want %q", tc.in, got.String(), err, tc.want)
			}
		})
	}
}

func FuzzParseCPUList(f *testing.F) {
	for _, s := range []string{"0-3,8", "", "1-", "7-2", "0,0,0", "65535", "1-2-3"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		set, err := ParseCPUList(s)
		if err != nil {
			if !errors.Is(err, ErrMalformed) {
				t.Fatalf("error %v does not wrap ErrMalformed", err)
			}
			return
		}
		again, err := ParseCPUList(set.String())
		if err != nil || !again.Equals(set) {
			t.Fatalf("round trip of %q: %q -> %v, %v", s, set.String(), again, err)
		}
	})
}

func TestParseDistances(t *testing.T) {
	got, err := ParseDistances("10 21 31\n")
	if err != nil || len(got) != 3 || got[2] != 31 {
		t.Fatalf("ParseDistances = %v, %v", got, err)
	}
	for _, bad := range []string{"", "\n", "10 x", "10 -1", "10 0", "10 256"} {
		if _, err := ParseDistances(bad); !errors.Is(err, ErrMalformed) {
			t.Errorf("ParseDistances(%q) = %v, want ErrMalformed", bad, err)
		}
	}
}

func TestParseMemTotal(t *testing.T) {
	tests := []struct {
		in   string
		want uint64
		err  bool
	}{
		{in: "Node 0 MemTotal:       32718228 kB\nNode 0 MemFree:  1 kB\n", want: 32718228 << 10},
		{in: "Node 1 MemFree: 1 kB\nNode 1 MemTotal: 2 kB\n", want: 2 << 10},
		{in: "MemTotal: 7", want: 7},
		{in: "Node 0 MemTotal: 3 MB", want: 3 << 20},
		{in: "", err: true},
		{in: "Node 0 MemFree: 1 kB", err: true},
		{in: "Node 0 MemTotal:", err: true},
		{in: "Node 0 MemTotal: -5 kB", err: true},
		{in: "Node 0 MemTotal: 5 pages", err: true},
		{in: "Node 0 MemTotal: 18446744073709551615 kB", err: true},
	}
	for _, tc := range tests {
		t.Run(tc.in, func(t *testing.T) {
			got, err := ParseMemTotal(strings.NewReader(tc.in))
			if tc.err {
				if !errors.Is(err, ErrMalformed) {
					t.Fatalf("ParseMemTotal = %d, %v; want ErrMalformed", got, err)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("ParseMemTotal = %d, %v; want %d", got, err, tc.want)
			}
		})
	}
}
