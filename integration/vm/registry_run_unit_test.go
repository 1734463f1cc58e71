//go:build integration_vm

package vm

import (
	"context"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// TestRegistryPublish: the harness's part of the cluster boot's registry,
// without a VM: two releases built from a static binary, the registry
// started, both pushed; the registry then serves each tag at the digest
// the guest is told, the digests differ, and helm reads each chart from
// it with its version and appVersion.
func TestRegistryPublish(t *testing.T) {
	if _, err := exec.LookPath(registryCommand); err != nil {
		t.Skipf("%s not installed (integration/vm/install-deps.sh): %v", registryCommand, err)
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	b := &builder{log: log, repo: repoRoot(t), cacheDir: defaultCacheDir(), workDir: t.TempDir()}
	helm, err := b.helm(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// Any static amd64 executable makes a release image.
	rels, err := b.buildReleases(ctx, helm, b.repo+"/"+chartDir, busyboxPath)
	if err != nil {
		t.Fatal(err)
	}
	if len(rels) != 2 || rels[0].Digest == rels[1].Digest {
		t.Fatalf("releases %+v: want two digests", rels)
	}
	ports, err := freeLoopbackPorts(1)
	if err != nil {
		t.Fatal(err)
	}
	r := registryServer{IP: "127.0.0.1", Port: ports[0], Dir: t.TempDir()}
	if err := startRegistry(t, log, r); err != nil {
		t.Fatal(err)
	}
	if err := publishReleases(ctx, log, r, helm, rels); err != nil {
		t.Fatal(err)
	}
	for _, rel := range rels {
		req, err := http.NewRequestWithContext(ctx, http.MethodHead, "http://"+r.Addr()+"/v2/"+registryImageRepo+"/manifests/"+rel.AppVersion, nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Accept", "application/vnd.oci.image.index.v1+json, application/vnd.oci.image.manifest.v1+json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if got := resp.Header.Get("Docker-Content-Digest"); resp.StatusCode != http.StatusOK || got != rel.Digest {
			t.Errorf("%s:%s: HTTP %d, digest %q, want %s", registryImageRepo, rel.AppVersion, resp.StatusCode, got, rel.Digest)
		}
		out, err := runCmd(ctx, helmEnv(t.TempDir()), helm, "show", "chart", "oci://"+r.Addr()+"/"+registryChartRepo+"/cgdelegate",
			"--version", rel.Chart, "--plain-http")
		if err != nil {
			t.Fatal(err)
		}
		for _, want := range []string{"version: " + rel.Chart, "appVersion: " + rel.AppVersion} {
			if !strings.Contains(string(out), want) {
				t.Errorf("chart %s from the registry lacks %q:\n%s", rel.Chart, want, out)
			}
		}
	}
}
