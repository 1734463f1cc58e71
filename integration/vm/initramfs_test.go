//go:build integration_vm

package vm

import (
	"bufio"
	"bytes"
	_ "embed"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strings"

	"github.com/cgdelegate/cgdelegate/integration/internal/podnet"
	"github.com/cgdelegate/cgdelegate/integration/internal/variant"
	"github.com/cgdelegate/cgdelegate/integration/internal/workstation"
)

// nullCNIConfig gives pods that ask for their own network namespace one
// that is never wired to anything (see integration/cmd/nullcni).
const nullCNIConfig = `{"cniVersion": "1.0.0", "name": "cgd-null", "plugins": [{"type": "nullcni"}]}
`

// releaseImagePath is where the guest finds the release image (the guest's
// releaseImage); apart from the busybox and pause images, which every boot
// imports.
const releaseImagePath = "cgd/release/cgdelegate-image.tar"

//go:embed init.sh
var initScript []byte

//go:embed init-systemd.sh
var initSystemdScript []byte

//go:embed guest-run.sh
var guestRunScript []byte

// packInitramfs writes an uncompressed newc initramfs for one containerd
// version, init and kubelet (boot). Uncompressed, because qemu loads it
// with a memcpy while TCG would spend seconds in the kernel's decompressor.
// With systemd, its root is the Debian root filesystem a.SystemdRootfs and
// PID 1 becomes systemd; otherwise it is busybox and init.sh. Only kubelet
// boots carry the kubelet's 90 MB, only DaemonSet boots the release image.
func packInitramfs(dst string, a *artifacts, boot bootKind) (err error) {
	containerdVersion := boot.containerd
	if boot.kubelet && a.Kubelet == "" {
		return fmt.Errorf("initramfs: the kubelet was not built")
	}
	if boot.cluster && (a.Cluster == nil || len(a.NetModules) != len(netModuleFiles) || a.PodNet == nil) {
		return fmt.Errorf("initramfs: the cluster's kubectl, kubeconfigs, network modules or pod network were not built")
	}
	ctrDir, ok := a.Containerd[containerdVersion]
	if !ok {
		return fmt.Errorf("initramfs: containerd %s was not built", containerdVersion)
	}
	if boot.systemd && a.SystemdRootfs == "" {
		return errors.New("initramfs: the systemd root filesystem was not built")
	}
	if boot.critest && a.Critest == nil {
		return errors.New("initramfs: critest and its images were not built")
	}
	f, err := os.Create(dst) //nolint:forbidigo // scratch file in our own work dir
	if err != nil {
		return fmt.Errorf("initramfs: %w", err)
	}
	defer func() {
		if cerr := f.Close(); cerr != nil {
			err = errors.Join(err, fmt.Errorf("initramfs: %w", cerr))
		}
	}()
	w := newCPIOWriter(f)
	if boot.systemd {
		// The suite's files first: the first entry of a path wins over the
		// root filesystem's.
		if err := writeSystemdFiles(w); err != nil {
			return err
		}
		if err := writeSuiteFiles(w, a, ctrDir, containerdVersion, "cgd/overlay.ko", boot); err != nil {
			return err
		}
		w.Tar(a.SystemdRootfs, nil)
		return w.Close()
	}
	if err := writeBusybox(w, a); err != nil {
		return err
	}
	if err := writeSuiteFiles(w, a, ctrDir, containerdVersion, "lib/modules/overlay.ko", boot); err != nil {
		return err
	}
	w.Bytes("etc/passwd", 0o644, []byte(guestPasswd))
	w.Bytes("etc/group", 0o644, []byte(guestGroup))
	w.Bytes("etc/hostname", 0o644, []byte("cgd-vm\n"))
	w.Bytes("etc/nsswitch.conf", 0o644, []byte("hosts: files\n"))
	return w.Close()
}

