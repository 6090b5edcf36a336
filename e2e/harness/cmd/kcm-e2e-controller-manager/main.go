// Command kcm-e2e-controller-manager is upstream kube-controller-manager, built
// from the pinned k8s.io/kubernetes module, with one addition: it exits when
// its stdin closes, so a test harness never leaves it running (signals are
// KCM's own).
//
// Usage: kcm-e2e-controller-manager [--exit-on-stdin-close] <kube-controller-manager flags>
package main

import (
	"os"

	"k8s.io/component-base/cli"
	"k8s.io/kubernetes/cmd/kube-controller-manager/app"

	"github.com/kcm-rs/kcm-rs/e2e/harness/internal/lifecycle"
)

func main() {
	args := os.Args[1:]
	watch := false
	if len(args) > 0 && args[0] == "--exit-on-stdin-close" {
		watch = true
		args = args[1:]
	}
	if watch {
		// SIGTERM stays KCM's: tests of its graceful shutdown need it.
		lifecycle.ExitOnStdinClose()
	}
	cmd := app.NewControllerManagerCommand()
	cmd.SetArgs(args)
	os.Exit(cli.Run(cmd))
}
