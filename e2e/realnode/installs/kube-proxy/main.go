// Command kcm-node-proxy is upstream kube-proxy, built from the pinned
// k8s.io/kubernetes module (1.34), for the real node's Services
// (e2e/realnode/node.sh with KCM_NODE_KUBE_PROXY): pods reach the API server
// through the `kubernetes` Service as on any cluster. Its flags are
// kube-proxy's own. kube-proxy may be three minors older than the API
// server, so one build serves the node of every supported minor.
package main

import (
	"os"

	"k8s.io/component-base/cli"
	"k8s.io/kubernetes/cmd/kube-proxy/app"
)

func main() {
	os.Exit(cli.Run(app.NewProxyCommand()))
}
