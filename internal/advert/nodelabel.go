package advert

// The node label: the same advertisement as the feature file, put on the
// plugin's own Node object through the API, for clusters without NFD.
// FeatureLabel is "true" while the node supports writable cgroups and absent
// otherwise, and removed when the plugin stops. Beside it, once SetFailClosed
// was called, the annotation FailClosedAnnotation says whether the runtime
// enforces required-plugins (status.FailClosedStates), removed with the
// label. Once SetWithReason was called, the annotation ReasonAnnotation says
// why the label is absent (a status.Reason), and is removed while the
// label is "true"; the withdrawal when the plugin stops removes the label
// and the fail-closed annotation and sets it to plugin_stopped. Set never
// blocks: the patches go out from Run, retried with backoff.

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/cgdelegate/cgdelegate/internal/config"
	"github.com/cgdelegate/cgdelegate/internal/status"
)

// Retry and resync timing for the node label.
const (
	labelRetryMin = time.Second
	labelRetryMax = 2 * time.Minute
	// labelResync re-sends the wanted state this often even when nothing
	// changed, so a label removed or a Node recreated behind the plugin's
	// back comes back. An unchanged merge patch writes nothing.
	labelResync = 10 * time.Minute
)

// labelState is a state of the label on the Node.
type labelState int

const (
	stateUnknown labelState = iota
	stateSet
	stateRemoved
)

// value is the label value the state stands for, nil for no label.
func (s labelState) value() *string {
	if s != stateSet {
		return nil
	}
	v := strconv.FormatBool(true) // as the feature file writes it
	return &v
}

func (s labelState) String() string {
	switch s {
	case stateSet:
		return "true"
	case stateRemoved:
		return "absent"
	default:
		return "unknown"
	}
}

// FailClosedAnnotation is the Node annotation beside FeatureLabel: whether
// the node's runtime enforces required-plugins.noderesource.dev, one of
// status.FailClosedStates.
const FailClosedAnnotation = "cgdelegate.io/fail-closed"

// ReasonAnnotation is the Node annotation beside FeatureLabel that says
// why the label is absent: one of status.Reasons, none while it is "true".
const ReasonAnnotation = FeatureLabel + "-reason"

// LabelResult is the outcome of the last request about the node label.
type LabelResult = status.NodeLabel

// NodeLabeler keeps FeatureLabel on the plugin's own Node.
type NodeLabeler struct {
	client *kubeClient
	node   string
	log    *slog.Logger
	// retryMin and retryMax bound the backoff; resync is labelResync.
	retryMin, retryMax, resync time.Duration

	// sem holds one request at a time, so a withdrawal is never overtaken
	// by a patch that was already on its way.
	sem  chan struct{}
	wake chan struct{}

	mu        sync.Mutex
	want      labelState
	applied   labelState
	withdrawn bool
	last      LabelResult
	// note is the FailClosedAnnotation value wanted, "" before
	// SetFailClosed (no annotation is written); noteApplied is the one the
	// API has (valid while applied is not stateUnknown).
	note, noteApplied string
	// reason is the ReasonAnnotation value wanted while the label is
	// absent, reasonOn whether SetWithReason was called (before it no
	// annotation is written); reasonApplied is the value the API has, ""
	// for none (valid while applied is not stateUnknown).
	reason, reasonApplied string
	reasonOn              bool
}

// NewNodeLabeler returns the node labeler that cfg.NodeLabel asks for, or
// nil when there is none: nodeLabel off, or auto outside a pod that can
// reach the API (logged at info, naming what is missing). With nodeLabel
// on, a missing $NODE_NAME, API address, token or CA is an error naming
// each. A malformed $KUBERNETES_SERVICE_PORT or $NODE_NAME is an error in
// both modes. getenv reads the environment (os.Getenv).
func NewNodeLabeler(cfg config.Config, getenv func(string) string, log *slog.Logger) (*NodeLabeler, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if cfg.NodeLabel == config.NodeLabelOff {
		return nil, nil
	}
	env := lookInCluster(getenv, cfg.ServiceAccountDir, true)
	if len(env.bad) > 0 {
		return nil, fmt.Errorf("nodeLabel: %q: %s", cfg.NodeLabel, strings.Join(env.bad, "; "))
	}
	if len(env.missing) > 0 {
		why := strings.Join(env.missing, "; ")
		if cfg.NodeLabel == config.NodeLabelOn {
			return nil, fmt.Errorf("nodeLabel: %q needs the Kubernetes API from a pod, but %s", cfg.NodeLabel, why)
		}
		log.Info("no node label: not in a pod that can reach the Kubernetes API (nodeLabel: auto)", "label", FeatureLabel, "missing", why)
		return nil, nil
	}
	c, err := newKubeClient(env)
	if err != nil {
		return nil, fmt.Errorf("nodeLabel: %w", err)
	}
	log.Info("the node advertisement is also a label on the Node", "node", env.node, "label", FeatureLabel, "api", c.base)
	return &NodeLabeler{
		client:   c,
		node:     env.node,
		log:      log.With("node", env.node, "label", FeatureLabel),
		retryMin: labelRetryMin,
		retryMax: labelRetryMax,
		resync:   labelResync,
		sem:      make(chan struct{}, 1),
		wake:     make(chan struct{}, 1),
	}, nil
}

