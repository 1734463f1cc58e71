// Command mkimage writes the cgdelegate release image as an OCI image
// layout archive, without a container engine (`make image`, `make
// release`), pushes such an archive to a registry (`make push`) and
// packages the chart of a release:
//
//	mkimage -o bin/cgdelegate-image.tar -version v0.1.0 [-tag dev] bin/cgdelegate bin/cgdelegate-hook bin/cgdelegate-init
//	mkimage -o dist/cgdelegate-v0.2.0.oci.tar -version v0.2.0 amd64=dist/linux-amd64/cgdelegate arm64=dist/linux-arm64/cgdelegate ...
//	mkimage check-version v0.2.0
//	mkimage chart -version v0.2.0 -o dist contrib/helm/cgdelegate
//	mkimage push [-plain-http] dist/cgdelegate-v0.2.0.oci.tar registry.example:5000/cgdelegate:v0.2.0
//
// The image is scratch-style: the given binaries under /usr/local/bin and
// nothing else. Its entrypoint is the first binary; it is named
// <-repo>:<-tag> (-tag defaults to -version) and labelled with the version,
// source and license. A binary given as ARCH=PATH is for that GOARCH, one
// given as PATH for -arch (default: the architecture mkimage runs on);
// every binary must be an ELF executable for its architecture. One
// architecture gives that image (`ctr -n k8s.io images import`, `podman
// load`), several an image index of one image per architecture.
// internal/ociimage.Release describes it, for the VM suite too.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"strings"

	"github.com/cgdelegate/cgdelegate/internal/ociimage"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	os.Exit(run(ctx, os.Args[1:], os.Stdout, os.Stderr))
}

// run dispatches on the first argument: a subcommand, or the flags of
// the image writer.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	var err error
	if len(args) > 0 {
		switch args[0] {
		case "check-version":
			err = checkVersion(args[1:])
		case "chart":
			err = chart(ctx, args[1:], stderr)
		case "push":
			err = push(ctx, args[1:], stdout, stderr)
		default:
			err = image(args, stderr)
		}
	} else {
		err = image(args, stderr)
	}
	switch {
	case err == nil:
		return 0
	case errors.Is(err, flag.ErrHelp):
		return 0
	case errors.Is(err, errUsage):
		return 2
	default:
		fmt.Fprintln(stderr, "mkimage:", err)
		return 1
	}
}

// usageError is a flag problem the flag package has already reported: the
// exit code is 2 and nothing more is printed.
type usageError struct{}

func (usageError) Error() string { return "usage" }

var errUsage error = usageError{}

// parse parses fs and turns a parse error into errUsage.
func parse(fs *flag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return errUsage
	}
	return nil
}

func image(args []string, stderr io.Writer) error {
	fs := flag.NewFlagSet("mkimage", flag.ContinueOnError)
	fs.SetOutput(stderr)
	out := fs.String("o", "", "output OCI layout tar (required)")
	arch := fs.String("arch", runtime.GOARCH, "the architecture (GOARCH) of the binaries given without ARCH=")
	spec := ociimage.Release{}
	fs.StringVar(&spec.Repo, "repo", ociimage.DefaultRepo, "image repository; the reference is <repo>:<tag>")
	fs.StringVar(&spec.Version, "version", "", "image version label, e.g. git describe (required)")
	fs.StringVar(&spec.Tag, "tag", "", "image tag (default: the version)")
	fs.StringVar(&spec.Source, "source", ociimage.DefaultSource, "org.opencontainers.image.source label")
	if err := parse(fs, args); err != nil {
		return err
	}
	spec.Binaries = binaries(fs.Args(), *arch)
	if *out == "" {
		return errors.New("-o is required")
	}
	return write(*out, spec)
}

// binaries sorts [ARCH=]PATH arguments by architecture, in order.
func binaries(args []string, arch string) map[string][]string {
	if len(args) == 0 {
		return nil
	}
	bins := map[string][]string{}
	for _, a := range args {
		if k, p, ok := strings.Cut(a, "="); ok {
			bins[k] = append(bins[k], p)
		} else {
			bins[arch] = append(bins[arch], a)
		}
	}
	return bins
}

// write writes the image to path, atomically.
func write(path string, s ociimage.Release) (err error) {
	if err := s.Validate(); err != nil {
		return err
	}
	f, err := os.CreateTemp(filepath.Dir(path), ".mkimage-*")
	if err != nil {
		return fmt.Errorf("image %s: %w", s.Name(), err)
	}
	defer func() {
		if err != nil {
			os.Remove(f.Name())
		}
	}()
	werr := s.Write(f)
	if err := errors.Join(werr, f.Chmod(0o644), f.Close()); err != nil {
		return err
	}
	if err := verify(f.Name(), s); err != nil {
		return err
	}
	if err := os.Rename(f.Name(), path); err != nil {
		return fmt.Errorf("image %s: %w", s.Name(), err)
	}
	return nil
}

// verify reads the written archive back and checks it is the release
// (ociimage.Release.Verify): each architecture's platform and binaries.
func verify(path string, s ociimage.Release) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	a, cleanup, err := ociimage.ReadArchive(f, "")
	if err != nil {
		return err
	}
	defer cleanup()
	return s.Verify(a)
}

func checkVersion(args []string) error {
	if len(args) != 1 {
		return fmt.Errorf("check-version takes one VERSION, got %d arguments", len(args))
	}
	return ociimage.CheckVersion(args[0])
}

func push(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("mkimage push", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var opts ociimage.PushOptions
	fs.BoolVar(&opts.PlainHTTP, "plain-http", false, "talk HTTP, not HTTPS, to the registry")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: mkimage push [-plain-http] ARCHIVE HOST[:PORT]/REPOSITORY:TAG")
		fs.PrintDefaults()
	}
	if err := parse(fs, args); err != nil {
		return err
	}
	if fs.NArg() != 2 {
		fs.Usage()
		return errUsage
	}
	archive, ref := fs.Arg(0), fs.Arg(1)
	digest, err := ociimage.PushArchive(ctx, archive, ref, opts)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "pushed %s@%s\n", ref, digest)
	return nil
}
