package version

import "runtime/debug"

// linked is set at link time:
//
//	go build -ldflags "-X github.com/cgdelegate/cgdelegate/internal/version.linked=v0.1.0"
var linked string

// String returns the version set at link time, else the main module's
// version from the build info (go install ...@v0.1.0), else "dev".
func String() string { return resolve(linked, debug.ReadBuildInfo) }

func resolve(linked string, buildInfo func() (*debug.BuildInfo, bool)) string {
	if linked != "" {
		return linked
	}
	if bi, ok := buildInfo(); ok && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
		return bi.Main.Version
	}
	return "dev"
}
