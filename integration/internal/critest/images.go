package critest

import (
	"fmt"
	"maps"
	"path"
	"slices"
	"strings"

	"github.com/cgdelegate/cgdelegate/internal/ociimage"
)

// Image is one image critest pulls, as the VM's registry serves it: built
// once, pushed under every reference in Refs.
type Image struct {
	ociimage.Image
	// Refs are the references critest names, registry host included
	// (the VM points containerd's mirror for each host at its registry).
	Refs []string
}

// Registries are the hosts of every reference in Images: the guest makes
// its registry their mirror.
var Registries = []string{"registry.k8s.io", "gcr.io", "k8s.gcr.io"}

// Userland is what every image is built on: busybox and a link for each
// of its applets, as in busybox's own image.
type Userland struct {
	// Busybox is the host path of Debian's dynamically linked busybox
	// (package busybox), not busybox-static's: that one's shell runs
	// applets without exec (ls is a builtin there), so critest's masked
	// /bin/ls would never be run, where busybox's own image runs it.
	Busybox string
	// Libs are the shared libraries it loads: image path (as the dynamic
	// loader looks for it) to host path.
	Libs    map[string]string
	Applets []string
	// Standin is the host path of integration/cmd/critestimage.
	Standin string
	// Pause is the host path of integration/cmd/pause.
	Pause string
}

// The image references critest v1.37.0 pulls (its pkg/validate constants);
// the one with a pinned digest is not here (Skips).
const (
	e2e     = "registry.k8s.io/e2e-test-images/"
	staging = "gcr.io/k8s-staging-cri-tools/"
)

// busyboxPasswd and busyboxGroup are busybox's own image's accounts, with
// the ones critest's images add.
const (
	busyboxPasswd = "root:x:0:0:root:/root:/bin/sh\n" +
		"daemon:x:1:1:daemon:/usr/sbin:/bin/false\n" +
		"bin:x:2:2:bin:/bin:/bin/false\n" +
		"sys:x:3:3:sys:/dev:/bin/false\n" +
		"sync:x:4:100:sync:/bin:/bin/sync\n" +
		"mail:x:8:8:mail:/var/spool/mail:/bin/false\n" +
		"www-data:x:33:33:www-data:/var/www:/bin/false\n" +
		"operator:x:37:37:Operator:/var:/bin/false\n" +
		"nobody:x:65534:65534:nobody:/home:/bin/false\n"
	busyboxGroup = "root:x:0:\ndaemon:x:1:\nbin:x:2:\nsys:x:3:\nadm:x:4:\ntty:x:5:\ndisk:x:6:\nlp:x:7:\n" +
		"mail:x:8:\nkmem:x:9:\nwheel:x:10:root\ncdrom:x:11:\ndialout:x:18:\nfloppy:x:19:\nvideo:x:28:\n" +
		"audio:x:29:\ntape:x:32:\nwww-data:x:33:\noperator:x:37:\nutmp:x:43:\nplugdev:x:46:\nstaff:x:50:\n" +
		"lock:x:54:\nnetdev:x:82:\nusers:x:100:\nnogroup:x:65534:\n"
)

// files are busybox's image with passwd and group as given.
func (u Userland) files(passwd, group string) []ociimage.File {
	fs := []ociimage.File{
		{Name: "bin", Mode: 0o755, Dir: true},
		{Name: "dev", Mode: 0o755, Dir: true},
		{Name: "etc", Mode: 0o755, Dir: true},
		{Name: "home", Mode: 0o755, Dir: true},
		{Name: "proc", Mode: 0o755, Dir: true},
		{Name: "root", Mode: 0o700, Dir: true},
		{Name: "sys", Mode: 0o755, Dir: true},
		{Name: "tmp", Mode: 0o1777, Dir: true},
		{Name: "usr", Mode: 0o755, Dir: true},
		{Name: "usr/sbin", Mode: 0o755, Dir: true},
		{Name: "usr/local", Mode: 0o755, Dir: true},
		{Name: "usr/local/bin", Mode: 0o755, Dir: true},
		{Name: "var", Mode: 0o755, Dir: true},
		{Name: "var/run", Mode: 0o755, Dir: true},
		{Name: "var/www", Mode: 0o755, Dir: true},
		{Name: "etc/passwd", Mode: 0o644, Data: []byte(passwd)},
		{Name: "etc/group", Mode: 0o644, Data: []byte(group)},
		{Name: "bin/busybox", Mode: 0o755, HostPath: u.Busybox},
		{Name: standinPath, Mode: 0o755, HostPath: u.Standin},
	}
	dirs := map[string]bool{}
	for _, img := range slices.Sorted(maps.Keys(u.Libs)) {
		for d := path.Dir(img); d != "." && !dirs[d]; d = path.Dir(d) {
			dirs[d] = true
			fs = append(fs, ociimage.File{Name: d, Mode: 0o755, Dir: true})
		}
		fs = append(fs, ociimage.File{Name: img, Mode: 0o755, HostPath: u.Libs[img]})
	}
	// Hard links, as in busybox's own image: a masked path (critest masks
	// /bin/ls) then hides that name only, where a symbolic link would
	// hide busybox itself.
	for _, a := range u.Applets {
		if a != "" && a != "busybox" && a != "pgrep" && a != "ipcs" {
			fs = append(fs, ociimage.File{Name: "bin/" + a, Hardlink: "bin/busybox"})
		}
	}
	// What critest runs in its busybox image that Debian's busybox lacks.
	return append(fs,
		ociimage.File{Name: "bin/pgrep", Hardlink: standinPath},
		ociimage.File{Name: "bin/ipcs", Hardlink: standinPath})
}

