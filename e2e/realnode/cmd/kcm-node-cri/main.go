// Command kcm-node-cri removes every pod sandbox and container of a CRI
// runtime (the real node's containerd), as node.sh down does before it stops
// containerd: StopPodSandbox runs the CNI DEL of each pod (its veth, its IP,
// its network namespace), so nothing of the pods' networks outlives them.
//
// usage: kcm-node-cri --endpoint /path/to/containerd.sock cleanup|count
//
// count prints "<sandboxes> <containers>".
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

func main() {
	endpoint := flag.String("endpoint", "", "the CRI socket (a path)")
	timeout := flag.Duration("timeout", 60*time.Second, "how long the whole cleanup may take")
	flag.Parse()
	if *endpoint == "" || flag.NArg() != 1 {
		fmt.Fprintln(os.Stderr, "usage: kcm-node-cri --endpoint SOCKET cleanup|count")
		os.Exit(2)
	}
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	conn, err := grpc.NewClient("unix://"+*endpoint, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		fatal(err)
	}
	defer conn.Close()
	rt := runtimeapi.NewRuntimeServiceClient(conn)
	switch flag.Arg(0) {
	case "count":
		sb, ctrs, err := list(ctx, rt)
		if err != nil {
			fatal(err)
		}
		fmt.Println(len(sb), len(ctrs))
	case "cleanup":
		if err := cleanup(ctx, rt); err != nil {
			fatal(err)
		}
	default:
		fmt.Fprintf(os.Stderr, "error: unknown command %q (cleanup or count)\n", flag.Arg(0))
		os.Exit(2)
	}
}

func fatal(err error) {
	fmt.Fprintf(os.Stderr, "error: kcm-node-cri: %v\n", err)
	os.Exit(1)
}

func list(ctx context.Context, rt runtimeapi.RuntimeServiceClient) ([]*runtimeapi.PodSandbox, []*runtimeapi.Container, error) {
	sb, err := rt.ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{})
	if err != nil {
		return nil, nil, fmt.Errorf("listing pod sandboxes: %w", err)
	}
	ctrs, err := rt.ListContainers(ctx, &runtimeapi.ListContainersRequest{})
	if err != nil {
		return nil, nil, fmt.Errorf("listing containers: %w", err)
	}
	return sb.Items, ctrs.Containers, nil
}

// cleanup stops and removes every container, then every sandbox; it goes
// on past a failure and reports the first one at the end.
func cleanup(ctx context.Context, rt runtimeapi.RuntimeServiceClient) error {
	sandboxes, containers, err := list(ctx, rt)
	if err != nil {
		return err
	}
	var first error
	keep := func(what string, err error) {
		if err != nil {
			fmt.Fprintf(os.Stderr, "%s: %v\n", what, err)
			if first == nil {
				first = fmt.Errorf("%s: %w", what, err)
			}
		}
	}
	for _, c := range containers {
		_, err := rt.StopContainer(ctx, &runtimeapi.StopContainerRequest{ContainerId: c.Id, Timeout: 0})
		keep("stopping container "+c.Id, err)
		_, err = rt.RemoveContainer(ctx, &runtimeapi.RemoveContainerRequest{ContainerId: c.Id})
		keep("removing container "+c.Id, err)
	}
	for _, s := range sandboxes {
		_, err := rt.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: s.Id})
		keep("stopping pod sandbox "+s.Id, err)
		_, err = rt.RemovePodSandbox(ctx, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: s.Id})
		keep("removing pod sandbox "+s.Id, err)
	}
	fmt.Fprintf(os.Stderr, "removed %d containers and %d pod sandboxes\n", len(containers), len(sandboxes))
	return first
}
