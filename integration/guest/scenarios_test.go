//go:build integration_guest

package guest

import (
	"encoding/json"
	"fmt"
	"runtime/debug"
	"testing"
	"time"

	"github.com/cgdelegate/cgdelegate/integration/internal/variant"
)

// scenarios maps every scenario identifier to the function that runs it.
var scenarios = map[variant.Scenario]func(t *testing.T, e *guestEnv){
	variant.Harness:                         harness,
	variant.AnnotatedWritable:               annotatedWritable,
	variant.UnannotatedReadOnly:             unannotatedReadOnly,
	variant.OwnLimitsProtected:              ownLimitsProtected,
	variant.PodBounds:                       podBounds,
	variant.RefusedWithoutNSDelegate:        refusedWithoutNSDelegate,
	variant.GuardCgroupWritable:             guardCgroupWritable,
	variant.HookRefusesAfterRemount:         hookRefusesAfterRemount,
	variant.NodeDelegationBudget:            nodeDelegationBudget,
	variant.DyingCgroups:                    dyingCgroups,
	variant.TenantChurn:                     tenantChurn,
	variant.UnsafeAfterStart:                unsafeAfterStart,
	variant.UsernsPod:                       usernsPod,
	variant.PluginMode:                      pluginMode,
	variant.Restarts:                        restarts,
	variant.FailClosedPerPod:                failClosedPerPod,
	variant.OptInPolicy:                     optInPolicy,
	variant.MetricsScraped:                  metricsScraped,
	variant.ValidatorRejectsHook:            validatorRejectsHook,
	variant.ValidatorRejectsNamespace:       validatorRejectsNamespace,
	variant.NUMATopology:                    numaTopology,
	variant.PinningPodBudget:                pinningPodBudget,
	variant.PinningDynamicAdd:               pinningDynamicAdd,
	variant.PinningPluginRestartDuringChurn: pinningPluginRestartDuringChurn,
	variant.InPodWorkers:                    inPodWorkers,
	variant.InPodExecAfterLeafMove:          inPodExecAfterLeafMove,
	variant.InPodNestedRunc:                 inPodNestedRunc,
	variant.InPodSystemd:                    inPodSystemd,
	variant.PinningContainerScope:           pinningContainerScope,
	variant.PinningLiveInitContainer:        pinningLiveInitContainer,
	variant.ScaleChurn:                      scaleChurn,
	variant.ScaleRestart:                    scaleRestart,
	variant.Demo:                            demo,
	variant.BenchNode:                       benchNode,
	variant.KubeletWritable:                 kubeletWritable,
	variant.KubeletRefusedWithoutNSDelegate: kubeletRefusedWithoutNSDelegate,
	variant.KubeletUserns:                   kubeletUserns,
	variant.KubeletPodLevelPinning:          kubeletPodLevelPinning,
	variant.KubeletPinningOracle:            kubeletPinningOracle,
	variant.KubeletStartLatency:             kubeletStartLatency,
	variant.KubeletDaemonSetPod:             kubeletDaemonSetPod,
	variant.KubeletPluginPodRestart:         kubeletPluginPodRestart,
	variant.ClusterNodeReady:                clusterNodeReady,
	variant.ClusterPodNetwork:               clusterPodNetwork,
	variant.ClusterUpgradeFromPrevious:      clusterUpgradeFromPrevious,
	variant.ClusterRegistryInstall:          clusterRegistryInstall,
	variant.ClusterHelmSetConfig:            clusterHelmSetConfig,
	variant.ClusterAdmissionPolicy:          clusterAdmissionPolicy,
	variant.ClusterNodeLabel:                clusterNodeLabel,
	variant.ClusterMixedFleet:               clusterMixedFleet,
	variant.ClusterMixedFleetNode:           clusterMixedFleetNode,
	variant.ClusterRegistryUpgrade:          clusterRegistryUpgrade,
	variant.ClusterRegistryRollback:         clusterRegistryRollback,
	variant.ClusterHelmUninstall:            clusterHelmUninstall,
	variant.ClusterRuntimeDropIn:            clusterRuntimeDropIn,
	variant.ClusterResizeUnpinned:           clusterResizeUnpinned,
	variant.ClusterEphemeralContainers:      clusterEphemeralContainers,
	variant.ClusterResizeBubble:             clusterResizeBubble,
	variant.ClusterPinningOracle:            clusterPinningOracle,
	variant.ClusterDocker:                   clusterDocker,
	variant.ClusterPodman:                   clusterPodman,
	variant.ClusterWorkers:                  clusterWorkers,
	variant.ClusterVMSplit:                  clusterVMSplit,
	variant.CRIConformance:                  criConformance,
}

// Console markers of a scenario, read by integration/vm: its identifier
// when it starts, and its JSON result when it ends.
const (
	markScenario = "CGD-SCENARIO "
	markResult   = "CGD-RESULT "
)

// TestScenarios runs the boot variant's scenarios in order, each as the
// subtest named by its identifier.
func TestScenarios(t *testing.T) {
	if env == nil {
		t.Fatal("TestMain did not run: use the guest test binary only inside the VM")
	}
	if env.setupErr == nil && env.variant.NeedsEngines() {
		env.startEnginesImport()
	}
	for _, id := range env.variant.Scenarios {
		t.Run(string(id), func(t *testing.T) { env.run(t, id) })
	}
}

// run runs one scenario between its start and result lines. A scenario
// fails at once when the guest has no function for it or the VM could not
// be set up.
func (e *guestEnv) run(t *testing.T, id variant.Scenario) {
	start := time.Now()
	fmt.Printf("%s%s\n", markScenario, id)
	t.Cleanup(func() {
		res := "pass"
		switch {
		case t.Failed():
			res = "fail"
		case t.Skipped():
			res = "skip"
		}
		b, _ := json.Marshal(map[string]any{"scenario": id, "result": res, "seconds": time.Since(start).Seconds()})
		printToolCalls(t, string(id))
		fmt.Printf("%s%s\n", markResult, b)
	})
	// A panicking scenario fails, with its stack, and the next ones run.
	defer func() {
		if r := recover(); r != nil {
			t.Errorf("scenario %s panicked: %v\n%s", id, r, debug.Stack())
		}
	}()
	fn, ok := scenarios[id]
	if !ok {
		t.Fatalf("the guest has no function for scenario %s", id)
	}
	if e.setupErr != nil {
		t.Fatalf("VM setup failed: %v", e.setupErr)
	}
	fn(t, e)
}