// standinPath is where every image has integration/cmd/critestimage; the
// names it answers to are hard links to it.
const standinPath = "usr/local/bin/critestimage"

// Images are the images critest pulls: what each is for in critest, and
// what it has here.
func Images(u Userland) []Image {
	plain := u.files(busyboxPasswd, busyboxGroup)
	with := func(extra ...ociimage.File) []ociimage.File {
		return append(append([]ociimage.File(nil), plain...), extra...)
	}
	standin := func(path string) ociimage.File { return ociimage.File{Name: path, Hardlink: standinPath} }
	// marker is the file critest's image-test Dockerfile adds: it makes
	// the images of different names different.
	marker := func(name string) ociimage.File { return ociimage.File{Name: name, Mode: 0o644, Data: []byte{}} }
	user := func(ref, usr string) Image {
		return Image{Image: ociimage.Image{Files: plain, Cmd: []string{"sh"}, User: usr}, Refs: []string{ref}}
	}
	imgs := []Image{
		// The default container image: sh, echo, sleep, top, ls, cat...
		{Image: ociimage.Image{Files: plain, Cmd: []string{"sh"}}, Refs: []string{e2e + "busybox:1.29-2"}},
		// The web server: port 80, /var/run/nginx.pid, a process named nginx.
		{Image: ociimage.Image{Files: with(standin("usr/sbin/nginx")), Entrypoint: []string{"/usr/sbin/nginx"}}, Refs: []string{e2e + "nginx:1.14-2"}},
		// The same on port 12003, for host network.
		{
			Image: ociimage.Image{Files: with(standin("usr/sbin/nginx")), Entrypoint: []string{"/usr/sbin/nginx"}, Env: []string{"PORT=12003"}},
			Refs:  []string{staging + "hostnet-nginx-amd64:latest"},
		},
		{Image: ociimage.Image{Files: with(standin("usr/local/bin/httpd")), Entrypoint: []string{"/usr/local/bin/httpd"}}, Refs: []string{e2e + "httpd:2.4.39-4"}},
		// Set-user-ID root (a copy: a hard link would share the mode):
		// prints its effective uid.
		{
			Image: ociimage.Image{Files: with(ociimage.File{Name: "usr/local/bin/nonewprivs", Mode: 0o4755, HostPath: u.Standin}), Entrypoint: []string{"/usr/local/bin/nonewprivs"}},
			Refs:  []string{e2e + "nonewprivs:1.3"},
		},
		// The image config's user, four ways.
		user(staging+"test-image-user-uid:latest", "1002"),
		user(staging+"test-image-user-username:latest", "www-data"),
		user(staging+"test-image-user-uid-group:latest", "1003:1004"),
		user(staging+"test-image-user-username-group:latest", "www-data:1004"),
		// A user whose groups the image's /etc/group defines.
		{
			Image: ociimage.Image{
				Files: u.files(busyboxPasswd+"default-user:x:1000:1000::/home/default-user:/bin/sh\n",
					busyboxGroup+"default-user:x:1000:\ngroup-defined-in-image:x:50000:default-user\n"),
				Cmd: []string{"sh"}, User: "1000",
			},
			Refs: []string{staging + "test-image-predefined-group:latest"},
		},
		// Different images under different names; one image under three
		// tags.
		{Image: ociimage.Image{Files: with(marker("test-image-1")), Cmd: []string{"sh"}}, Refs: []string{staging + "test-image-1:latest"}},
		{Image: ociimage.Image{Files: with(marker("test-image-2")), Cmd: []string{"sh"}}, Refs: []string{staging + "test-image-2:latest"}},
		{Image: ociimage.Image{Files: with(marker("test-image-3")), Cmd: []string{"sh"}}, Refs: []string{staging + "test-image-3:latest"}},
		{Image: ociimage.Image{Files: with(marker("test-image-latest")), Cmd: []string{"sh"}}, Refs: []string{staging + "test-image-latest:latest"}},
		{
			Image: ociimage.Image{Files: with(marker("same-image")), Cmd: []string{"sh"}},
			Refs:  []string{staging + "test-image-tags:1", staging + "test-image-tags:2", staging + "test-image-tags:3"},
		},
		{Image: ociimage.Image{Files: with(marker("test")), Cmd: []string{"sh"}}, Refs: []string{staging + "test-image-tag:test"}},
		{Image: ociimage.Image{Files: with(marker("all")), Cmd: []string{"sh"}}, Refs: []string{staging + "test-image-tag:all"}},
		// The same pause image from two registries.
		{
			Image: ociimage.Image{Files: []ociimage.File{{Name: "pause", Mode: 0o755, HostPath: u.Pause}}, Entrypoint: []string{"/pause"}},
			Refs:  []string{"registry.k8s.io/pause:3.9", "k8s.gcr.io/pause:3.9"},
		},
	}
	for i := range imgs {
		imgs[i].Name = imgs[i].Refs[0]
	}
	return imgs
}

// RegistryPath splits a reference of Images into its registry host and
// the repository:tag the registry serves it as.
func RegistryPath(ref string) (host, path string, err error) {
	host, path, ok := strings.Cut(ref, "/")
	if !ok || !strings.Contains(path, ":") || strings.Contains(path, "@") {
		return "", "", fmt.Errorf("critest image %q: want host/repository:tag", ref)
	}
	for _, r := range Registries {
		if host == r {
			return host, path, nil
		}
	}
	return "", "", fmt.Errorf("critest image %q: registry %q is not one of %q", ref, host, Registries)
}
