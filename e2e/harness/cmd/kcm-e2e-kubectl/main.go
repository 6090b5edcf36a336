// Command kcm-e2e-kubectl is upstream kubectl from the pinned module, built for
// `make run` so a developer can watch the local control plane without
// installing anything.
package main

import (
	"os"

	"k8s.io/component-base/cli"
	"k8s.io/kubectl/pkg/cmd"
)

func main() {
	os.Exit(cli.Run(cmd.NewDefaultKubectlCommand()))
}
