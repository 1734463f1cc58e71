// Command cgdelegate is the cgdelegate NRI plugin.
//
//	cgdelegate [flags]          run as an NRI plugin (external, or started by the runtime)
//	cgdelegate status [flags]   print the node's readiness as JSON; exit 1 when unsupported
//	cgdelegate status -ready    the pod's readiness probe: exit 0 once configured by the runtime
//	cgdelegate node-label withdraw [flags]
//	                            remove the node label from every node; exit 1 if any failed
//	cgdelegate nodes [flags]    print every node's label, reason, fail-closed and plugin version
//	cgdelegate install-profiles [flags]
//	                            install the engine pods' seccomp and AppArmor profiles on the node
//	cgdelegate install-nri-config [flags]
//	                            install the runtime's NRI drop-in (fail closed per pod) and restart it
//	cgdelegate -version         print the version
//
// Run with no arguments it connects to /var/run/nri/nri.sock with the real
// host paths. Started by the runtime from /opt/nri/plugins it picks up the
// socket, name and index the runtime passes in its environment, and its
// config from the runtime's Configure call.
//
// SIGHUP re-reads the -config file: a valid one replaces the config in
// force (the runtime's Configure blob still merged over it), an invalid one
// is logged and the old one stays. On SIGINT, SIGTERM or any other exit the
// NFD feature file is removed, and the node label with it (within 5 s), so
// the node no longer advertises writable cgroups.
//
// node-label withdraw removes the label from every node that carries it,
// through the API as the pod's service account: the chart's pre-delete Job
// runs it at helm uninstall, before the plugin's RBAC is deleted.
//
// nodes prints the fleet from the API (a kubeconfig, or the pod's service
// account): each node's label, the reason annotation beside it, the
// fail-closed annotation and the plugin pod's version, as a table or JSON.
//
// install-profiles writes the seccomp profile cgdelegate/engines.json and
// writes and loads the AppArmor profile cgdelegate-engines on the node
// (docs/engine-profiles.md): the chart's install-profiles init container
// runs it.
//
// install-nri-config writes the runtime's NRI drop-in
// (contrib/containerd/cgdelegate.toml, contrib/crio/10-cgdelegate.conf) on
// the node and restarts the runtime through systemd when it runs without
// it: the chart's install-nri-config init container runs it.
//
// Exit codes: 0 on a clean stop, -h or -version; 1 when the plugin can not
// start or fails; 2 for a command line that can not run.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime"
	"syscall"

	"github.com/cgdelegate/cgdelegate/internal/config"
	"github.com/cgdelegate/cgdelegate/internal/logging"
	"github.com/cgdelegate/cgdelegate/internal/lsmprofile"
	"github.com/cgdelegate/cgdelegate/internal/version"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// run is the whole command: flags, config, the daemon built (build), the
// signals, and the daemon run until SIGINT or SIGTERM.
func run(args []string, stdout, stderr io.Writer) int {
	if len(args) > 0 {
		switch args[0] {
		case "status":
			return runStatus(args[1:], stdout, stderr)
		case "node-label":
			return runNodeLabel(args[1:], stderr, os.Getenv)
		case "nodes":
			return runNodes(args[1:], stdout, stderr, os.Getenv)
		case "install-profiles":
			return runInstallProfiles(args[1:], stderr, runtime.GOARCH, lsmprofile.Exec)
		case "install-nri-config":
			return runInstallNRIConfig(args[1:], stderr, connectSystemd)
		}
	}
	f, err := parseFlags(args, stderr)
	if err != nil {
		return usageExit(err)
	}
	if f.version {
		fmt.Fprintln(stdout, "cgdelegate", version.String())
		return 0
	}
	log := logging.New(stderr, f.level, f.format)
	logging.CaptureLogrus(log)
	cfg, err := loadConfig(f.config)
	if err != nil {
		log.Error("bad config", "error", err)
		return 1
	}
	d, err := build(cfg, f, log)
	if err != nil {
		if se, ok := errors.AsType[*startError](err); ok {
			log.Error(se.msg, "error", se.err)
		} else {
			log.Error("cannot start", "error", err)
		}
		return 1
	}

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	if err := d.run(ctx, hup); err != nil {
		log.Error("plugin exited", "error", err)
		return 1
	}
	return 0
}

func loadConfig(path string) (config.Config, error) {
	if path == "" {
		return config.Default(), nil
	}
	return config.Load(path)
}
