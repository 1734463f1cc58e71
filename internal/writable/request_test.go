package writable

import (
	"errors"
	"strings"
	"testing"

	"github.com/containerd/nri/pkg/api"

	"github.com/cgdelegate/cgdelegate/internal/annotations"
)

var (
	Key               = annotations.WritableCgroups.Name
	CRIOKey           = annotations.CRIOWritable.Name
	CRIOLegacyKey     = annotations.CRIOWritableLegacy.Name
	KubeRayKey        = annotations.KubeRayWritable.Name
	MaxDescendantsKey = annotations.MaxDescendants
)

func TestResolveRequest(t *testing.T) {
	tests := []struct {
		name       string
		pod        map[string]string
		ctr        map[string]string
		want       CgroupMountMode
		wantSource string
		wantErr    string
	}{
		{name: "nothing", want: ModeUnset},
		{name: "bare true", pod: map[string]string{Key: "true"}, want: ModeWritable, wantSource: Key},
		{name: "bare Writable", pod: map[string]string{Key: "Writable"}, want: ModeWritable, wantSource: Key},
		{name: "pod scope", pod: map[string]string{Key + "/pod": "Writable"}, want: ModeWritable, wantSource: Key + "/pod"},
		{name: "pod false", pod: map[string]string{Key + "/pod": "false"}, want: ModeReadOnly, wantSource: Key + "/pod"},
		{name: "ReadOnly", pod: map[string]string{Key: "ReadOnly"}, want: ModeReadOnly, wantSource: Key},
		{
			name: "container scope wins over pod",
			pod:  map[string]string{Key + "/pod": "true", Key + "/container.app": "ReadOnly"},
			want: ModeReadOnly, wantSource: Key + "/container.app",
		},
		{
			name: "container scope enables one container",
			pod:  map[string]string{Key: "false", Key + "/container.app": "true"},
			want: ModeWritable, wantSource: Key + "/container.app",
		},
		{name: "other container's scope ignored", pod: map[string]string{Key + "/container.other": "true"}, want: ModeUnset},
		{name: "CRI-O key", pod: map[string]string{CRIOKey: "true"}, want: ModeWritable, wantSource: CRIOKey},
		{name: "CRI-O legacy key", pod: map[string]string{CRIOLegacyKey: "true"}, want: ModeWritable, wantSource: CRIOLegacyKey},
		{name: "our key beats CRI-O's", pod: map[string]string{Key: "false", CRIOKey: "true"}, want: ModeReadOnly, wantSource: Key},
		{name: "KubeRay key true", pod: map[string]string{KubeRayKey: "true"}, want: ModeWritable, wantSource: KubeRayKey},
		{name: "KubeRay key false", pod: map[string]string{KubeRayKey: "false"}, want: ModeReadOnly, wantSource: KubeRayKey},
		{name: "KubeRay key on the container", ctr: map[string]string{KubeRayKey: "true"}, want: ModeWritable, wantSource: KubeRayKey},
		{name: "CRI-O's key beats KubeRay's", pod: map[string]string{CRIOKey: "false", KubeRayKey: "true"}, want: ModeReadOnly, wantSource: CRIOKey},
		{name: "our key beats KubeRay's", pod: map[string]string{Key + "/pod": "false", KubeRayKey: "true"}, want: ModeReadOnly, wantSource: Key + "/pod"},
		{name: "bad KubeRay value Writable", pod: map[string]string{KubeRayKey: "Writable"}, wantErr: KubeRayKey + `="Writable": want true or false`},
		{name: "bad KubeRay value yes", pod: map[string]string{KubeRayKey: "yes"}, wantErr: KubeRayKey + `="yes"`},
		{name: "container annotation", ctr: map[string]string{Key: "true"}, want: ModeWritable, wantSource: Key},
		{name: "whitespace tolerated", pod: map[string]string{Key: " true "}, want: ModeWritable, wantSource: Key},
		{name: "bad: yes", pod: map[string]string{Key: "yes"}, wantErr: Key + `="yes"`},
		{name: "bad: TRUE", pod: map[string]string{Key: "TRUE"}, wantErr: Key + `="TRUE"`},
		{name: "bad: rw", pod: map[string]string{Key + "/pod": "rw"}, wantErr: Key + `/pod="rw"`},
		{name: "bad: empty", pod: map[string]string{Key: ""}, wantErr: Key + `=""`},
		{name: "bad: 1", pod: map[string]string{Key + "/container.app": "1"}, wantErr: Key + `/container.app="1"`},
		{name: "bad CRI-O value", pod: map[string]string{CRIOKey: "enabled"}, wantErr: CRIOKey + `="enabled"`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			pod := &api.PodSandbox{Name: "p", Annotations: tc.pod}
			ctr := &api.Container{Name: "app", Annotations: tc.ctr}
			got, err := ResolveRequest(pod, ctr)
			if tc.wantErr != "" {
				if !errors.Is(err, ErrBadAnnotation) || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want ErrBadAnnotation naming %s", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got.Mode != tc.want || got.Source != tc.wantSource {
				t.Fatalf("got %v from %q, want %v from %q", got.Mode, got.Source, tc.want, tc.wantSource)
			}
		})
	}
}

func TestPodBound(t *testing.T) {
	tests := []struct {
		name    string
		value   *string
		want    int
		wantErr bool
	}{
		{"absent: node cap", nil, 250, false},
		{"lower", sp("100"), 100, false},
		{"higher is capped", sp("1000"), 250, false},
		{"zero", sp("0"), 0, true},
		{"negative", sp("-3"), 0, true},
		{"garbage", sp("many"), 0, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			pod := &api.PodSandbox{Annotations: map[string]string{}}
			if tc.value != nil {
				pod.Annotations[MaxDescendantsKey.Name] = *tc.value
			}
			got, err := PodBound(pod, MaxDescendantsKey, 250)
			if tc.wantErr {
				if !errors.Is(err, ErrBadAnnotation) || !strings.Contains(err.Error(), MaxDescendantsKey.Name) {
					t.Fatalf("err = %v, want ErrBadAnnotation naming the key", err)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("got %d, %v; want %d", got, err, tc.want)
			}
		})
	}
}

func TestModeString(t *testing.T) {
	for m, want := range map[CgroupMountMode]string{ModeUnset: "Unset", ModeReadOnly: "ReadOnly", ModeWritable: "Writable"} {
		if m.String() != want {
			t.Errorf("%d.String() = %q, want %q", m, m.String(), want)
		}
	}
}

func sp(s string) *string { return &s }
