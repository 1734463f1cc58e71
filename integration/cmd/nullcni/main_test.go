package main

import (
	"bytes"
	"strings"
	"testing"
)

func TestRun(t *testing.T) {
	tests := []struct {
		name, cmd, ifname, in string
		wantErr               bool
		wantOut               string
	}{
		{name: "version", cmd: "VERSION", wantOut: `"supportedVersions":["0.4.0","1.0.0","1.1.0"]`},
		{name: "add eth0", cmd: "ADD", ifname: "eth0", in: `{"cniVersion":"1.0.0"}`, wantOut: `"address":"192.0.2.10/24"`},
		{name: "add lo", cmd: "ADD", ifname: "lo", in: `{"cniVersion":"1.0.0"}`, wantOut: `"address":"127.0.0.1/8"`},
		{name: "add with bad config", cmd: "ADD", in: `{`, wantErr: true},
		{name: "del", cmd: "DEL"},
		{name: "unknown", cmd: "FROB", wantErr: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv("CNI_IFNAME", tc.ifname)
			var out bytes.Buffer
			err := run(tc.cmd, strings.NewReader(tc.in), &out)
			if (err != nil) != tc.wantErr {
				t.Fatalf("err = %v, wantErr %v", err, tc.wantErr)
			}
			if !strings.Contains(out.String(), tc.wantOut) {
				t.Errorf("output %q lacks %q", out.String(), tc.wantOut)
			}
		})
	}
}
