module github.com/kcm-rs/kcm-rs/e2e/localcp

go 1.24.0

// The oldest etcd a harness module file pins (Kubernetes 1.34's): each
// harness's own pin, at least this one, is what gets built.
require go.etcd.io/etcd/server/v3 v3.6.4
