// Package version says which build of cgdelegate is running, for the
// binaries' --version and their start-up log line.
//
// make build sets it from git describe at link time; a plain go build or
// go install falls back to the main module's version in the build info,
// then to "dev".
package version
