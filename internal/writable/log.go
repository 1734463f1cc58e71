package writable

import (
	"context"
	"log/slog"

	"github.com/containerd/nri/pkg/api"

	"github.com/cgdelegate/cgdelegate/internal/logging"
)

// Log says what the decision did for container ctr of pod, at the level
// it deserves, on an event logger built from base (logging.Event) only when
// there is something to say.
func (p *Plan) Log(base *slog.Logger, pod *api.PodSandbox, ctr *api.Container) {
	l := func() *slog.Logger { return logging.Event(base, pod, ctr) }
	switch {
	case p.Warning != nil:
		l().Warn("runtime-writable cgroups would be refused (unsafe host or opt-in policy); allowed because guard is warn", "error", p.Warning)
	case p.Outcome == Privileged && p.Request.Mode == ModeWritable:
		l().Info("privileged container already has read-write cgroups; left alone", "annotation", p.Request.Source)
	case p.Outcome == ReadOnly:
		l().Info("runtime made cgroups writable; made read-only as annotated", "annotation", p.Request.Source)
	case p.Delegates() && base.Enabled(context.Background(), slog.LevelInfo):
		l().Info("cgroups made writable", "reason", p.Reason(), "podCgroup", p.PodCgroup,
			"bounds", p.Bounds.String(), "addedCgroupNS", p.Spec.AddCgroupNS)
	}
}