// Node is the Node object's name.
func (l *NodeLabeler) Node() string { return l.node }

// Set asks for the label to say supported: set to "true", or removed. It
// returns at once; Run sends the patch. After Withdraw it does nothing.
func (l *NodeLabeler) Set(supported bool) {
	l.mu.Lock()
	l.set(supported, l.reason, l.reasonOn)
}

// SetWithReason is Set that also asks for ReasonAnnotation to say reason
// while the label is absent, in the same patch; from the first call on,
// every patch carries the annotation (its value, or its removal while the
// label is "true" or reason is empty).
func (l *NodeLabeler) SetWithReason(supported bool, reason status.Reason) {
	l.mu.Lock()
	l.set(supported, string(reason), true)
}

// set records the wanted state and wakes Run if it changed. The caller
// holds l.mu, which set releases.
func (l *NodeLabeler) set(supported bool, reason string, reasonOn bool) {
	want := stateRemoved
	if supported {
		want = stateSet
	}
	changed := !l.withdrawn && (l.want != want || l.reason != reason || l.reasonOn != reasonOn)
	if changed {
		l.want, l.reason, l.reasonOn = want, reason, reasonOn
	}
	l.mu.Unlock()
	if changed {
		l.poke()
	}
}

// SetFailClosed asks for FailClosedAnnotation to say state (one of
// status.FailClosedStates); from the first call on, every patch carries
// it, and the withdrawal removes it. It returns at once, as Set does.
func (l *NodeLabeler) SetFailClosed(state string) {
	l.mu.Lock()
	changed := !l.withdrawn && state != "" && l.note != state
	if changed {
		l.note = state
	}
	l.mu.Unlock()
	if changed {
		l.poke()
	}
}

// reasonFor is the ReasonAnnotation value a patch for want carries ("" to
// remove it), and whether it carries the annotation at all. The caller
// holds l.mu.
func (l *NodeLabeler) reasonFor(want labelState, withdrawn bool) (string, bool) {
	switch {
	case withdrawn:
		return string(status.ReasonPluginStopped), true
	case !l.reasonOn || want == stateSet:
		return "", l.reasonOn
	}
	return l.reason, true
}

// poke wakes Run without blocking.
func (l *NodeLabeler) poke() {
	select {
	case l.wake <- struct{}{}:
	default:
	}
}

// Result is the outcome of the last request.
func (l *NodeLabeler) Result() LabelResult {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.last
}

// Run sends the wanted state whenever it changes, retrying a failure with
// backoff, and re-sends it every resync period, until ctx is done.
func (l *NodeLabeler) Run(ctx context.Context) error {
	resync := time.NewTicker(l.resync)
	defer resync.Stop()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-l.wake:
		case <-resync.C:
			l.mu.Lock()
			l.applied = stateUnknown
			l.mu.Unlock()
		}
		l.converge(ctx)
	}
}

// pending is the state to send, if the API does not have it yet.
func (l *NodeLabeler) pending() (labelState, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	reason, _ := l.reasonFor(l.want, false)
	return l.want, !l.withdrawn && l.want != stateUnknown &&
		(l.want != l.applied || l.note != l.noteApplied || reason != l.reasonApplied)
}

