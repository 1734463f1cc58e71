package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/cgdelegate/cgdelegate/internal/advert"
	"github.com/cgdelegate/cgdelegate/internal/config"
	"github.com/cgdelegate/cgdelegate/internal/logging"
)

const nodesUsage = `usage: cgdelegate nodes [flags]

Prints every node of the cluster, one row each, as the Kubernetes API
sees it:

  NODE         the node's name
  SUPPORTS     the label ` + advert.FeatureLabel + `: true, false
               (NFD's feature file) or absent
  REASON       the annotation ` + advert.ReasonAnnotation + `:
               why the label is absent (no_nsdelegate, cgroup_v1, not_configured,
               plugin_stopped, ...); - when the node has none
  FAIL-CLOSED  the annotation ` + advert.FailClosedAnnotation + `: enforced, off or unknown
  VERSION      the image tag of the cgdelegate pod on the node; - when none runs there

It finds the API as kubectl does: -kubeconfig, else the files of
$KUBECONFIG, else ~/.kube/config, else the pod's service account (run in
a pod); the kubeconfig's user needs a token or a client certificate
(credential plugins are refused; kubectl get nodes does the same job
there, docs/troubleshooting.md). It needs list on nodes, and on pods for
the versions (without it the versions are empty and a warning says why).
Exits 0 when the nodes were listed, 1 when they could not be, 2 for a
command line that can not run.

flags:
`

// defaultNodesTimeout bounds the whole command by default.
const defaultNodesTimeout = 30 * time.Second

// nodesFlags is the nodes command line.
type nodesFlags struct {
	kubeconfig, context, output, saDir string
	timeout                            time.Duration
}

// parseNodesFlags parses `cgdelegate nodes`'s command line (args after
// "nodes"). Every error has been printed to stderr; flag.ErrHelp means -h.
func parseNodesFlags(args []string, stderr io.Writer) (nodesFlags, error) {
	const prog = "cgdelegate nodes"
	fs := newFlagSet(prog, nodesUsage, stderr)
	var f nodesFlags
	fs.StringVar(&f.kubeconfig, "kubeconfig", "", "kubeconfig file (default: $KUBECONFIG, else ~/.kube/config, else the pod's service account)")
	fs.StringVar(&f.context, "context", "", "the kubeconfig's context to use (default: its current-context)")
	fs.StringVar(&f.output, "o", advert.FleetTable, "output format: "+strings.Join(advert.FleetFormats, " or "))
	fs.DurationVar(&f.timeout, "timeout", defaultNodesTimeout, "give up after this long, e.g. 20s or 1m")
	fs.StringVar(&f.saDir, "service-account-dir", config.Default().ServiceAccountDir, "directory of the pod's service-account token and ca.crt (without a kubeconfig)")
	if err := fs.Parse(args); err != nil {
		return nodesFlags{}, err
	}
	var errs []error
	if !advert.ValidFleetFormat(f.output) {
		errs = append(errs, fmt.Errorf("-o %q: want one of %s", f.output, strings.Join(advert.FleetFormats, ", ")))
	}
	if f.timeout <= 0 {
		errs = append(errs, fmt.Errorf("-timeout %q: must be more than 0", f.timeout))
	}
	if f.saDir == "" {
		errs = append(errs, errors.New(`-service-account-dir "": want a directory`))
	}
	if fs.NArg() > 0 {
		errs = append(errs, errUnexpected(fs.Arg(0), "nodes takes only flags"))
	}
	if err := errors.Join(errs...); err != nil {
		logging.ErrorLine(stderr, prog, fmt.Errorf("%w (see cgdelegate nodes -h)", err))
		return nodesFlags{}, err
	}
	return f, nil
}

// runNodes is `cgdelegate nodes`: the fleet's table (or JSON) on stdout,
// warnings and errors on stderr.
func runNodes(args []string, stdout, stderr io.Writer, getenv func(string) string) int {
	f, err := parseNodesFlags(args, stderr)
	if err != nil {
		return usageExit(err)
	}
	const prog = "cgdelegate nodes"
	r, err := advert.NewFleetReader(advert.ClientSource{Kubeconfig: f.kubeconfig, Context: f.context, SADir: f.saDir, Getenv: getenv})
	if err != nil {
		logging.ErrorLine(stderr, prog, err)
		return 1
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	ctx, cancel := context.WithTimeout(ctx, f.timeout)
	defer cancel()
	fleet, err := r.Read(ctx)
	if err != nil {
		logging.ErrorLine(stderr, prog, fmt.Errorf("%s (%s): %w", r.API(), r.From(), err))
		return 1
	}
	if err := advert.WriteFleet(stdout, fleet, f.output); err != nil {
		logging.ErrorLine(stderr, prog, err)
		return 1
	}
	for _, w := range fleet.Warnings {
		logging.ErrorLine(stderr, prog, errors.New("warning: "+w))
	}
	return 0
}
