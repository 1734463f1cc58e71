// Command demo drives the real cgdelegate plugin through NRI's real
// runtime side, in process, on a fake host (a temp mount table and cgroup
// tree), and tells in plain words what happened to a scripted pod: one
// writable container, one default container, one refused container.
//
// `make demo-inproc` runs it: the quick demo, in seconds and without a VM.
// `make demo` (integration/vm TestDemo) shows the real thing, containerd
// and runc in a VM; `make integration` runs the whole suite there.
package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"

	"github.com/containerd/nri/pkg/api"

	"github.com/cgdelegate/cgdelegate/integration/internal/inproc"
	"github.com/cgdelegate/cgdelegate/internal/advert"
	"github.com/cgdelegate/cgdelegate/internal/annotations"
	"github.com/cgdelegate/cgdelegate/internal/fakehost"
	"github.com/cgdelegate/cgdelegate/internal/nri"
)

func main() {
	if err := run(context.Background(), os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "demo failed:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, out io.Writer) error {
	dir, err := os.MkdirTemp("", "cgdelegate-demo-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	host, err := fakehost.NewInDir(dir)
	if err != nil {
		return err
	}
	const parent = "/kubepods/burstable/pod-demo"
	if err := host.AddPodCgroup(parent); err != nil {
		return err
	}
	p, err := nri.New(host.Config(), slog.New(slog.DiscardHandler))
	if err != nil {
		return err
	}
	adv := advert.New(p, nil)
	p.OnConfigured(adv.Refresh)
	rt, err := inproc.NewRuntime("containerd", "v2.4.2 (in-process NRI runtime side)")
	if err != nil {
		return err
	}
	defer rt.Close()
	s, err := rt.Connect(ctx, p, "cgdelegate", "50")
	if err != nil {
		return err
	}
	defer s.Stop()

	say := func(format string, a ...any) { fmt.Fprintf(out, format+"\n", a...) }
	say("cgdelegate demo: the real plugin, over a real NRI socket, on a fake host")
	say("  host: cgroup2 at %s, mounted with nsdelegate", host.CgroupRoot)
	r := adv.Report()
	say("  node advertises %s (feature file %s)", strings.TrimSpace(readFile(host.FeatureFile)), host.FeatureFile)
	say("  runtime seen in Configure: %s %s", r.Runtime.Name, r.Runtime.Version)
	say("")

	pod := inproc.Pod("builder", "demo", parent, map[string]string{
		annotations.WritableCgroups.Name + "/container.builder": "Writable",
		annotations.WritableCgroups.Name + "/container.broken":  "yes-please",
	})
	if err := rt.RunPod(ctx, pod); err != nil {
		return err
	}
	say("pod %q (cgroup %s):", pod.Name, parent)

	for _, name := range []string{"builder", "sidecar", "broken"} {
		ctr := inproc.Container(pod, name)
		resp, err := rt.CreateContainer(ctx, pod, ctr)
		if err != nil {
			say("  - %s: REFUSED, the container is not created.\n      reason: %s", name, err)
			continue
		}
		describe(say, ctr, resp.GetAdjust())
	}
	say("")
	say("pod cgroup bounds now: cgroup.max.descendants=%s cgroup.max.depth=%s",
		podFile(host, parent, "cgroup.max.descendants"), podFile(host, parent, "cgroup.max.depth"))
	say("  (without them one container could create ~42,000 cgroups and take the node NotReady)")

	say("")
	say("now nsdelegate disappears (someone remounts the host cgroup2 without it)...")
	if err := host.Remount(fakehost.NoNsdelegate); err != nil {
		return err
	}
	ctr := inproc.Container(pod, "builder")
	if _, err := rt.CreateContainer(ctx, pod, ctr); err != nil {
		say("  - builder (restarted): REFUSED, the container is not created.\n      reason: %s", err)
	} else {
		return fmt.Errorf("a writable container was admitted on a host without nsdelegate")
	}
	adv.Refresh()
	say("  node now advertises %s", strings.TrimSpace(readFile(host.FeatureFile)))
	return nil
}

func describe(say func(string, ...any), ctr *api.Container, adj *api.ContainerAdjustment) {
	var mount *api.Mount
	for _, m := range inproc.FinalMounts(ctr, adj) {
		if m.Destination == "/sys/fs/cgroup" {
			mount = m
		}
	}
	if len(adj.GetMounts()) == 0 {
		say("  - %s: created unchanged: /sys/fs/cgroup stays %s (%s)", ctr.Name, mount.Type, strings.Join(mount.Options, ","))
		return
	}
	say("  - %s: created WRITABLE: /sys/fs/cgroup is %s (%s) in a private cgroup namespace", ctr.Name, mount.Type, strings.Join(mount.Options, ","))
	for _, h := range adj.GetHooks().GetCreateRuntime() {
		say("      createRuntime hook re-checks at every start: %s %s", h.Path, strings.Join(h.Args[1:], " "))
	}
}

func podFile(h *fakehost.Host, parent, file string) string {
	v, err := h.ReadPodFile(parent, file)
	if err != nil {
		return "(" + err.Error() + ")"
	}
	return v
}

func readFile(p string) string {
	b, err := os.ReadFile(p)
	if err != nil {
		return "(" + err.Error() + ")"
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	return lines[len(lines)-1]
}
