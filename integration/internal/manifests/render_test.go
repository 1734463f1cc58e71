package manifests_test

import (
	"errors"
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/cgdelegate/cgdelegate/integration/internal/manifests"
)

func TestSplit(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want map[string]string
		err  string
	}{
		{
			name: "documents by template, in order, joined",
			in: "---\n# Source: cgdelegate/templates/a.yaml\n# comment\nkind: A\n\n" +
				"---\n# Source: cgdelegate/templates/b.yaml\nkind: B\n" +
				"---\n# Source: cgdelegate/templates/a.yaml\nkind: A2\n",
			want: map[string]string{"a.yaml": "# comment\nkind: A\n---\nkind: A2\n", "b.yaml": "kind: B\n"},
		},
		{name: "no Source line", in: "---\nkind: A\n", err: `starts with "kind: A"`},
		{name: "not a template", in: "---\n# Source: cgdelegate/values.yaml\nkind: A\n", err: `source "cgdelegate/values.yaml" is not a chart template`},
		{name: "nothing", in: "\n", err: "no documents"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := manifests.Split([]byte(tc.in))
			if tc.err != "" {
				if !errors.Is(err, manifests.ErrRender) || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("error %v, want ErrRender naming %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(slices.Sorted(maps.Keys(got)), slices.Sorted(maps.Keys(tc.want))) {
				t.Fatalf("files %v, want %v", slices.Sorted(maps.Keys(got)), slices.Sorted(maps.Keys(tc.want)))
			}
			for name, want := range tc.want {
				if string(got[name]) != want {
					t.Errorf("%s: %q, want %q", name, got[name], want)
				}
			}
		})
	}
}
