// Command kcm-node-scheduler is upstream kube-scheduler, built from the
// pinned k8s.io/kubernetes module of one minor, for the real node of
// e2e/realnode (node.sh runs it; its flags are the scheduler's own).
package main

import (
	"os"

	"k8s.io/component-base/cli"
	"k8s.io/kubernetes/cmd/kube-scheduler/app"
)

func main() {
	os.Exit(cli.Run(app.NewSchedulerCommand()))
}
