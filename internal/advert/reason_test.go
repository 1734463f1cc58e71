package advert

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/cgdelegate/cgdelegate/internal/host"
	"github.com/cgdelegate/cgdelegate/internal/status"
)

// Each cause the plugin decides is one reason on the Node, in the same
// patch as the label, and in the published status; a supported node
// carries no reason, and the withdrawal when the plugin stops says
// plugin_stopped.
func TestAdvertiserReason(t *testing.T) {
	v1 := host.Status{CgroupRoot: "/sys/fs/cgroup", Mounted: true, FSType: "tmpfs", Version: 1, Unified: "/sys/fs/cgroup/unified"}
	unmounted := host.Status{CgroupRoot: "/sys/fs/cgroup"}
	noNsdelegate := safe
	noNsdelegate.NsDelegate = false
	for _, tc := range []struct {
		name    string
		edit    func(*source)
		want    status.Reason
		problem string
	}{
		{"supported", func(*source) {}, "", ""},
		{"no nsdelegate", func(s *source) { s.st = noNsdelegate }, status.ReasonNoNsdelegate, "lacks nsdelegate"},
		{"cgroup v1 (hybrid)", func(s *source) { s.st = v1 }, status.ReasonCgroupV1, "cgroup v2 (unified) is required"},
		{"nothing mounted", func(s *source) { s.st = unmounted }, status.ReasonCgroupV1, "no cgroup mount"},
		{"mount table unreadable", func(s *source) { s.err = errors.New("open /proc/1/mountinfo: permission denied") }, status.ReasonHostUnreadable, "permission denied"},
		{"no runtime yet", func(s *source) { s.runtime = nil }, status.ReasonNotConfigured, "not been configured by a runtime"},
		{"no nsdelegate and no runtime: the host first", func(s *source) { s.st, s.runtime = noNsdelegate, nil }, status.ReasonNoNsdelegate, "lacks nsdelegate"},
		{"unsafe containers", func(s *source) {
			s.deleg.Unsafe = []status.WritableContainer{{Pod: "ns/p", Container: "c", ID: "abc"}}
		}, status.ReasonUnsafeContainers, "writable"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFakeAPI(t)
			l, _, _ := newLabeler(t, f)
			src := newSource(t)
			tc.edit(src)
			a := New(src, nil, WithNodeLabel(l))
			a.Refresh()
			l.converge(context.Background())
			pub, err := status.ReadPublished(src.cfg.StatusFile)
			if err != nil {
				t.Fatal(err)
			}
			if pub.Reason != tc.want || pub.Supported != (tc.want == "") {
				t.Errorf("published supported %t reason %q, want reason %q", pub.Supported, pub.Reason, tc.want)
			}
			if tc.problem != "" && !strings.Contains(strings.Join(pub.Problems, "\n"), tc.problem) {
				t.Errorf("problems %q do not mention %q", pub.Problems, tc.problem)
			}
			label, reason := `"true"`, "null"
			if tc.want != "" {
				label, reason = "null", fmt.Sprintf("%q", tc.want)
			}
			want := `{"metadata":{"annotations":{"cgdelegate.io/supports-cgroup-options-reason":` + reason + `},` +
				`"labels":{"cgdelegate.io/supports-cgroup-options":` + label + `}}}`
			if got := f.seen(); len(got) != 1 || got[0].body != want {
				t.Fatalf("patches %+v, want one: %s", got, want)
			}
			if r := l.Result(); r.Reason != map[bool]string{true: "absent", false: string(tc.want)}[tc.want == ""] {
				t.Errorf("result %+v", r)
			}
			if err := a.Withdraw(context.Background()); err != nil {
				t.Fatal(err)
			}
			if got := f.seen(); len(got) != 2 || got[1].body != stopBody {
				t.Fatalf("patches %+v, want the withdrawal second: %s", got, stopBody)
			}
			if r := l.Result(); r.Reason != string(status.ReasonPluginStopped) || r.Want != "absent" {
				t.Errorf("result after the withdrawal %+v", r)
			}
		})
	}
}

// A change of reason alone (the label stays absent) is one patch; an
// unchanged one sends nothing; the label coming back removes the reason
// in the same patch.
func TestNodeLabelReasonChanges(t *testing.T) {
	f := newFakeAPI(t)
	l, _, _ := newLabeler(t, f)
	ctx := context.Background()
	for _, s := range []struct {
		supported bool
		reason    status.Reason
	}{
		{false, status.ReasonNotConfigured},
		{false, status.ReasonNotConfigured},
		{false, status.ReasonNoNsdelegate},
		{true, ""},
		{true, ""},
	} {
		l.SetWithReason(s.supported, s.reason)
		l.converge(ctx)
	}
	body := func(label, reason string) string {
		return `{"metadata":{"annotations":{"cgdelegate.io/supports-cgroup-options-reason":` + reason + `},` +
			`"labels":{"cgdelegate.io/supports-cgroup-options":` + label + `}}}`
	}
	want := []string{body("null", `"not_configured"`), body("null", `"no_nsdelegate"`), body(`"true"`, "null")}
	var got []string
	for _, r := range f.seen() {
		got = append(got, r.body)
	}
	if !slices.Equal(got, want) {
		t.Fatalf("bodies\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	// A second withdrawal has nothing left to send.
	for range 2 {
		if err := l.Withdraw(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if got := f.seen(); len(got) != 4 || got[3].body != stopBody {
		t.Fatalf("requests %+v, want one withdrawal after the three", got)
	}
}

// Every reason is one the policy allows, and the docs list them: the set
// is stable and short.
func TestReasonsAreLabelSafe(t *testing.T) {
	for _, r := range status.Reasons {
		if r == "" || len(r) > 63 || strings.Trim(string(r), "abcdefghijklmnopqrstuvwxyz0123456789_") != "" {
			t.Errorf("reason %q: want a short word of [a-z0-9_]", r)
		}
	}
}
