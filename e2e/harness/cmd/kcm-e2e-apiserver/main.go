// Command kcm-e2e-apiserver runs a real kube-apiserver from the pinned
// k8s.io/kubernetes module over an embedded etcd, both on 127.0.0.1, and
// writes an admin kubeconfig once the server reports ready.
//
// It prints exactly one line on stdout when ready:
//
//	READY <kubeconfig path> <server url>
//
// and on any failure one line on stderr starting with "error:".
package main

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"go.etcd.io/etcd/server/v3/embed"
	"k8s.io/kubernetes/cmd/kube-apiserver/app"

	"github.com/kcm-rs/kcm-rs/e2e/harness/internal/certs"
	"github.com/kcm-rs/kcm-rs/e2e/harness/internal/lifecycle"
	"github.com/kcm-rs/kcm-rs/e2e/localcp"
)

func checkPortFree(port int) error {
	l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(port))
	if err != nil {
		return err
	}
	return l.Close()
}

func writeKubeconfig(path, server string, p *certs.PKI) error {
	read := func(f string) (string, error) {
		b, err := os.ReadFile(f)
		return base64.StdEncoding.EncodeToString(b), err
	}
	ca, err := read(p.CACert)
	if err != nil {
		return err
	}
	crt, err := read(p.AdminCert)
	if err != nil {
		return err
	}
	key, err := read(p.AdminKey)
	if err != nil {
		return err
	}
	body := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: kcm-e2e
  cluster:
    server: %s
    certificate-authority-data: %s
users:
- name: admin
  user:
    client-certificate-data: %s
    client-key-data: %s
contexts:
- name: kcm-e2e
  context:
    cluster: kcm-e2e
    user: admin
current-context: kcm-e2e
`, server, ca, crt, key)
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(body), 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

func waitReady(server string, p *certs.PKI, timeout time.Duration, failed <-chan error) error {
	caPEM, err := os.ReadFile(p.CACert)
	if err != nil {
		return err
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(caPEM)
	pair, err := tls.LoadX509KeyPair(p.AdminCert, p.AdminKey)
	if err != nil {
		return err
	}
	client := &http.Client{
		Timeout:   5 * time.Second,
		Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{pair}}},
	}
	deadline := time.Now().Add(timeout)
	last := "no answer yet"
	for time.Now().Before(deadline) {
		select {
		case err := <-failed:
			return fmt.Errorf("kube-apiserver exited: %v", err)
		default:
		}
		resp, err := client.Get(server + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			last = "readyz " + resp.Status
		} else {
			last = err.Error()
		}
		time.Sleep(200 * time.Millisecond)
	}
	return fmt.Errorf("not ready after %s (last: %s)", timeout, last)
}

func main() {
	dir := flag.String("dir", "", "working directory for etcd data and certificates (required)")
	kubeconfig := flag.String("kubeconfig", "", "where to write the admin kubeconfig (default <dir>/admin.kubeconfig)")
	port := flag.Int("port", 0, "secure port for kube-apiserver; 0 picks a free one")
	exitOnStdin := flag.Bool("exit-on-stdin-close", false, "exit when stdin closes (the parent died or let go)")
	keepDir := flag.Bool("keep-dir", false, "do not remove --dir on exit")
	readyTimeout := flag.Duration("ready-timeout", 90*time.Second, "how long to wait for /readyz")
	extra := flag.String("extra-args", "", "extra kube-apiserver flags, space separated")
	flag.Parse()
	if *dir == "" {
		lifecycle.Fatal("kcm-e2e-apiserver", errors.New("--dir is required"), "pass a scratch directory")
	}
	if *kubeconfig == "" {
		*kubeconfig = filepath.Join(*dir, "admin.kubeconfig")
	}
	if err := os.MkdirAll(*dir, 0o755); err != nil {
		lifecycle.Fatal("creating --dir", err, "")
	}
	var etcd *embed.Etcd
	cleanup := func() {
		if etcd != nil {
			etcd.Close()
		}
		if !*keepDir {
			_ = os.RemoveAll(*dir)
		}
	}
	lifecycle.OnExit(*exitOnStdin, cleanup)
	fail := func(what string, err error, hint string) {
		cleanup()
		lifecycle.Fatal(what, err, hint)
	}

	if *port == 0 {
		p, err := localcp.FreePort()
		if err != nil {
			fail("finding a free port", err, "")
		}
		*port = p
	} else if err := checkPortFree(*port); err != nil {
		fail(fmt.Sprintf("port %d is in use", *port), err, "stop what listens there or pass --port 0")
	}
	pki, err := certs.Generate(*dir)
	if err != nil {
		fail("generating certificates", err, "")
	}
	e, etcdURL, err := localcp.StartEtcd(filepath.Join(*dir, "etcd"), "kcm-e2e")
	if err != nil {
		fail("starting embedded etcd", err, "")
	}
	etcd = e
	server := "https://127.0.0.1:" + strconv.Itoa(*port)
	args := []string{
		"--etcd-servers=" + etcdURL,
		"--bind-address=127.0.0.1",
		"--advertise-address=127.0.0.1",
		"--secure-port=" + strconv.Itoa(*port),
		"--cert-dir=" + filepath.Join(*dir, "serving"),
		"--tls-cert-file=" + pki.ServingCert,
		"--tls-private-key-file=" + pki.ServingKey,
		"--client-ca-file=" + pki.CACert,
		"--service-account-key-file=" + pki.SAPub,
		"--service-account-signing-key-file=" + pki.SAKey,
		"--service-account-issuer=https://kubernetes.default.svc.cluster.local",
		"--authorization-mode=Node,RBAC",
		"--service-cluster-ip-range=10.0.0.0/24",
		// Loopback is not a valid endpoint address; nothing here needs the
		// in-cluster "kubernetes" Service endpoints.
		"--endpoint-reconciler-type=none",
		"--allow-privileged=true",
		"--profiling=false",
	}
	// No serviceaccount controller runs here to create the "default"
	// ServiceAccount, which that admission plugin requires for every pod. A
	// caller that runs one (the real node, for pods with in-cluster
	// credentials) decides admission itself: the two flags may not overlap.
	if !strings.Contains(*extra, "-admission-plugins") {
		args = append(args, "--disable-admission-plugins=ServiceAccount")
	}
	if *extra != "" {
		args = append(args, strings.Fields(*extra)...)
	}
	failed := make(chan error, 1)
	go func() {
		cmd := app.NewAPIServerCommand()
		cmd.SetArgs(args)
		err := cmd.Execute()
		if err == nil {
			err = errors.New("exited")
		}
		failed <- err
	}()
	if err := waitReady(server, pki, *readyTimeout, failed); err != nil {
		fail("kube-apiserver did not become healthy", err, "see its log above")
	}
	if err := writeKubeconfig(*kubeconfig, server, pki); err != nil {
		fail("writing kubeconfig", err, "")
	}
	fmt.Printf("READY %s %s\n", *kubeconfig, server)
	err = <-failed
	cleanup()
	lifecycle.Fatal("kube-apiserver stopped", err, "")
}
