package config

import (
	"maps"
	"strings"
	"testing"
)

func TestParseReservedMemory(t *testing.T) {
	const gi = int64(1) << 30
	tests := []struct {
		name    string
		in      string
		want    map[int]int64
		wantErr []string
	}{
		{name: "empty reserves nothing", in: "", want: map[int]int64{}},
		{name: "one node", in: "0:memory=1Gi", want: map[int]int64{0: gi}},
		{name: "two nodes", in: "0:memory=1Gi;1:memory=512Mi", want: map[int]int64{0: gi, 1: 512 << 20}},
		{name: "decimal and fractional quantities", in: "0:memory=100M;1:memory=1.5Gi", want: map[int]int64{0: 100e6, 1: 3 * gi / 2}},
		{name: "plain bytes", in: "3:memory=4096", want: map[int]int64{3: 4096}},
		{name: "not node:types", in: "memory=1Gi", wantErr: []string{`reservedMemory: "memory=1Gi": entry "memory=1Gi" is not <numa node>:memory=<quantity>`}},
		{name: "node not a number", in: "a:memory=1Gi", wantErr: []string{`NUMA node "a" is not a whole number`}},
		{name: "negative node", in: "-1:memory=1Gi", wantErr: []string{`NUMA node "-1" is not a whole number`}},
		{name: "no quantity", in: "0:memory", wantErr: []string{`NUMA node 0: "memory" is not memory=<quantity>`}},
		{name: "bad quantity", in: "0:memory=lots", wantErr: []string{`NUMA node 0: memory "lots" is not a quantity`}},
		{name: "negative", in: "0:memory=-1Gi", wantErr: []string{`NUMA node 0: memory "-1Gi" is negative`}},
		{name: "zero", in: "0:memory=0", wantErr: []string{`NUMA node 0: memory "0" is zero`}},
		{name: "fraction of a byte", in: "0:memory=1500m", wantErr: []string{`NUMA node 0: memory "1500m" is not a whole number of bytes`}},
		{name: "hugepages", in: "0:memory=1Gi,hugepages-2Mi=1Gi", wantErr: []string{`NUMA node 0: type "hugepages-2Mi" is not supported`}},
		{name: "unknown type", in: "0:cpu=1", wantErr: []string{`NUMA node 0: unknown type "cpu", want memory`}},
		{name: "node twice", in: "0:memory=1Gi;0:memory=2Gi", wantErr: []string{"NUMA node 0: memory is reserved twice"}},
		{
			name: "every problem at once", in: "0:memory=-1;x:memory=1;1:memory=0",
			wantErr: []string{`memory "-1" is negative`, `NUMA node "x"`, `NUMA node 1: memory "0" is zero`},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseReservedMemory(tc.in)
			if tc.wantErr != nil {
				checkErr(t, err, tc.wantErr)
				if got != nil {
					t.Errorf("got %v with an error", got)
				}
				// Validate reports the same problem under the field.
				c := Default()
				c.ReservedMemory = tc.in
				checkErr(t, c.Validate(), append([]string{"reservedMemory: "}, tc.wantErr...))
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !maps.Equal(got, tc.want) {
				t.Errorf("ParseReservedMemory(%q) = %v, want %v", tc.in, got, tc.want)
			}
		})
	}
}

func TestReservedMemoryFromFile(t *testing.T) {
	c, err := Parse(strings.NewReader("reservedMemory: \"0:memory=1Gi;1:memory=2Gi\"\n"))
	if err != nil {
		t.Fatal(err)
	}
	if got := c.ReservedMemoryBytes(); !maps.Equal(got, map[int]int64{0: 1 << 30, 1: 2 << 30}) {
		t.Errorf("ReservedMemoryBytes = %v", got)
	}
	if len(Default().ReservedMemoryBytes()) != 0 {
		t.Errorf("the default reserves memory: %v", Default().ReservedMemoryBytes())
	}
	if _, err := Parse(strings.NewReader("reservedMemory: 0:memory=0\n")); err == nil || !strings.Contains(err.Error(), `reservedMemory: "0:memory=0"`) {
		t.Errorf("zero reservation: err = %v", err)
	}
}