// converge sends the wanted state until the API has it, backing off after
// each failure; a new wanted state is sent at once. It returns when ctx is
// done.
func (l *NodeLabeler) converge(ctx context.Context) {
	delay := l.retryMin
	for attempt := 1; ; attempt++ {
		want, ok := l.pending()
		if !ok {
			return
		}
		err := l.apply(ctx, want)
		if err == nil {
			delay, attempt = l.retryMin, 0
			continue
		}
		if ctx.Err() != nil {
			return
		}
		l.log.Warn("cannot update the node label; retrying", append(ErrorAttrs(err),
			"want", want.String(), "attempt", attempt, "retryIn", delay)...)
		select {
		case <-ctx.Done():
			return
		case <-l.wake:
		case <-time.After(delay):
		}
		delay = min(2*delay, l.retryMax)
	}
}

// apply sends one patch for want and records the outcome.
func (l *NodeLabeler) apply(ctx context.Context, want labelState) error {
	if err := l.acquire(ctx); err != nil {
		return err
	}
	defer l.release()
	l.mu.Lock()
	withdrawn := l.withdrawn
	l.mu.Unlock()
	if withdrawn {
		return nil
	}
	err := l.send(ctx, want)
	if err == nil {
		if want == stateSet {
			l.log.Info("node label set", "value", *want.value())
		} else {
			l.log.Info("node label removed: the node does not support writable cgroups")
		}
	}
	return err
}

// Withdraw removes the label and the fail-closed annotation, sets
// ReasonAnnotation to plugin_stopped, and stops every later Set, bounded
// by ctx. Call it when the plugin stops.
func (l *NodeLabeler) Withdraw(ctx context.Context) error {
	l.mu.Lock()
	l.withdrawn = true
	l.mu.Unlock()
	if err := l.acquire(ctx); err != nil {
		return fmt.Errorf("remove label %s from node %q: %w", FeatureLabel, l.node, err)
	}
	defer l.release()
	l.mu.Lock()
	gone := l.applied == stateRemoved && l.note == "" && l.reasonApplied == string(status.ReasonPluginStopped)
	l.mu.Unlock()
	if gone {
		return nil
	}
	if err := l.send(ctx, stateRemoved); err != nil {
		return fmt.Errorf("remove label %s from node %q: %w", FeatureLabel, l.node, err)
	}
	l.log.Info("node label withdrawn")
	return nil
}

// send patches the Node to want and records the result. The caller holds
// the semaphore.
// With the fail-closed annotation in use (SetFailClosed), the patch sets
// it to the wanted value with the label, or removes it with the label at
// the withdrawal; with the reason in use (SetWithReason), and always at the
// withdrawal, it sets or removes ReasonAnnotation (reasonFor). One patch
// carries them all.
func (l *NodeLabeler) send(ctx context.Context, want labelState) error {
	ctx, cancel := context.WithTimeout(ctx, requestTimeout)
	defer cancel()
	l.mu.Lock()
	note, withdrawn := l.note, l.withdrawn
	reason, reasonOn := l.reasonFor(want, withdrawn)
	l.mu.Unlock()
	notes := map[string]*string{}
	noteWant, reasonWant := "", ""
	if note != "" {
		var value *string
		if noteWant = "absent"; !withdrawn {
			value, noteWant = &note, note
		}
		notes[FailClosedAnnotation] = value
	}
	if reasonOn {
		var value *string
		if reasonWant = "absent"; reason != "" {
			value, reasonWant = &reason, reason
		}
		notes[ReasonAnnotation] = value
	}
	patch := labelPatch(want.value())
	if len(notes) > 0 {
		patch = nodePatch(want.value(), notes)
	}
	err := l.client.patchNode(ctx, l.node, patch)
	l.mu.Lock()
	defer l.mu.Unlock()
	l.last = LabelResult{Node: l.node, Want: want.String(), FailClosed: noteWant, Reason: reasonWant, Applied: err == nil, At: time.Now().UTC()}
	if err != nil {
		l.last.Error = err.Error()
		l.applied = stateUnknown
		return err
	}
	l.applied, l.reasonApplied = want, reason
	if l.noteApplied = note; withdrawn {
		l.note, l.noteApplied = "", ""
	}
	return nil
}

func (l *NodeLabeler) acquire(ctx context.Context) error {
	select {
	case l.sem <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (l *NodeLabeler) release() { <-l.sem }

// ErrorAttrs are the log attributes of a failed API request: the error
// (with the API's message), and the HTTP status and the API's reason when
// the API answered.
func ErrorAttrs(err error) []any {
	attrs := []any{"error", err}
	if ae, ok := errors.AsType[*APIError](err); ok {
		attrs = append(attrs, "status", ae.Code)
		if ae.Reason != "" {
			attrs = append(attrs, "reason", ae.Reason)
		}
	}
	return attrs
}
