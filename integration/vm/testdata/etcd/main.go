// Command etcd runs a single etcd member for the VM suite's control plane
// (integration/vm/cluster_test.go builds it in a module of its own, next to
// go.etcd.io/etcd/server/v3). It serves clients on -client and peers on
// -peer, keeps its data in -data-dir, prints "etcd ready" once it serves,
// and stops on SIGTERM or SIGINT. Not for anything but tests: no TLS, no
// fsync.
package main

import (
	"flag"
	"fmt"
	"net/url"
	"os"
	"os/signal"
	"syscall"

	"go.etcd.io/etcd/server/v3/embed"
)

func main() {
	dataDir := flag.String("data-dir", "", "data directory")
	client := flag.String("client", "http://127.0.0.1:2379", "client URL")
	peer := flag.String("peer", "http://127.0.0.1:2380", "peer URL")
	flag.Parse()
	if err := run(*dataDir, *client, *peer); err != nil {
		fmt.Fprintln(os.Stderr, "etcd:", err)
		os.Exit(1)
	}
}

func run(dataDir, client, peer string) error {
	cu, err := url.Parse(client)
	if err != nil {
		return fmt.Errorf("client URL %q: %w", client, err)
	}
	pu, err := url.Parse(peer)
	if err != nil {
		return fmt.Errorf("peer URL %q: %w", peer, err)
	}
	cfg := embed.NewConfig()
	cfg.Name, cfg.Dir, cfg.LogLevel, cfg.UnsafeNoFsync = "cgd", dataDir, "warn", true
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{*cu}, []url.URL{*cu}
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{*pu}, []url.URL{*pu}
	cfg.InitialCluster = cfg.InitialClusterFromName(cfg.Name)
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		return fmt.Errorf("start: %w", err)
	}
	defer e.Close()
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGTERM, syscall.SIGINT)
	select {
	case <-e.Server.ReadyNotify():
		fmt.Println("etcd ready")
	case err := <-e.Err():
		return fmt.Errorf("serve: %w", err)
	case <-stop:
		return nil
	}
	select {
	case err := <-e.Err():
		return fmt.Errorf("serve: %w", err)
	case <-stop:
		return nil
	}
}
