package config

import "testing"

func TestRuntimeOf(t *testing.T) {
	tests := []struct {
		name string
		want Runtime
	}{
		{"containerd", RuntimeContainerd},
		{"Containerd ", RuntimeContainerd},
		{"cri-o", RuntimeCRIO},
		{"CRI-O", RuntimeCRIO},
		{"crio", RuntimeCRIO},
		{"", RuntimeUnknown},
		{"podman", RuntimeUnknown},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := RuntimeOf(tc.name); got != tc.want {
				t.Fatalf("RuntimeOf(%q) = %s, want %s", tc.name, got, tc.want)
			}
		})
	}
}
