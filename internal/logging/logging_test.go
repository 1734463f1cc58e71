package logging

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"

	"github.com/sirupsen/logrus"
)

func TestParseLevel(t *testing.T) {
	tests := []struct {
		in      string
		want    slog.Level
		wantErr bool
	}{
		{in: "debug", want: slog.LevelDebug},
		{in: "info", want: slog.LevelInfo},
		{in: "WARN", want: slog.LevelWarn},
		{in: "error", want: slog.LevelError},
		{in: "loud", wantErr: true},
		{in: "", wantErr: true},
	}
	for _, tc := range tests {
		t.Run(tc.in, func(t *testing.T) {
			got, err := ParseLevel(tc.in)
			if tc.wantErr {
				if err == nil || !strings.Contains(err.Error(), "want debug, info, warn or error") || !strings.Contains(err.Error(), `"`+tc.in+`"`) {
					t.Fatalf("ParseLevel(%q) error = %v, want one naming the value and the choices", tc.in, err)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("ParseLevel(%q) = %v, %v; want %v", tc.in, got, err, tc.want)
			}
		})
	}
}

func TestErrorLine(t *testing.T) {
	var b bytes.Buffer
	ErrorLine(&b, "prog", errors.Join(errors.New("first  problem"), errors.New("second\tproblem")))
	if got, want := b.String(), "prog: first problem; second problem\n"; got != want {
		t.Fatalf("ErrorLine wrote %q, want %q", got, want)
	}
}

// logged runs emit with a logger at level and returns what it wrote.
func logged(t *testing.T, level slog.Level, emit func(l *slog.Logger)) string {
	t.Helper()
	var b bytes.Buffer
	emit(New(&b, level, Text))
	return b.String()
}

func TestNew(t *testing.T) {
	out := logged(t, slog.LevelInfo, func(l *slog.Logger) {
		l.Debug("hidden")
		l.Info("shown", "k", "v")
	})
	if strings.Contains(out, "hidden") || !strings.Contains(out, "level=INFO msg=shown k=v") {
		t.Fatalf("unexpected output:\n%s", out)
	}
}

func TestFormat(t *testing.T) {
	tests := []struct {
		in      string
		want    string
		wantErr bool
	}{
		{in: "text", want: "level=INFO msg=shown k=v"},
		{in: "json", want: `"level":"INFO","msg":"shown","k":"v"}`},
		{in: "JSON", wantErr: true},
		{in: "logfmt", wantErr: true},
		{in: "", wantErr: true},
	}
	for _, tc := range tests {
		t.Run(tc.in, func(t *testing.T) {
			f, err := ParseFormat(tc.in)
			if tc.wantErr {
				if err == nil || !strings.Contains(err.Error(), `"`+tc.in+`": want json or text`) {
					t.Fatalf("ParseFormat(%q) error = %v, want one naming the value and the choices", tc.in, err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var b bytes.Buffer
			New(&b, slog.LevelInfo, f).Info("shown", "k", "v")
			if !strings.Contains(b.String(), tc.want) || strings.Count(b.String(), "\n") != 1 {
				t.Fatalf("%s output %q, want one line with %q", tc.in, b.String(), tc.want)
			}
		})
	}
}

func TestNRI(t *testing.T) {
	ctx := context.Background()
	tests := []struct {
		name  string
		level slog.Level
		emit  func(l *slog.Logger)
		want  []string
		not   []string
	}{
		{
			name:  "every level at debug",
			level: slog.LevelDebug,
			emit: func(l *slog.Logger) {
				n := NRI(l)
				n.Debugf(ctx, "d %d", 1)
				n.Infof(ctx, "i %s", "x")
				n.Warnf(ctx, "w")
				n.Errorf(ctx, "e")
			},
			want: []string{`level=DEBUG msg="d 1"`, `level=INFO msg="i x"`, "level=WARN msg=w", "level=ERROR msg=e"},
		},
		{
			name:  "filtered at warn",
			level: slog.LevelWarn,
			emit: func(l *slog.Logger) {
				n := NRI(l)
				n.Infof(ctx, "quiet")
				n.Warnf(ctx, "loud")
			},
			want: []string{"level=WARN msg=loud"},
			not:  []string{"quiet"},
		},
		{
			name:  "attributes of the logger are kept",
			level: slog.LevelInfo,
			emit:  func(l *slog.Logger) { NRI(l.With("plugin", "cgdelegate")).Infof(ctx, "hello") },
			want:  []string{"msg=hello plugin=cgdelegate"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			out := logged(t, tc.level, tc.emit)
			checkOutput(t, out, tc.want, tc.not)
		})
	}
}

func checkOutput(t *testing.T, out string, want, not []string) {
	t.Helper()
	for _, w := range want {
		if !strings.Contains(out, w) {
			t.Errorf("output lacks %q:\n%s", w, out)
		}
	}
	for _, n := range not {
		if strings.Contains(out, n) {
			t.Errorf("output has %q:\n%s", n, out)
		}
	}
}

// restoreLogrus puts logrus's standard logger back after the test.
func restoreLogrus(t *testing.T) {
	std := logrus.StandardLogger()
	out, level := std.Out, std.GetLevel()
	hooks := std.ReplaceHooks(make(logrus.LevelHooks))
	std.ReplaceHooks(hooks)
	t.Cleanup(func() {
		std.SetOutput(out)
		std.SetLevel(level)
		std.ReplaceHooks(hooks)
	})
}

func TestCaptureLogrus(t *testing.T) {
	tests := []struct {
		name  string
		level slog.Level
		emit  func()
		want  []string
		not   []string
	}{
		{
			name:  "fields become attributes",
			level: slog.LevelInfo,
			emit: func() {
				logrus.WithField("b", 2).WithField("a", "x").WithError(errors.New("boom")).Error("ttrpc failed")
			},
			want: []string{`level=ERROR msg="ttrpc failed" a=x b=2 error=boom`},
		},
		{
			name:  "level follows the handler",
			level: slog.LevelWarn,
			emit: func() {
				logrus.Info("quiet")
				logrus.Warn("loud")
			},
			want: []string{"level=WARN msg=loud"},
			not:  []string{"quiet"},
		},
		{
			name:  "trace is debug",
			level: slog.LevelDebug,
			emit: func() {
				logrus.SetLevel(logrus.TraceLevel)
				logrus.Trace("fine")
			},
			want: []string{"level=DEBUG msg=fine"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			restoreLogrus(t)
			var own bytes.Buffer
			logrus.SetOutput(&own)
			out := logged(t, tc.level, func(l *slog.Logger) {
				CaptureLogrus(l)
				tc.emit()
			})
			checkOutput(t, out, tc.want, tc.not)
			if n := strings.Count(out, "\n"); n != len(tc.want) {
				t.Errorf("%d lines, want %d:\n%s", n, len(tc.want), out)
			}
			if own.Len() != 0 || logrus.StandardLogger().Out == &own {
				t.Errorf("logrus still writes its own format: %q", own.String())
			}
		})
	}
}
