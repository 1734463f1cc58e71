package budget

import (
	"errors"
	"strings"
	"testing"

	"github.com/cgdelegate/cgdelegate/internal/annotations"
)

func amt(req, lim int64) *Amount { return &Amount{Request: req, Limit: lim} }

func TestParseAnnotation(t *testing.T) {
	const gi = 1 << 30
	tests := []struct {
		name    string
		value   string
		want    Annotation
		wantErr string
	}{
		{name: "cpu and memory", value: "cpu=4,memory=8Gi", want: Annotation{CPU: amt(4000, 4000), Memory: amt(8*gi, 8*gi)}},
		{name: "millicores", value: "cpu=1500m", want: Annotation{CPU: amt(1500, 1500)}},
		{name: "decimal cpus", value: "cpu=0.25", want: Annotation{CPU: amt(250, 250)}},
		{name: "three decimals", value: "cpu=1.001", want: Annotation{CPU: amt(1001, 1001)}},
		{name: "request and limit", value: "cpu=500m/2, memory=256Mi/1Gi", want: Annotation{CPU: amt(500, 2000), Memory: amt(256<<20, gi)}},
		{name: "request only", value: "cpu=250m/", want: Annotation{CPU: amt(250, 0)}},
		{name: "nothing at all", value: "cpu=0/", want: Annotation{CPU: amt(0, 0)}},
		{name: "spaces", value: " memory = 1000 / 2k , cpu = 1 ", want: Annotation{CPU: amt(1000, 1000), Memory: amt(1000, 2000)}},
		{name: "decimal memory suffixes", value: "memory=1M/1G", want: Annotation{Memory: amt(1e6, 1e9)}},
		{name: "binary memory suffixes", value: "memory=1Ki/1Pi", want: Annotation{Memory: amt(1024, 1<<50)}},
		{name: "memory only", value: "memory=2T", want: Annotation{Memory: amt(2e12, 2e12)}},

		{name: "empty", value: "", wantErr: "empty value"},
		{name: "blank", value: "  ", wantErr: "empty value"},
		{name: "no equals", value: "cpu", wantErr: `field "cpu" is not name=amount`},
		{name: "unknown field", value: "gpu=1", wantErr: `unknown field "gpu"`},
		{name: "duplicate field", value: "cpu=1,cpu=2", wantErr: `field "cpu" given twice`},
		{name: "trailing comma", value: "cpu=1,", wantErr: `field "" is not name=amount`},
		{name: "empty amount", value: "cpu=", wantErr: "empty cpu quantity"},
		{name: "empty request", value: "cpu=/2", wantErr: "empty cpu quantity"},
		{name: "zero without slash", value: "cpu=0", wantErr: "a limit must be positive"},
		{name: "zero limit", value: "cpu=0/0", wantErr: `limit "0" must be positive`},
		{name: "request above limit", value: "cpu=2/1", wantErr: `request "2" exceeds limit "1"`},
		{name: "negative cpu", value: "cpu=-1", wantErr: `cpu quantity "-1" is not a number of cpus`},
		{name: "plus sign", value: "cpu=+1", wantErr: "is not a number of cpus"},
		{name: "bad millicores", value: "cpu=1.5m", wantErr: `cpu quantity "1.5m" is not whole millicores`},
		{name: "empty millicores", value: "cpu=m", wantErr: "is not whole millicores"},
		{name: "too many decimals", value: "cpu=0.0001", wantErr: "needs 1 to 3 decimals"},
		{name: "bare dot", value: "cpu=1.", wantErr: "needs 1 to 3 decimals"},
		{name: "bad decimal", value: "cpu=1.x", wantErr: "is not a number of cpus"},
		{name: "exponent", value: "cpu=1e3", wantErr: "is not a number of cpus"},
		{name: "huge cpu", value: "cpu=99999999999999", wantErr: "is not a number of cpus"},
		{name: "huge millicores", value: "cpu=9999999999999999m", wantErr: "is not whole millicores"},
		{name: "bad memory suffix", value: "memory=1GB", wantErr: `memory quantity "1GB" is not whole bytes`},
		{name: "fractional memory", value: "memory=1.5Gi", wantErr: "is not whole bytes"},
		{name: "negative memory", value: "memory=-1", wantErr: "is not whole bytes"},
		{name: "bare suffix", value: "memory=Gi", wantErr: "is not whole bytes"},
		{name: "memory overflow", value: "memory=9000000Ti", wantErr: "too large"},
		{name: "memory digits overflow", value: "memory=99999999999999999999", wantErr: "is not whole bytes"},
		{name: "bad limit", value: "memory=1Gi/x", wantErr: `memory quantity "x"`},
	}
	key := podKey
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseAnnotation(key, tc.value)
			if tc.wantErr != "" {
				if !errors.Is(err, ErrAnnotation) {
					t.Fatalf("error %v is not ErrAnnotation", err)
				}
				msg := err.Error()
				for _, w := range []string{key, tc.value, tc.wantErr} {
					if !strings.Contains(msg, w) {
						t.Errorf("error %q does not name %q", msg, w)
					}
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !eqAmount(got.CPU, tc.want.CPU) || !eqAmount(got.Memory, tc.want.Memory) {
				t.Errorf("got cpu=%v memory=%v, want cpu=%v memory=%v", got.CPU, got.Memory, tc.want.CPU, tc.want.Memory)
			}
		})
	}
}

func eqAmount(a, b *Amount) bool {
	if a == nil || b == nil {
		return a == b
	}
	return *a == *b
}

// podKey and containerKey are the registry's keys as a user writes them.
var podKey = annotations.PodResources.Name

func containerKey(name string) string {
	return annotations.ContainerResources.Name + "/container." + name
}
