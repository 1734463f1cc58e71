// Command critestimage stands in for the programs of the images SIG Node's
// CRI validation suite (critest) pulls from public registries, which the
// integration VM cannot reach: the harness builds those images itself, on
// busybox, with this one binary linked under each name it answers to.
//
//   - nginx, httpd: an HTTP server on port 80 (nginx: $PORT when set, as
//     the host network image sets it) answering 200 to every request;
//     each first prints a line naming itself (critest reads "httpd" in the
//     container's log). nginx runs as "nginx: master process ...", the
//     command line critest waits for in /proc/1/cmdline, and writes its
//     PID to /var/run/nginx.pid, which critest's PID namespace specs read.
//   - nonewprivs: installed set-user-ID root, prints "Effective uid: N",
//     the line the suite's NoNewPrivs tests match (0 when the kernel
//     honoured the set-user-ID bit, the caller's uid under
//     no_new_privs).
//   - pgrep NAME, ipcs -m: the two procps/util-linux commands critest runs
//     in its busybox image that Debian's busybox lacks: the PIDs of the
//     processes named NAME (exit 1 when none), and the System V shared
//     memory segments of the IPC namespace with their ids.
//   - ipcmk -M SIZE: on the VM itself, not in an image: creates a System V
//     shared memory segment of SIZE bytes and prints its id as util-linux's
//     ipcmk does ("Shared memory id: N"); critest's host IPC specs run it
//     on the node.
package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// nginxMaster is the command line nginx runs as (argv[0] only, as nginx's
// own master process rewrites it).
const nginxMaster = "nginx: master process nginx -g daemon off;"

func main() {
	if err := run(os.Args[0], os.Args[1:], os.Stdout); err != nil {
		var code exitCode
		if errors.As(err, &code) {
			os.Exit(int(code)) // quiet, as pgrep finding nothing is
		}
		fmt.Fprintf(os.Stderr, "%s: %v\n", filepath.Base(os.Args[0]), err)
		os.Exit(1)
	}
}

// errUsage is wrapped by every refusal of the command line.
var errUsage = errors.New("usage")

// exitCode is a quiet failure with a status of its own (pgrep finding
// nothing).
type exitCode int

func (c exitCode) Error() string { return "exit status " + strconv.Itoa(int(c)) }

func run(argv0 string, args []string, out io.Writer) error {
	if argv0 == nginxMaster {
		return serveAs(out, "nginx", envPort())
	}
	switch filepath.Base(argv0) {
	case "nginx":
		// Again as the master process, from the same file: the comm stays
		// nginx (pidof nginx), the command line becomes nginxMaster.
		if err := os.MkdirAll("/var/run", 0o755); err != nil {
			return err
		}
		if err := os.WriteFile("/var/run/nginx.pid", []byte(strconv.Itoa(os.Getpid())+"\n"), 0o644); err != nil {
			return err
		}
		self, err := os.Executable()
		if err != nil {
			return err
		}
		return syscall.Exec(self, []string{nginxMaster}, os.Environ())
	case "httpd":
		return serveAs(out, "httpd", "80")
	case "nonewprivs":
		_, err := fmt.Fprintf(out, "Effective uid: %d\n", os.Geteuid())
		return err
	case "ipcmk":
		size, err := shmSize(args)
		if err != nil {
			return err
		}
		id, err := unix.SysvShmGet(unix.IPC_PRIVATE, size, unix.IPC_CREAT|0o644)
		if err != nil {
			return fmt.Errorf("shmget of %d bytes: %w", size, err)
		}
		_, err = fmt.Fprintf(out, "Shared memory id: %d\n", id)
		return err
	case "ipcs":
		if len(args) != 1 || args[0] != "-m" {
			return fmt.Errorf("%w: ipcs -m, not %q", errUsage, args)
		}
		f, err := os.Open("/proc/sysvipc/shm")
		if err != nil {
			return err
		}
		defer f.Close()
		return listShm(f, out)
	case "pgrep":
		if len(args) != 1 {
			return fmt.Errorf("%w: pgrep NAME, not %q", errUsage, args)
		}
		return pgrep("/proc", args[0], out)
	}
	return fmt.Errorf("%w: link this binary as nginx, httpd, nonewprivs, pgrep, ipcs or ipcmk, not %q", errUsage, argv0)
}

func envPort() string {
	if p := os.Getenv("PORT"); p != "" {
		return p
	}
	return "80"
}

// shmSize reads ipcmk's -M SIZE, the one form the suite uses.
func shmSize(args []string) (int, error) {
	if len(args) != 2 || args[0] != "-M" {
		return 0, fmt.Errorf("%w: ipcmk -M SIZE, not %q", errUsage, args)
	}
	n, err := strconv.Atoi(args[1])
	if err != nil || n <= 0 {
		return 0, fmt.Errorf("%w: ipcmk -M: size %q: want a positive number of bytes", errUsage, args[1])
	}
	return n, nil
}

// listShm prints /proc/sysvipc/shm (key shmid perms size ... uid ...) as
// `ipcs -m` does: a header, then key, shmid, owner uid, perms, bytes and
// nattch of each segment.
func listShm(r io.Reader, out io.Writer) error {
	fmt.Fprintf(out, "\n------ Shared Memory Segments --------\nkey        shmid      owner      perms      bytes      nattch\n")
	sc := bufio.NewScanner(r)
	for first := true; sc.Scan(); first = false {
		f := strings.Fields(sc.Text())
		if first || len(f) < 8 {
			continue // the header, or a short line
		}
		key, _ := strconv.ParseInt(f[0], 10, 64)
		fmt.Fprintf(out, "0x%08x %-10s %-10s %-10s %-10s %s\n", uint32(key), f[1], f[7], f[2], f[3], f[6])
	}
	return sc.Err()
}

// pgrep prints the PIDs under proc whose process name matches the
// pattern, as procps' pgrep does; none is exit status 1.
func pgrep(proc, pattern string, out io.Writer) error {
	re, err := regexp.Compile(pattern)
	if err != nil {
		return fmt.Errorf("%w: pgrep: %w", errUsage, err)
	}
	entries, err := os.ReadDir(proc)
	if err != nil {
		return err
	}
	found := false
	for _, e := range entries {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		comm, err := os.ReadFile(filepath.Join(proc, e.Name(), "comm"))
		if err != nil {
			continue // gone
		}
		if re.MatchString(strings.TrimSpace(string(comm))) {
			fmt.Fprintln(out, e.Name())
			found = true
		}
	}
	if !found {
		return exitCode(1)
	}
	return nil
}

func serveAs(out io.Writer, name, port string) error {
	fmt.Fprintf(out, "%s: critest stand-in serving HTTP on port %s\n", name, port)
	srv := &http.Server{
		Addr:              ":" + port,
		ReadHeaderTimeout: 10 * time.Second,
		Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			_, _ = io.WriteString(w, "<html><body>critest stand-in</body></html>\n")
		}),
	}
	return srv.ListenAndServe()
}
