// Command suites-etcd runs an embedded etcd on a free 127.0.0.1 port for
// upstream's integration tests (their framework reads the URL from
// KUBE_INTEGRATION_ETCD_URL), started as e2e/harness's kcm-e2e-apiserver
// starts its own (e2e/localcp).
//
// It prints one line, "READY <client url>", once etcd serves, and exits when
// its stdin closes or on SIGINT/SIGTERM, removing its data folder.
//
// usage: suites-etcd DATA_DIR
package main

import (
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/kcm-rs/kcm-rs/e2e/localcp"
)

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
	e, url, err := localcp.StartEtcd(dir, "upstream-suites")
	if err != nil {
		fail(err)
	}
	fmt.Printf("READY %s\n", url)
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
