// Command nullcni is a CNI plugin for the integration VM that configures
// nothing: it lets containerd give a pod its own network namespace (needed
// for user-namespaced pods, which Kubernetes never runs with host network)
// without a real network. ADD reports an eth0 with an address from the
// documentation range (RFC 5737) that nothing ever uses; DEL, CHECK, STATUS
// and GC succeed. Installed as "loopback" too, which containerd always calls
// for lo.
package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
)

type netConf struct {
	CNIVersion string `json:"cniVersion"`
}

func main() {
	if err := run(os.Getenv("CNI_COMMAND"), os.Stdin, os.Stdout); err != nil {
		_ = json.NewEncoder(os.Stdout).Encode(map[string]any{"code": 999, "msg": err.Error()})
		os.Exit(1)
	}
}

func run(cmd string, in io.Reader, out io.Writer) error {
	switch cmd {
	case "VERSION":
		return json.NewEncoder(out).Encode(map[string]any{
			"cniVersion": "1.0.0", "supportedVersions": []string{"0.4.0", "1.0.0", "1.1.0"},
		})
	case "ADD":
		var conf netConf
		b, err := io.ReadAll(in)
		if err != nil {
			return fmt.Errorf("nullcni: read config: %w", err)
		}
		if err := json.Unmarshal(b, &conf); err != nil {
			return fmt.Errorf("nullcni: config: %w", err)
		}
		ifname := os.Getenv("CNI_IFNAME")
		if ifname == "" {
			ifname = "eth0"
		}
		addr := "192.0.2.10/24"
		if ifname == "lo" {
			addr = "127.0.0.1/8"
		}
		return json.NewEncoder(out).Encode(map[string]any{
			"cniVersion": conf.CNIVersion,
			"interfaces": []map[string]any{{"name": ifname, "sandbox": os.Getenv("CNI_NETNS")}},
			"ips":        []map[string]any{{"address": addr, "interface": 0}},
		})
	case "DEL", "CHECK", "STATUS", "GC":
		return nil
	default:
		return fmt.Errorf("nullcni: unknown CNI_COMMAND %q", cmd)
	}
}
