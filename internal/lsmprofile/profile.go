package lsmprofile

import (
	"bytes"
	_ "embed"
	"fmt"
)

//go:generate go -C gen run . -arch amd64 -o ../engines-amd64.json
//go:generate go -C gen run . -arch arm64 -o ../engines-arm64.json

// The profiles' names as pods name them.
const (
	// AppArmorName is the AppArmor profile's name: a pod's
	// appArmorProfile {type: Localhost, localhostProfile: cgdelegate-engines}.
	AppArmorName = "cgdelegate-engines"
	// SeccompName is the seccomp profile's path relative to the kubelet's
	// seccomp directory (<root-dir>/seccomp): a pod's seccompProfile
	// {type: Localhost, localhostProfile: cgdelegate/engines.json}.
	SeccompName = SeccompDir + "/" + SeccompFile
	// SeccompDir is the directory under the kubelet's seccomp directory
	// that holds SeccompFile.
	SeccompDir = "cgdelegate"
	// SeccompFile is the seccomp profile's file name.
	SeccompFile = "engines.json"
)

// abiLine is the AppArmor profile's first line, which parsers older than
// AppArmor 3.0 (no /etc/apparmor.d/abi/3.0) do not know.
const abiLine = "abi <abi/3.0>,\n"

var (
	//go:embed cgdelegate-engines
	appArmorText []byte
	//go:embed engines-amd64.json
	seccompAMD64 []byte
	//go:embed engines-arm64.json
	seccompARM64 []byte
)

// Seccomp returns the seccomp profile for goarch (a GOARCH: amd64 or
// arm64), a flat OCI LinuxSeccomp as JSON.
func Seccomp(goarch string) ([]byte, error) {
	switch goarch {
	case "amd64":
		return bytes.Clone(seccompAMD64), nil
	case "arm64":
		return bytes.Clone(seccompARM64), nil
	}
	return nil, fmt.Errorf("seccomp profile for GOARCH %q: there is one for amd64 and arm64 only", goarch)
}

// AppArmor returns the AppArmor profile's text. hasABI3 says whether the
// node's parser knows policy ABI 3.0 (/etc/apparmor.d/abi/3.0 exists);
// without it the abi line is left out, as containerd does for its own
// profile.
func AppArmor(hasABI3 bool) []byte {
	if hasABI3 {
		return bytes.Clone(appArmorText)
	}
	rest, _ := bytes.CutPrefix(appArmorText, []byte(abiLine))
	return bytes.Clone(bytes.TrimLeft(rest, "\n"))
}
