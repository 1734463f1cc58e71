package quirks

import "testing"

func TestFor(t *testing.T) {
	tests := []struct {
		name       string
		want       Kind
		copiesAnns bool
	}{
		{"containerd", Containerd, false},
		{"Containerd ", Containerd, false},
		{"cri-o", CRIO, true},
		{"CRI-O", CRIO, true},
		{"crio", CRIO, true},
		{"", Unknown, false},
		{"podman", Unknown, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			q := For(tc.name)
			if q.Kind != tc.want || q.CopiesPodAnnotations != tc.copiesAnns || q.ValidatorConfig == "" {
				t.Fatalf("For(%q) = %+v, want kind %s, copies annotations %v, a validator config", tc.name, q, tc.want, tc.copiesAnns)
			}
		})
	}
}
