package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/cgdelegate/cgdelegate/internal/advert"
	"github.com/cgdelegate/cgdelegate/internal/config"
	"github.com/cgdelegate/cgdelegate/internal/logging"
)

const nodeLabelUsage = `usage: cgdelegate node-label withdraw [flags]

withdraw removes the label ` + advert.FeatureLabel + `
and the annotation ` + advert.FailClosedAnnotation + ` from every node
that carries either, through the Kubernetes API as the pod's service
account (the chart's pre-delete Job at helm uninstall runs it as
cgdelegate-uninstall). It lists the nodes (metadata only), sends each that
carries either a merge patch that removes both, and logs each node's
outcome. Exits 0 when every such node lost them, 1 when the list or any removal failed (each
failure logged with the node, the HTTP status and the API's message), 2 for
a command line that can not run.

flags:
`

// defaultWithdrawTimeout bounds the whole withdrawal by default.
const defaultWithdrawTimeout = time.Minute

// withdrawFlags is the node-label withdraw command line.
type withdrawFlags struct {
	timeout time.Duration
	saDir   string
	level   slog.Level
	format  logging.Format
}

// parseWithdrawFlags parses `node-label withdraw`'s command line (args
// after "node-label"). Every error has been printed to stderr;
// flag.ErrHelp means -h.
func parseWithdrawFlags(args []string, stderr io.Writer) (withdrawFlags, error) {
	const prog = "cgdelegate node-label"
	fail := func(err error) (withdrawFlags, error) {
		logging.ErrorLine(stderr, prog, fmt.Errorf("%w (see cgdelegate node-label -h)", err))
		return withdrawFlags{}, err
	}
	fs := newFlagSet(prog+" withdraw", nodeLabelUsage, stderr)
	f := withdrawFlags{}
	var lf logFlags
	fs.DurationVar(&f.timeout, "timeout", defaultWithdrawTimeout, "give up after this long (list and removals together), e.g. 50s or 2m")
	fs.StringVar(&f.saDir, "service-account-dir", config.Default().ServiceAccountDir, "directory of the pod's service-account token and ca.crt")
	lf.register(fs)
	switch {
	case len(args) == 0:
		return fail(errors.New("want an action: cgdelegate node-label withdraw [flags]"))
	case args[0] == "-h" || args[0] == "-help" || args[0] == "--help":
		fs.Usage()
		return withdrawFlags{}, flag.ErrHelp
	case args[0] != "withdraw":
		return fail(errUnexpected(args[0], "the only action is withdraw"))
	}
	if err := fs.Parse(args[1:]); err != nil {
		return withdrawFlags{}, err
	}
	var errs []error
	var err error
	if f.timeout <= 0 {
		errs = append(errs, fmt.Errorf("-timeout %q: must be more than 0", f.timeout))
	}
	if f.saDir == "" {
		errs = append(errs, errors.New(`-service-account-dir "": want a directory`))
	}
	f.level, f.format, err = lf.finish(fs, "withdraw takes only flags", errs)
	if err != nil {
		return fail(err)
	}
	return f, nil
}

// runNodeLabel is `cgdelegate node-label withdraw`: the label removed from
// every node, within -timeout or until SIGINT or SIGTERM.
func runNodeLabel(args []string, stderr io.Writer, getenv func(string) string) int {
	f, err := parseWithdrawFlags(args, stderr)
	if err != nil {
		return usageExit(err)
	}
	log := logging.New(stderr, f.level, f.format).With("label", advert.FeatureLabel)
	w, err := advert.NewClusterWithdrawer(f.saDir, getenv)
	if err != nil {
		log.Error("cannot withdraw the node label", "error", err)
		return 1
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	ctx, cancel := context.WithTimeout(ctx, f.timeout)
	defer cancel()
	log.Info("withdrawing the node label from every node", "api", w.API(), "timeout", f.timeout)
	results, listErr := w.Withdraw(ctx)
	var failed []string
	for _, r := range results {
		switch {
		case r.Err != nil:
			failed = append(failed, r.Node)
			log.Error("cannot remove the node label", append([]any{"node", r.Node}, advert.ErrorAttrs(r.Err)...)...)
		case r.Gone:
			log.Info("node deleted meanwhile: no label to remove", "node", r.Node)
		default:
			log.Info("node label removed", "node", r.Node)
		}
	}
	if listErr != nil {
		log.Error("cannot list the labelled nodes", advert.ErrorAttrs(listErr)...)
	}
	if len(failed) > 0 {
		log.Error("the node label is still on some nodes", "failed", len(failed), "listed", len(results), "nodes", strings.Join(failed, ","))
	}
	if listErr != nil || len(failed) > 0 {
		return 1
	}
	log.Info("no node carries the label any more", "removed", len(results))
	return 0
}
