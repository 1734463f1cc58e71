package kubelet

import (
	"fmt"
	"path"
	"strings"

	corev1 "k8s.io/api/core/v1"
)

// PodCgroup is the pod cgroup the kubelet makes for the pod, relative to
// the cgroup root (with the default cgroupRoot "/" and cgroupsPerQOS),
// from the pod's UID and the QoS class in its status:
//   - cgroupfs: kubepods/pod<uid> (Guaranteed) or kubepods/<qos>/pod<uid>;
//   - systemd: kubepods.slice/kubepods-pod<uid>.slice or
//     kubepods.slice/kubepods-<qos>.slice/kubepods-<qos>-pod<uid>.slice,
//     with the UID's dashes as underscores.
func PodCgroup(driver CgroupDriver, p *corev1.Pod) (string, error) {
	if p == nil || p.UID == "" {
		return "", fmt.Errorf("pod cgroup: pod has no UID")
	}
	var qos string
	switch p.Status.QOSClass {
	case corev1.PodQOSGuaranteed:
	case corev1.PodQOSBurstable:
		qos = "burstable"
	case corev1.PodQOSBestEffort:
		qos = "besteffort"
	default:
		return "", fmt.Errorf("pod cgroup of %s: status.qosClass %q: want Guaranteed, Burstable or BestEffort", p.Name, p.Status.QOSClass)
	}
	uid := string(p.UID)
	switch driver {
	case CgroupFS:
		return path.Join("kubepods", qos, "pod"+uid), nil
	case Systemd:
		uid = strings.ReplaceAll(uid, "-", "_")
		if qos == "" {
			return path.Join("kubepods.slice", "kubepods-pod"+uid+".slice"), nil
		}
		return path.Join("kubepods.slice", "kubepods-"+qos+".slice", "kubepods-"+qos+"-pod"+uid+".slice"), nil
	}
	return "", fmt.Errorf("pod cgroup: cgroup driver %q: want cgroupfs or systemd", driver)
}
