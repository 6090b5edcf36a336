// Command kcm-node-pause is the pod sandbox ("pause") process of the real
// node's images: it sleeps until SIGTERM or SIGINT and, as PID 1 of the
// pod's namespaces, reaps every child that exits. Built static
// (CGO_ENABLED=0) so the image needs no other file.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT, syscall.SIGCHLD)
	for s := range sigs {
		if s != syscall.SIGCHLD {
			os.Exit(0)
		}
		// Reap every exited child: one SIGCHLD may stand for several.
		for {
			pid, err := syscall.Wait4(-1, nil, syscall.WNOHANG, nil)
			if pid <= 0 || err != nil {
				break
			}
		}
	}
}