// writeBusybox writes the busybox userland and init.sh as /init.
func writeBusybox(w *cpioWriter, a *artifacts) error {
	for _, d := range []string{
		"bin", "sbin", "usr/bin", "usr/sbin", "usr/local/bin", "etc", "proc", "sys", "dev",
		"run", "tmp", "root", "var/lib", "var/log", "lib/modules", "cgd/images", "opt/nri/plugins", "etc/nri/conf.d",
		"etc/containerd", "newroot",
	} {
		w.Dir(d, 0o755)
	}
	w.Symlink("var/run", "../run")
	w.CharDev("dev/console", 0o600, 5, 1)
	w.CharDev("dev/null", 0o666, 1, 3)
	w.Bytes("init", 0o755, initScript)

	w.HostFile("bin/busybox", 0o755, a.Busybox)
	applets, err := exec.Command(a.Busybox, "--list-full").Output()
	if err != nil {
		return fmt.Errorf("initramfs: busybox --list-full: %w", err)
	}
	sc := bufio.NewScanner(bytes.NewReader(applets))
	for sc.Scan() {
		p := strings.TrimSpace(sc.Text())
		if p == "" || p == "bin/busybox" {
			continue
		}
		rel, err := filepath.Rel(filepath.Dir(p), "bin/busybox")
		if err != nil {
			return fmt.Errorf("initramfs: applet %s: %w", p, err)
		}
		w.Symlink(p, rel)
	}
	return nil
}

// writeSystemdFiles writes the systemd variants' stage one /init, the guest
// unit's script and the configuration of systemdFiles.
func writeSystemdFiles(w *cpioWriter) error {
	w.Bytes("init", 0o755, initSystemdScript)
	w.Bytes("cgd/guest-run.sh", 0o755, guestRunScript)
	w.Dir("newroot", 0o755)
	files, err := systemdFiles(systemdUnits, systemdMasked)
	if err != nil {
		return fmt.Errorf("initramfs: %w", err)
	}
	for _, f := range files {
		if f.Link != "" {
			w.Symlink(f.Name, f.Link)
		} else {
			w.Bytes(f.Name, f.Mode, []byte(f.Data))
		}
	}
	return nil
}

