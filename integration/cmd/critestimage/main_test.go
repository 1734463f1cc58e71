package main

import (
	"bytes"
	"errors"
	"strings"
	"testing"
)

func TestRun(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		want string
		err  error
	}{
		{name: "nonewprivs", want: "Effective uid: "},
		{name: "ipcmk", args: []string{"-M"}, err: errUsage},
		{name: "ipcmk", args: []string{"-M", "zero"}, err: errUsage},
		{name: "ipcmk", args: []string{"-M", "-4"}, err: errUsage},
		{name: "ipcmk", args: []string{"-Q", "4096"}, err: errUsage},
		{name: "sh", err: errUsage},
	} {
		t.Run(tc.name+strings.Join(tc.args, ""), func(t *testing.T) {
			var out bytes.Buffer
			err := run(tc.name, tc.args, &out)
			if !errors.Is(err, tc.err) {
				t.Fatalf("run(%s %q) = %v, want %v", tc.name, tc.args, err, tc.err)
			}
			if !strings.HasPrefix(out.String(), tc.want) {
				t.Fatalf("run(%s %q) printed %q, want prefix %q", tc.name, tc.args, out.String(), tc.want)
			}
		})
	}
}
