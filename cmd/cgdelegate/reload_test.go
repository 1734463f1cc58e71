package main

import (
	"bytes"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/cgdelegate/cgdelegate/internal/config"
	"github.com/cgdelegate/cgdelegate/internal/fakehost"
	"github.com/cgdelegate/cgdelegate/internal/nri"
)

// TestReloadOnHangup re-reads the config file on SIGHUP: a valid file is put
// in force, an invalid one is logged and the old config stays.
func TestReloadOnHangup(t *testing.T) {
	h := fakehost.New(t)
	base := h.Config()
	path := filepath.Join(h.Dir, "reload.yaml")
	write := func(extra string) {
		t.Helper()
		body := "cgroupRoot: " + base.CgroupRoot + "\nmountinfoPath: " + base.MountinfoPath + "\nsysfsRoot: " + base.SysfsRoot +
			"\nprocRoot: " + base.ProcRoot + "\nfeatureFile: none\nstatusFile: none\n" + extra
		if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("")
	cfg, err := config.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	var logs syncBuffer
	log := slog.New(slog.NewTextHandler(&logs, nil))
	p, err := nri.New(cfg, log)
	if err != nil {
		t.Fatal(err)
	}
	hup := make(chan os.Signal, 1)
	ctx := t.Context()
	go reloadOnHangup(ctx, hup, path, p, log)
	waitFor := func(what string, ok func() bool) {
		t.Helper()
		for deadline := time.Now().Add(5 * time.Second); !ok(); time.Sleep(5 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("%s; log:\n%s", what, logs.String())
			}
		}
	}

	write("optIn:\n  namespaces: [team-*]\n")
	hup <- syscall.SIGHUP
	waitFor("a valid file was not put in force", func() bool { return len(p.Config().OptIn.Namespaces) == 1 })

	write("optIn:\n  namespaces: [\"team-[\"]\n")
	hup <- syscall.SIGHUP
	waitFor("an invalid file was not reported", func() bool { return strings.Contains(logs.String(), "config reload failed") })
	if !strings.Contains(logs.String(), `optIn.namespaces: \"team-[\" is not a valid pattern`) {
		t.Errorf("log does not name the bad pattern:\n%s", logs.String())
	}
	if got := p.Config().OptIn.Namespaces; len(got) != 1 || got[0] != "team-*" {
		t.Fatalf("config after a bad reload: %q, want the old one", got)
	}

	// A key read only at start-up: the reload is refused and the log names
	// the key, the value in force and the value asked.
	write("optIn:\n  namespaces: [ml]\nmetricsAddress: 127.0.0.1:9767\n")
	hup <- syscall.SIGHUP
	want := `metricsAddress: \"\" in force, \"127.0.0.1:9767\" asked`
	waitFor("a start-only key's change was not reported", func() bool { return strings.Contains(logs.String(), want) })
	if got := p.Config(); got.MetricsAddress != "" || got.OptIn.Namespaces[0] != "team-*" {
		t.Fatalf("config after a reload that changes a start-only key: %+v, want the old one", got)
	}
}

func TestReloadWithoutFile(t *testing.T) {
	p, err := nri.New(fakehost.New(t).Config(), nil)
	if err != nil {
		t.Fatal(err)
	}
	var logs syncBuffer
	before := p.Config()
	reload("", p, slog.New(slog.NewTextHandler(&logs, nil)))
	if got := p.Config(); got.MaxDepth != before.MaxDepth || !strings.Contains(logs.String(), "no -config file") {
		t.Fatalf("config %+v, log %q", got, logs.String())
	}
}

// syncBuffer is a bytes.Buffer safe for a logger on another goroutine.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