// writeSuiteFiles writes what every variant's guest needs: containerd,
// runc, cgdelegate, the guest test binary and its images, overlayfs (at
// overlayKO), the CNI plugin, the kubelet and the release image when the
// boot carries them, and the host
// files the guest reads.
func writeSuiteFiles(w *cpioWriter, a *artifacts, ctrDir, containerdVersion, overlayKO string, boot bootKind) error {
	for _, d := range []string{"cgd/images", "opt/nri/plugins", "etc/nri/conf.d", "etc/containerd", "var/lib", "var/log"} {
		w.Dir(d, 0o755)
	}
	for _, bin := range []string{"containerd", "ctr", "containerd-shim-runc-v2"} {
		w.HostFile("usr/local/bin/"+bin, 0o755, filepath.Join(ctrDir, bin))
	}
	w.HostFile("usr/local/bin/runc", 0o755, a.Runc)
	versions := fmt.Sprintf("containerd=%s\nrunc=%s\nkernel=%s\n", containerdVersion, runcVersion, a.KernelName)
	if boot.kubelet {
		w.HostFile("usr/local/bin/kubelet", 0o755, a.Kubelet)
		versions += "kubelet=" + kubeletVersion + "\n"
	}
	if boot.cluster {
		// The admin's kubeconfig (the guest's API client reads it; kubectl
		// and helm run on the host's workstation), the kubelets'
		// kubeconfigs, and the modules init.sh loads for eth0.
		w.HostFile(guestAdminKubeconfig, 0o600, a.Cluster.PKI.Kubeconfig("guest-admin"))
		for _, n := range clusterPlan.Nodes {
			name := podnet.KubeletKubeconfig(n.Name)
			w.HostFile(guestKubeletKubeconfigs+"/"+name+".kubeconfig", 0o600, a.Cluster.PKI.Kubeconfig(name))
		}
		for _, m := range a.NetModules {
			w.HostFile(guestNetModules+"/"+filepath.Base(m), 0o644, m)
		}
		// The registry and its releases (the registry starts with the
		// boot; its port is chosen already).
		var prev *builtRelease
		if boot.previous {
			prev = a.Cluster.Previous
		}
		reg, err := guestRegistry(registryServer{IP: clusterHostIP, Port: a.Cluster.RegistryPort}, a.Cluster.Releases, prev)
		if err != nil {
			return err
		}
		w.Bytes(variant.RegistryFile, 0o644, reg)
		ws, err := workstationEndpoint(a.Cluster)
		if err != nil {
			return err
		}
		w.Bytes(workstation.File, 0o644, ws)
		versions += "kubectl=" + kubeletVersion + "\n"
		if err := writePodNet(w, a); err != nil {
			return err
		}
	}
	if a.Plugin != "" {
		w.HostFile("usr/local/bin/cgdelegate", 0o755, a.Plugin)
		w.HostFile("usr/local/bin/cgdelegate-hook", 0o755, a.Hook)
	} else {
		w.Bytes("cgd/plugin-build-error", 0o644, []byte(a.PluginErr.Error()))
	}
	if boot.release && a.ReleaseImage != "" {
		w.HostFile(releaseImagePath, 0o644, a.ReleaseImage)
	}
	w.HostFile("cgd/guest.test", 0o755, a.GuestTest)
	for i, img := range a.Images {
		w.HostFile(fmt.Sprintf("cgd/images/%d.tar", i), 0o644, img)
	}
	// Not imported at boot: the scenario that needs it does.
	if a.SystemdPodImage != "" {
		w.HostFile(systemdPodImagePath, 0o644, a.SystemdPodImage)
	}
	if boot.engines {
		w.HostFile(enginesImagePath, 0o644, a.EnginesImage)
	}
	if boot.critest {
		writeCritest(w, a.Critest)
	}
	w.HostFile(overlayKO, 0o644, a.OverlayKO)
	// The shipped containerd drop-in; the guest imports it in fail-closed
	// variants.
	w.HostFile("etc/containerd/conf.d/cgdelegate.toml", 0o644, a.ContainerdDropIn)
	// A cluster boot has a pod network (writePodNet, before this: the
	// first entry of a path wins); the others give pods a network
	// namespace wired to nothing.
	w.HostFile("opt/cni/bin/nullcni", 0o755, a.NullCNI)
	if !boot.cluster {
		w.Symlink("opt/cni/bin/loopback", "nullcni")
		w.Bytes("etc/cni/net.d/10-null.conflist", 0o644, []byte(nullCNIConfig))
	}

	w.Bytes("etc/hosts", 0o644, []byte("127.0.0.1\tlocalhost cgd-vm\n::1\tlocalhost ip6-localhost\n"))
	w.Bytes("etc/resolv.conf", 0o644, []byte("# no network in the integration VM\nnameserver 127.0.0.1\n"))
	w.Bytes("cgd/versions", 0o644, []byte(versions))
	return nil
}

// writePodNet writes what a node of the pod network needs: kube-proxy,
// its kubeconfig and the cluster CA, the CNI plugins and the netfilter
// modules (the guest runs depmod and writes the CNI network list for the
// node it is; see integration/internal/podnet).
func writePodNet(w *cpioWriter, a *artifacts) error {
	pn := a.PodNet
	w.HostFile(guestKubeProxy, 0o755, pn.KubeProxy)
	w.HostFile(guestKubeProxyKubeconfig, 0o600, a.Cluster.PKI.Kubeconfig("kube-proxy"))
	for _, p := range cniPlugins {
		w.HostFile(guestCNIBin+"/"+p, 0o755, filepath.Join(pn.CNIDir, p))
	}
	w.Dir("etc/cni/net.d", 0o755)
	return writeDir(w, guestModulesDir(pn.Release), pn.Modules)
}

// writeDir writes the regular files and directories below src at dst.
func writeDir(w *cpioWriter, dst, src string) error {
	return filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return fmt.Errorf("initramfs: %w", err)
		}
		rel, err := filepath.Rel(src, p)
		if err != nil {
			return fmt.Errorf("initramfs: %w", err)
		}
		name := path.Join(dst, filepath.ToSlash(rel))
		switch {
		case d.IsDir():
			w.Dir(name, 0o755)
		case d.Type().IsRegular():
			w.HostFile(name, 0o644, p)
		default:
			return fmt.Errorf("initramfs: %s is neither a file nor a directory", p)
		}
		return nil
	})
}
