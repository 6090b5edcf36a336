// Command suites-etcd runs an embedded etcd on a free 127.0.0.1 port for
// upstream's integration tests (their framework reads the URL from
// KUBE_INTEGRATION_ETCD_URL), as e2e/harness's kcm-e2e-apiserver embeds one.
//
// It prints one line, "READY <client url>", once etcd serves, and exits when
// its stdin closes or on SIGINT/SIGTERM, removing its data folder.
//
// usage: suites-etcd DATA_DIR
package main

import (
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	"go.etcd.io/etcd/server/v3/embed"
)

func freePort() int {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fail(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

func fail(err error) {
	fmt.Fprintf(os.Stderr, "error: suites-etcd: %v\n", err)
	os.Exit(1)
}

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: suites-etcd DATA_DIR")
		os.Exit(2)
	}
	dir := os.Args[1]
	_ = os.RemoveAll(dir)
	cu, _ := url.Parse("http://127.0.0.1:" + strconv.Itoa(freePort()))
	pu, _ := url.Parse("http://127.0.0.1:" + strconv.Itoa(freePort()))
	cfg := embed.NewConfig()
	cfg.Name = "upstream-suites"
	cfg.Dir = dir
	cfg.LogLevel = "error"
	cfg.Logger = "zap"
	cfg.ListenClientUrls = []url.URL{*cu}
	cfg.AdvertiseClientUrls = []url.URL{*cu}
	cfg.ListenPeerUrls = []url.URL{*pu}
	cfg.AdvertisePeerUrls = []url.URL{*pu}
	cfg.InitialCluster = cfg.InitialClusterFromName(cfg.Name)
	// Each test writes many small objects; an fsync per write would dominate.
	cfg.UnsafeNoFsync = true
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		fail(err)
	}
	select {
	case <-e.Server.ReadyNotify():
	case <-time.After(60 * time.Second):
		fail(fmt.Errorf("etcd did not become ready within 60s"))
	}
	fmt.Printf("READY %s\n", cu.String())
	done := make(chan struct{}, 2)
	go func() {
		_, _ = io.Copy(io.Discard, os.Stdin)
		done <- struct{}{}
	}()
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	go func() {
		<-sigs
		done <- struct{}{}
	}()
	select {
	case <-done:
	case err := <-e.Err():
		fail(err)
	}
	e.Close()
	_ = os.RemoveAll(dir)
}
