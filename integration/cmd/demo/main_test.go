package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
)

func TestDemoTellsTheStory(t *testing.T) {
	var out bytes.Buffer
	if err := run(context.Background(), &out); err != nil {
		t.Fatalf("demo failed: %v\n%s", err, out.String())
	}
	for _, want := range []string{
		"cgdelegate.io/supports-cgroup-options=true",
		"builder: created WRITABLE: /sys/fs/cgroup is cgroup2 (nosuid,noexec,nodev,relatime,rw)",
		"sidecar: created unchanged: /sys/fs/cgroup stays cgroup (nosuid,noexec,nodev,relatime,ro)",
		`broken: REFUSED`,
		`container.broken="yes-please"`,
		"cgroup.max.descendants=250 cgroup.max.depth=50",
		"builder (restarted): REFUSED",
		"lacks nsdelegate",
		"cgdelegate.io/supports-cgroup-options=false",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("demo output lacks %q\n%s", want, out.String())
		}
	}
}
