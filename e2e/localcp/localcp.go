// Package localcp holds what both Go harnesses need to stand up a local
// control plane: e2e/harness (kcm-e2e-apiserver) and e2e/upstream-suites
// (suites-etcd, extctl). Each imports it through a replace directive, so
// it builds against the etcd and Go versions of the harness's own module
// file for each Kubernetes minor.
package localcp

import (
	"errors"
	"net"
	"net/url"
	"strconv"
	"time"

	"go.etcd.io/etcd/server/v3/embed"
)

// FreePort returns a TCP port on 127.0.0.1 that was free a moment ago.
func FreePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// StartEtcd runs an embedded single-member etcd named name with its data in
// dir, serving clients and its peer on free 127.0.0.1 ports, and returns it
// with its client URL once it is ready (within 60 s).
func StartEtcd(dir, name string) (*embed.Etcd, string, error) {
	clientPort, err := FreePort()
	if err != nil {
		return nil, "", err
	}
	peerPort, err := FreePort()
	if err != nil {
		return nil, "", err
	}
	cfg := embed.NewConfig()
	cfg.Name = name
	cfg.Dir = dir
	cfg.LogLevel = "error"
	cfg.Logger = "zap"
	cu, _ := url.Parse("http://127.0.0.1:" + strconv.Itoa(clientPort))
	pu, _ := url.Parse("http://127.0.0.1:" + strconv.Itoa(peerPort))
	cfg.ListenClientUrls = []url.URL{*cu}
	cfg.AdvertiseClientUrls = []url.URL{*cu}
	cfg.ListenPeerUrls = []url.URL{*pu}
	cfg.AdvertisePeerUrls = []url.URL{*pu}
	cfg.InitialCluster = cfg.InitialClusterFromName(cfg.Name)
	// Tests write thousands of small objects; fsync per write would dominate.
	cfg.UnsafeNoFsync = true
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		return nil, "", err
	}
	select {
	case <-e.Server.ReadyNotify():
		return e, cu.String(), nil
	case <-time.After(60 * time.Second):
		e.Close()
		return nil, "", errors.New("etcd did not become ready within 60s")
	}
}
