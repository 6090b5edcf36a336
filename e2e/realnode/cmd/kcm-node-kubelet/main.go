// Command kcm-node-kubelet is upstream kubelet, built from the pinned
// k8s.io/kubernetes module of one minor, for the real node of
// e2e/realnode (node.sh runs it; its flags are the kubelet's own).
package main

import (
	"context"
	"os"

	"k8s.io/component-base/cli"
	"k8s.io/kubernetes/cmd/kubelet/app"
)

func main() {
	os.Exit(cli.Run(app.NewKubeletCommand(context.Background())))
}
