package delegate_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"

	"github.com/opencontainers/cgroups"

	"github.com/cgdelegate/cgdelegate/delegate"
)

// A worker manager runs each worker in its own cgroup with limits. Here a
// temp dir stands in for /sys/fs/cgroup (cgroups.TestMode); in a container
// use delegate.DefaultOptions().
func Example() {
	root := fakeCgroupRoot()
	defer os.RemoveAll(root)

	r := delegate.New(delegate.Options{CgroupRoot: root, Proc: "/proc", LookupEnv: os.LookupEnv})
	// Move the container's own processes into "init", enable controllers.
	if err := r.Prepare(delegate.DefaultLeaf, []string{"cpu", "memory"}); err != nil {
		fmt.Println(err)
		return
	}
	cpu, _ := delegate.ParseCPU("500m")
	mem, _ := delegate.ParseMemory("256Mi")
	g, err := r.Create("workers/w1", delegate.Limits{CPUMilli: cpu, MemoryBytes: mem})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer func() { _ = g.Remove() }()

	cmd := exec.Command("sh", "-c", "exit 0")
	if err := g.Start(cmd); err != nil {
		fmt.Println(err)
		return
	}
	code, err := delegate.Wait(cmd, nil)
	oom, _ := g.OOMKills()
	fmt.Println("exit", code, err, "oom kills", oom)
	cpuMax, _ := os.ReadFile(filepath.Join(g.Dir(), "cpu.max"))
	fmt.Printf("cpu.max %s\n", cpuMax)
	// Output:
	// exit 0 <nil> oom kills 0
	// cpu.max 50000 100000
}

// fakeCgroupRoot makes a temp dir that looks enough like a delegated root.
func fakeCgroupRoot() string {
	cgroups.TestMode = true
	dir, err := os.MkdirTemp("", "cgroot")
	if err != nil {
		panic(err)
	}
	for name, data := range map[string]string{"cgroup.controllers": "cpu memory", "cgroup.subtree_control": "", "cgroup.procs": ""} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o644); err != nil {
			panic(err)
		}
	}
	return dir
}
