// Command critestimage stands in for the programs of the images SIG Node's
// CRI validation suite (critest) pulls from public registries, which the
// integration VM cannot reach: the harness builds those images itself, on
// busybox, with this one binary linked under each name it answers to.
//
//   - nginx, httpd: an HTTP server on port 80 (nginx: $PORT when set, as
//     the host network image sets it) answering 200 to every request;
//     nginx also writes its PID to /var/run/nginx.pid, as the
//     suite's PID namespace tests read it and look for a process named
//     nginx.
//   - nonewprivs: installed set-user-ID root, prints "Effective uid: N",
//     the line the suite's NoNewPrivs tests match (0 when the kernel
//     honoured the set-user-ID bit, the caller's uid under
//     no_new_privs).
//   - ipcmk: on the VM itself, not in an image: creates a System V shared
//     memory segment of the size -M gives and prints its id as util-linux's
//     ipcmk does ("Shared memory id: N"); busybox has no ipcmk, and the
//     suite's host IPC tests run it on the node.
package main

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"golang.org/x/sys/unix"
)

func main() {
	if err := run(filepath.Base(os.Args[0]), os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", filepath.Base(os.Args[0]), err)
		os.Exit(1)
	}
}

// errUsage is wrapped by every refusal of the command line.
var errUsage = errors.New("usage")

func run(name string, args []string, out io.Writer) error {
	switch name {
	case "nginx":
		if err := os.MkdirAll("/var/run", 0o755); err != nil {
			return err
		}
		if err := os.WriteFile("/var/run/nginx.pid", []byte(strconv.Itoa(os.Getpid())+"\n"), 0o644); err != nil {
			return err
		}
		port := os.Getenv("PORT")
		if port == "" {
			port = "80"
		}
		return serve(":" + port)
	case "httpd":
		return serve(":80")
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
	}
	return fmt.Errorf("%w: link this binary as nginx, httpd, nonewprivs or ipcmk, not %q", errUsage, name)
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

func serve(addr string) error {
	srv := &http.Server{
		Addr:              addr,
		ReadHeaderTimeout: 10 * time.Second,
		Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			_, _ = io.WriteString(w, "<html><body>critest stand-in</body></html>\n")
		}),
	}
	return srv.ListenAndServe()
}
