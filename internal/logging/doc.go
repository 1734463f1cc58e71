// Package logging builds the one log format of cgdelegate's binaries: slog
// lines on stderr, text or JSON. It also routes the libraries' own logging into it:
// the NRI stub's (a Logger for stub.WithLogger) and logrus's standard
// logger (used by ttrpc through containerd/log), so an operator reads one
// format, one level.
//
// Use it from a main package only: CaptureLogrus changes process-wide
// state. Packages below main take a *slog.Logger and never build one.
//
// ErrorLine is for a command that fails before, or instead of, logging:
// the OCI hook's single stderr line, a usage error.
package logging
