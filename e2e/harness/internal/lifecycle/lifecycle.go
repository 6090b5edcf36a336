// Package lifecycle ties a harness process to the process that started it, so
// that nothing is left running when a test binary ends, pass, fail or panic.
package lifecycle

import (
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
)

// Fatal prints one clear error line and exits non-zero.
func Fatal(what string, err error, hint string) {
	if hint != "" {
		fmt.Fprintf(os.Stderr, "error: %s: %v (%s)\n", what, err, hint)
	} else {
		fmt.Fprintf(os.Stderr, "error: %s: %v\n", what, err)
	}
	os.Exit(1)
}

// ExitOnStdinClose exits when stdin reaches EOF (the parent closed its end of
// the pipe or died) and leaves SIGTERM and SIGINT to the program, so a program
// with its own graceful shutdown (kube-controller-manager's) keeps it.
func ExitOnStdinClose() {
	go func() {
		_, _ = io.Copy(io.Discard, os.Stdin)
		fmt.Fprintln(os.Stderr, "shutting down: stdin closed")
		os.Exit(0)
	}()
}

// OnExit runs cleanup and exits when stdin reaches EOF (if watchStdin is set:
// the parent closed its end of the pipe, which the kernel also does when the
// parent dies for any reason) or when SIGINT or SIGTERM arrives.
func OnExit(watchStdin bool, cleanup func()) {
	done := make(chan string, 2)
	if watchStdin {
		go func() {
			_, _ = io.Copy(io.Discard, os.Stdin)
			done <- "stdin closed"
		}()
	}
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	go func() {
		s := <-sigs
		done <- "signal " + s.String()
	}()
	go func() {
		why := <-done
		fmt.Fprintf(os.Stderr, "shutting down: %s\n", why)
		cleanup()
		os.Exit(0)
	}()
}
