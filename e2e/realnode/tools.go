//go:build tools

// The packages build.sh builds from the k8s.io/kubernetes module besides
// cmd/: agnhost (an e2e image) and upstream's e2e suite (go test -c). This
// file is never compiled; it keeps `go mod tidy` from dropping their
// dependencies from go.mod and go.sum.
package tools

import (
	_ "k8s.io/kubernetes/test/e2e"
	_ "k8s.io/kubernetes/test/e2e/apps"
	_ "k8s.io/kubernetes/test/e2e/framework/debug/init"
	_ "k8s.io/kubernetes/test/e2e/framework/metrics/init"
	_ "k8s.io/kubernetes/test/e2e/framework/node/init"
	_ "k8s.io/kubernetes/test/e2e/node"
	_ "k8s.io/kubernetes/test/e2e/scheduling"
	_ "k8s.io/kubernetes/test/images/agnhost"
)
