package main

import (
	"fmt"
	"io"
	"time"

	"github.com/cgdelegate/cgdelegate/internal/advert"
	"github.com/cgdelegate/cgdelegate/internal/host"
	"github.com/cgdelegate/cgdelegate/internal/logging"
	"github.com/cgdelegate/cgdelegate/internal/status"
)

const statusUsage = `usage: cgdelegate status [flags]

Prints the node's readiness as JSON: the live host checks merged with what
the running plugin published. A published status whose plugin is not
running, or older than three refresh periods, is stale: the node is then
unsupported. Exits 0 when the node supports writable cgroups, 1 when it does
not, 2 for a command line or config that can not run.

With -ready it is the plugin pod's readiness probe instead: it reads only
the published status (no host check of its own) and exits 0, printing one
line, when a running plugin has been configured by its runtime over NRI and
has checked the host, whether or not the node supports writable cgroups
and whether or not its runtime enforces required-plugins (the line says
both: "fail-closed enforced", or "fail-closed off (why)"); otherwise 1,
printing why.

With -live it is the plugin pod's liveness probe: it reads only the
published status and exits 0 when the plugin that published it is running
and has rewritten it within three refresh periods, whether or not it is
ready (a plugin no runtime has configured yet, or on a host that can not
delegate, is alive and keeps refreshing it); otherwise 1, printing why.

flags:
`

// staleAfter is the age past which a published status is stale: the
// plugin rewrites it at least every advert.StatusRefresh.
const staleAfter = 3 * advert.StatusRefresh

// runStatus prints the live readiness merged with what the running plugin
// published.
func runStatus(args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("cgdelegate status", statusUsage, stderr)
	cfgPath := fs.String("config", "", "YAML config file (the same one the plugin uses)")
	ready := fs.Bool("ready", false, "readiness probe: exit 0 when the running plugin is configured by its runtime and has checked the host")
	live := fs.Bool("live", false, "liveness probe: exit 0 when the running plugin keeps its status fresh, ready or not")
	if err := fs.Parse(args); err != nil {
		return usageExit(err)
	}
	if fs.NArg() > 0 {
		logging.ErrorLine(stderr, "cgdelegate status", errUnexpected(fs.Args()[0], "status takes only flags"))
		return 2
	}
	cfg, err := loadConfig(*cfgPath)
	if err != nil {
		logging.ErrorLine(stderr, "cgdelegate status", err)
		return 2
	}
	if *ready {
		return runReady(cfg.StatusFilePath(), stdout, stderr)
	}
	if *live {
		return runLive(cfg.StatusFilePath(), stdout, stderr)
	}
	checker := host.NewChecker(cfg.MountinfoPath, cfg.CgroupRoot)
	defer checker.Close()
	st, readErr := checker.Check()
	pub, pubErr := status.ReadPublished(cfg.StatusFilePath())
	if pubErr == nil {
		pubErr = status.CheckFresh(pub, time.Now(), staleAfter, status.PIDAlive)
	}
	r := status.Live(status.Evaluate(cfg, st, readErr), pub, pubErr)
	if _, err := stdout.Write(r.Marshal()); err != nil {
		return 2
	}
	if !r.Supported {
		return 1
	}
	return 0
}

// runReady is `cgdelegate status -ready`: the readiness of the plugin
// publishing at path (status.Ready), as one line and an exit code.
func runReady(path string, stdout, stderr io.Writer) int {
	pub, err := status.ReadPublished(path)
	if err == nil {
		err = status.CheckFresh(pub, time.Now(), staleAfter, status.PIDAlive)
	}
	if err := status.Ready(pub, err); err != nil {
		logging.ErrorLine(stderr, "cgdelegate status -ready", err)
		return 1
	}
	fmt.Fprintln(stdout, status.ReadyLine(pub))
	return 0
}

// runLive is `cgdelegate status -live`: whether the plugin publishing at
// path is running and keeps its status fresh (status.CheckFresh), as one
// line and an exit code. It does not ask whether the plugin is ready: a
// liveness probe that failed on an unready plugin would restart one that
// waits for its runtime, or that refuses pods on an unsafe host, for
// nothing.
func runLive(path string, stdout, stderr io.Writer) int {
	pub, err := status.ReadPublished(path)
	if err == nil {
		err = status.CheckFresh(pub, time.Now(), staleAfter, status.PIDAlive)
	}
	if err != nil {
		logging.ErrorLine(stderr, "cgdelegate status -live", err)
		return 1
	}
	fmt.Fprintf(stdout, "live: plugin PID %d, status updated %s\n", pub.PluginPID, pub.UpdatedAt.UTC().Format(time.RFC3339))
	return 0
}
