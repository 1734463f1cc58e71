package nri

import (
	"context"
	"fmt"
	"log/slog"
	"testing"

	"github.com/containerd/nri/pkg/api"
)

// BenchmarkCreateContainerFleet is the fleet cost in process: the
// plugin's cost of one node-shared container's CreateContainer and
// RemoveContainer beside n others in pods of five, as the VM bench's fleet
// (no runtime: the updates go nowhere), on the dual-socket topology.
// Compare the sizes within one run.
func BenchmarkCreateContainerFleet(b *testing.B) {
	for _, n := range []int{0, 100, 250} {
		b.Run(fmt.Sprintf("n=%d", n), func(b *testing.B) {
			p, err := New(pinConfig(b), slog.New(slog.DiscardHandler), WithUpdateHold(0))
			if err != nil {
				b.Fatal(err)
			}
			ctx := context.Background()
			var pod *api.PodSandbox
			ctr := func(i int) *api.Container {
				id := fmt.Sprintf("c%d", i)
				return &api.Container{Id: id, PodSandboxId: pod.Id, Name: id, Linux: &api.LinuxContainer{CgroupsPath: "/kubepods/besteffort/pod" + pod.Id + "/" + id}}
			}
			for i := range n + 1 {
				if i%5 == 0 {
					pod = &api.PodSandbox{Id: fmt.Sprintf("p%d", i/5), Name: fmt.Sprintf("fleet-%d", i/5), Namespace: "default"}
					if err := p.RunPodSandbox(ctx, pod); err != nil {
						b.Fatal(err)
					}
				}
				if i < n {
					if _, _, err := p.CreateContainer(ctx, pod, ctr(i)); err != nil {
						b.Fatal(err)
					}
				}
			}
			last := ctr(n)
			b.ResetTimer()
			for range b.N {
				if _, _, err := p.CreateContainer(ctx, pod, last); err != nil {
					b.Fatal(err)
				}
				if err := p.RemoveContainer(ctx, pod, last); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
