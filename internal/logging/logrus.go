package logging

import (
	"context"
	"io"
	"log/slog"
	"maps"
	"slices"

	"github.com/sirupsen/logrus"
)

// CaptureLogrus sends every entry of logrus's standard logger to l's
// handler instead of logrus's own output, at l's level. ttrpc (through
// containerd/log) and NRI's default logger write there. It changes
// process-wide state; a second call replaces the first.
func CaptureLogrus(l *slog.Logger) {
	std := logrus.StandardLogger()
	std.SetOutput(io.Discard)
	std.SetLevel(logrusLevel(l.Handler()))
	hooks := make(logrus.LevelHooks)
	hooks.Add(logrusHook{l.Handler()})
	std.ReplaceHooks(hooks)
}

// levels pairs slog's levels with logrus's, most verbose first.
var levels = []struct {
	slog   slog.Level
	logrus logrus.Level
}{
	{slog.LevelDebug, logrus.DebugLevel},
	{slog.LevelInfo, logrus.InfoLevel},
	{slog.LevelWarn, logrus.WarnLevel},
	{slog.LevelError, logrus.ErrorLevel},
}

// logrusLevel is the most verbose logrus level that h lets through, so
// logrus does not format entries the handler would drop.
func logrusLevel(h slog.Handler) logrus.Level {
	for _, lv := range levels {
		if h.Enabled(context.Background(), lv.slog) {
			return lv.logrus
		}
	}
	return logrus.ErrorLevel
}

// slogLevel maps a logrus level onto slog's: trace is debug, fatal and
// panic are error.
func slogLevel(l logrus.Level) slog.Level {
	for _, lv := range levels {
		if l >= lv.logrus {
			return lv.slog
		}
	}
	return slog.LevelError
}

type logrusHook struct{ h slog.Handler }

func (logrusHook) Levels() []logrus.Level { return logrus.AllLevels }

func (k logrusHook) Fire(e *logrus.Entry) error {
	ctx := e.Context
	if ctx == nil {
		ctx = context.Background()
	}
	r := slog.NewRecord(e.Time, slogLevel(e.Level), e.Message, 0)
	for _, key := range slices.Sorted(maps.Keys(e.Data)) {
		r.AddAttrs(slog.Any(key, e.Data[key]))
	}
	return k.h.Handle(ctx, r)
}
