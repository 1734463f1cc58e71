package logging

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"time"
)

// ParseLevel reads a level name: debug, info, warn or error (slog's names,
// any case, with an optional +N or -N offset).
func ParseLevel(s string) (slog.Level, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(s)); err != nil {
		return 0, fmt.Errorf("want debug, info, warn or error: %w", err)
	}
	return l, nil
}

// Format is how log records are written.
type Format int

const (
	// Text is slog's key=value lines, the default.
	Text Format = iota
	// JSON is one JSON object per line.
	JSON
)

func (f Format) String() string {
	if f == JSON {
		return "json"
	}
	return "text"
}

// ParseFormat reads a format name: json or text.
func ParseFormat(s string) (Format, error) {
	switch s {
	case "text":
		return Text, nil
	case "json":
		return JSON, nil
	}
	return Text, fmt.Errorf("%q: want json or text", s)
}

// New returns the logger the binaries write with: slog lines on w, in
// format, at level and above.
func New(w io.Writer, level slog.Level, format Format) *slog.Logger {
	opts := &slog.HandlerOptions{Level: level}
	if format == JSON {
		return slog.New(slog.NewJSONHandler(w, opts))
	}
	return slog.New(slog.NewTextHandler(w, opts))
}

// ErrorLine writes err as one line, "prog: message", to w: the multi-line
// errors that errors.Join builds are joined with "; " and runs of spaces
// collapsed, so a runtime that keeps one line of a hook's stderr keeps it all.
func ErrorLine(w io.Writer, prog string, err error) {
	msg := strings.Join(strings.Fields(strings.ReplaceAll(err.Error(), "\n", "; ")), " ")
	fmt.Fprintln(w, prog+": "+msg)
}

// NRI returns l as the NRI library's Logger (github.com/containerd/nri/pkg/log),
// for stub.WithLogger. The package names none of NRI's types: the hook
// binary imports it, and the NRI API would double its size and its start.
func NRI(l *slog.Logger) NRILogger { return NRILogger{l.Handler()} }

// NRILogger has the methods of the NRI library's Logger.
type NRILogger struct{ h slog.Handler }

func (n NRILogger) Debugf(ctx context.Context, format string, args ...any) {
	n.logf(ctx, slog.LevelDebug, format, args)
}

func (n NRILogger) Infof(ctx context.Context, format string, args ...any) {
	n.logf(ctx, slog.LevelInfo, format, args)
}

func (n NRILogger) Warnf(ctx context.Context, format string, args ...any) {
	n.logf(ctx, slog.LevelWarn, format, args)
}

func (n NRILogger) Errorf(ctx context.Context, format string, args ...any) {
	n.logf(ctx, slog.LevelError, format, args)
}

func (n NRILogger) logf(ctx context.Context, level slog.Level, format string, args []any) {
	if ctx == nil {
		ctx = context.Background()
	}
	if !n.h.Enabled(ctx, level) {
		return
	}
	_ = n.h.Handle(ctx, slog.NewRecord(time.Now(), level, fmt.Sprintf(format, args...), 0))
}

// Pod and Container are what Event reads of an NRI pod sandbox and
// container: *api.PodSandbox and *api.Container have these getters, and
// they answer "" on a nil pointer.
type (
	Pod interface {
		GetNamespace() string
		GetName() string
	}
	Container interface{ GetName() string }
)

// Event is a logger for one NRI event, with the pod and container (either
// may be nil) as attributes; log itself is never changed. A container
// without a name (a nil one) adds no attribute.
func Event(log *slog.Logger, pod Pod, ctr Container) *slog.Logger {
	var ns, name string
	if pod != nil {
		ns, name = pod.GetNamespace(), pod.GetName()
	}
	l := log.With("pod", ns+"/"+name)
	if ctr != nil && ctr.GetName() != "" {
		l = l.With("container", ctr.GetName())
	}
	return l
}
