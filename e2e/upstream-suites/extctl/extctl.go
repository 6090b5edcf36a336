// Package extctl runs the controller that one of upstream's integration tests
// would start in its own process as an external process instead: kcm-rs or
// upstream kube-controller-manager, chosen by $KCM_UNDER_TEST, against the
// test's in-process API server.
//
// The patches under ../patches replace the tests' in-process controller
// starts with calls into this package, and their metric checks with
// CounterValue, which scrapes the process's /metrics.
//
// Every start writes a kubeconfig from the test's rest.Config (bearer token,
// CA data, TLS server name), passes the feature gates the test set explicitly
// (those whose value differs from the default at the current emulation
// version) as --feature-gates and the test's emulation version, when it
// differs from the binary's, as --emulated-version. A restart inside a test
// therefore sees the gates of that moment.
//
// Environment:
//
//	KCM_UNDER_TEST       path of the binary to run (required)
//	KCM_UNDER_TEST_KIND  kcm-rs or kcm; default: kcm-rs when the binary's
//	                     name contains "kcm-rs", else kcm
//	KCM_UNDER_TEST_ARGS  extra flags, space separated, appended to every start
//	KCM_UNDER_TEST_IGNORE_EMULATION  set: never pass --emulated-version (to
//	                     see what a binary that refuses an older minor does
//	                     with the rest of a test; not a faithful run)
//	KCM_SUITES_LOG_DIR   where kubeconfigs and process logs go (default: a
//	                     temporary folder)
package extctl

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"encoding/base64"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	restclient "k8s.io/client-go/rest"
	basemetrics "k8s.io/component-base/metrics"

	"github.com/kcm-rs/kcm-rs/e2e/localcp"
)

// NotRunnable starts the skip message of a test that cannot run against an
// external process; the report counts such skips apart.
const NotRunnable = "extctl: not runnable against an external controller: "

// Kind is the flavour of the binary under test: the flags differ a little.
type Kind string

const (
	KindKcmRs Kind = "kcm-rs"
	KindKCM   Kind = "kcm"
)

// The emulation version before any test changed it: the binary's version.
var initialEmulation = utilfeature.DefaultMutableFeatureGate.EmulationVersion()

// Option adds flags for one controller, per kind.
type Option func(k Kind) []string

// PodGC passes the test's pod GC settings: the terminated-pod threshold to
// both kinds; the period and the orphan quarantine only to kcm-rs (hidden
// flags); KCM has them as constants (20 s, 40 s) and no flag.
func PodGC(threshold int, period, quarantine time.Duration) Option {
	return func(k Kind) []string {
		f := []string{"--terminated-pod-gc-threshold=" + strconv.Itoa(threshold)}
		if k == KindKcmRs {
			f = append(f, "--pod-gc-period="+period.String(), "--pod-gc-quarantine="+quarantine.String())
		}
		return f
	}
}

// StalePodDisruptionTimeout passes the disruption controller's timeout for a
// stale DisruptionTarget condition to kcm-rs (hidden flag); KCM's is a
// 2-minute constant.
func StalePodDisruptionTimeout(d time.Duration) Option {
	return func(k Kind) []string {
		if k == KindKcmRs {
			return []string{"--stale-pod-disruption-timeout=" + d.String()}
		}
		return nil
	}
}

// Controller is an external controller that is not running yet: Run or
// Start starts it.
type Controller struct {
	tb         testing.TB
	cfg        *restclient.Config
	controller string
	opts       []Option
}

// NewController returns the external controller `controller` (a KCM
// controller name) against cfg; cfg is copied now, so a QPS the test sets
// for the controller's client is kept.
func NewController(tb testing.TB, cfg *restclient.Config, controller string, opts ...Option) *Controller {
	return &Controller{tb: tb, cfg: restclient.CopyConfig(cfg), controller: controller, opts: opts}
}

// Run starts the process (with `workers` concurrent syncs where the
// controller has such a flag), blocks until ctx is done, then stops it. For
// tests that run the in-process controller as `go c.Run(ctx)`.
//
// The test may end before the process is ready (it does not wait for a
// controller it runs in a goroutine), so Run reports to the test only while
// ctx is live: testing panics on a report after the test completed.
func (c *Controller) Run(ctx context.Context, workers ...int) {
	p, err := start(c.tb, c.cfg, c.controller, c.opts, workers, ctx)
	if err != nil {
		if ctx.Err() == nil {
			c.tb.Error(err)
		}
		return
	}
	<-ctx.Done()
	p.Stop()
}

// Start starts the process, waits until it is ready and returns; it stops
// when ctx is done or when the test ends.
func (c *Controller) Start(ctx context.Context, workers ...int) *Process {
	c.tb.Helper()
	p, err := start(c.tb, c.cfg, c.controller, c.opts, workers, nil)
	if err != nil {
		c.tb.Fatal(err)
	}
	go func() {
		select {
		case <-ctx.Done():
			p.Stop()
		case <-p.exited:
		}
	}()
	return p
}

// StartAndWait starts the process as Start, and returns a cancel function
// that cancels ctx's cancel and stops the process before it returns (a test
// that restarts the controller never has two running).
func (c *Controller) StartAndWait(ctx context.Context, cancel context.CancelFunc, workers ...int) context.CancelFunc {
	c.tb.Helper()
	p := c.Start(ctx, workers...)
	return func() {
		cancel()
		p.Stop()
	}
}

// Process is a running controller process.
type Process struct {
	name     string
	kind     Kind
	cmd      *exec.Cmd
	stdin    io.WriteCloser
	port     int
	logPath  string
	exited   chan struct{}
	synced   chan struct{}
	stopOnce sync.Once
	stopped  atomic.Bool
}

var (
	mu      sync.Mutex
	running = map[*Process]bool{}
	// Counter values of stopped processes (and minus the values a running
	// process had when ResetMetrics was called), by sample key.
	carried = map[string]float64{}
	seq     atomic.Int64
)

func kindOf(bin string) Kind {
	switch os.Getenv("KCM_UNDER_TEST_KIND") {
	case "kcm-rs":
		return KindKcmRs
	case "kcm":
		return KindKCM
	}
	if strings.Contains(filepath.Base(bin), "kcm-rs") {
		return KindKcmRs
	}
	return KindKCM
}

func logDir() string {
	if d := os.Getenv("KCM_SUITES_LOG_DIR"); d != "" {
		_ = os.MkdirAll(d, 0o755)
		return d
	}
	return os.TempDir()
}

// GateFlags returns the --feature-gates value (gates the test set explicitly
// to a value other than their default at the current emulation version) and
// the --emulated-version value ("" when the test did not change it).
func GateFlags() (gates, emulated string) {
	g := utilfeature.DefaultMutableFeatureGate
	var kv []string
	for name, spec := range g.GetAll() {
		if name == "AllAlpha" || name == "AllBeta" || !g.ExplicitlySet(name) {
			continue
		}
		if v := g.Enabled(name); v != spec.Default {
			kv = append(kv, fmt.Sprintf("%s=%t", name, v))
		}
	}
	sort.Strings(kv)
	if ev := g.EmulationVersion(); !ev.EqualTo(initialEmulation) {
		emulated = fmt.Sprintf("%d.%d", ev.Major(), ev.Minor())
	}
	return strings.Join(kv, ","), emulated
}

var nameRe = regexp.MustCompile(`[^A-Za-z0-9_.-]+`)

func writeKubeconfig(path string, cfg *restclient.Config) error {
	ca := cfg.TLSClientConfig.CAData
	if len(ca) == 0 && cfg.TLSClientConfig.CAFile != "" {
		b, err := os.ReadFile(cfg.TLSClientConfig.CAFile)
		if err != nil {
			return err
		}
		ca = b
	}
	var b strings.Builder
	fmt.Fprintf(&b, "apiVersion: v1\nkind: Config\nclusters:\n- name: test\n  cluster:\n    server: %s\n", cfg.Host)
	if len(ca) > 0 {
		fmt.Fprintf(&b, "    certificate-authority-data: %s\n", base64.StdEncoding.EncodeToString(ca))
	}
	if cfg.TLSClientConfig.ServerName != "" {
		fmt.Fprintf(&b, "    tls-server-name: %s\n", cfg.TLSClientConfig.ServerName)
	}
	if cfg.TLSClientConfig.Insecure {
		b.WriteString("    insecure-skip-tls-verify: true\n")
	}
	b.WriteString("users:\n- name: test\n  user:\n")
	if cfg.BearerToken != "" {
		fmt.Fprintf(&b, "    token: %s\n", cfg.BearerToken)
	}
	if len(cfg.TLSClientConfig.CertData) > 0 {
		fmt.Fprintf(&b, "    client-certificate-data: %s\n    client-key-data: %s\n",
			base64.StdEncoding.EncodeToString(cfg.TLSClientConfig.CertData),
			base64.StdEncoding.EncodeToString(cfg.TLSClientConfig.KeyData))
	}
	b.WriteString("contexts:\n- name: test\n  context:\n    cluster: test\n    user: test\ncurrent-context: test\n")
	return os.WriteFile(path, []byte(b.String()), 0o600)
}

var insecure = &http.Client{
	Timeout:   5 * time.Second,
	Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}, // the process's self-signed serving certificate
}

func (p *Process) get(path string) (int, []byte, error) {
	req, _ := http.NewRequest("GET", fmt.Sprintf("https://127.0.0.1:%d%s", p.port, path), nil)
	req.Header.Set("Accept", "text/plain;version=0.0.4")
	resp, err := insecure.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	return resp.StatusCode, body, err
}

func tail(path string, n int) string {
	b, _ := os.ReadFile(path)
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// start starts the process and waits until it is ready. With runCtx (Run),
// it logs to the process's log file only and leaves stopping to the caller.
func start(tb testing.TB, cfg *restclient.Config, controller string, opts []Option, workers []int, runCtx context.Context) (*Process, error) {
	bin := os.Getenv("KCM_UNDER_TEST")
	if bin == "" {
		return nil, fmt.Errorf("extctl: KCM_UNDER_TEST is not set (the path of kcm-rs or of kube-controller-manager)")
	}
	kind := kindOf(bin)
	n := seq.Add(1)
	base := filepath.Join(logDir(), fmt.Sprintf("%s-%03d", nameRe.ReplaceAllString(tb.Name(), "_"), n))
	kubeconfig := base + ".kubeconfig"
	if err := writeKubeconfig(kubeconfig, cfg); err != nil {
		return nil, fmt.Errorf("extctl: writing %s: %w", kubeconfig, err)
	}
	port, err := localcp.FreePort()
	if err != nil {
		return nil, err
	}
	var args []string
	if strings.Contains(filepath.Base(bin), "kcm-e2e-controller-manager") {
		args = append(args, "--exit-on-stdin-close")
	}
	args = append(args,
		"--kubeconfig="+kubeconfig,
		"--controllers="+controller,
		"--leader-elect=false",
		"--bind-address=127.0.0.1",
		"--secure-port="+strconv.Itoa(port),
		"--authorization-always-allow-paths=/healthz,/readyz,/livez,/metrics",
	)
	gates, emulated := GateFlags()
	if gates != "" {
		args = append(args, "--feature-gates="+gates)
	}
	if emulated != "" && os.Getenv("KCM_UNDER_TEST_IGNORE_EMULATION") == "" {
		args = append(args, "--emulated-version="+emulated)
	}
	if cfg.QPS > 0 {
		args = append(args, fmt.Sprintf("--kube-api-qps=%g", cfg.QPS), fmt.Sprintf("--kube-api-burst=%d", cfg.Burst))
	}
	if len(workers) > 0 {
		switch controller {
		case "job-controller":
			args = append(args, "--concurrent-job-syncs="+strconv.Itoa(workers[0]))
		case "disruption-controller": // KCM 1.37's flag (1.37's tests pass workers)
			args = append(args, "--concurrent-disruption-syncs="+strconv.Itoa(workers[0]))
		}
	}
	for _, o := range opts {
		args = append(args, o(kind)...)
	}
	args = append(args, strings.Fields(os.Getenv("KCM_UNDER_TEST_ARGS"))...)

	logPath := base + ".log"
	logFile, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(logFile, "# %s %s\n", bin, strings.Join(args, " "))
	cmd := exec.Command(bin, args...)
	// The process dies with the test binary, whatever ends it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	cmd.Stderr = cmd.Stdout
	p := &Process{name: controller, kind: kind, cmd: cmd, stdin: stdin, port: port, logPath: logPath,
		exited: make(chan struct{}), synced: make(chan struct{})}
	if err := cmd.Start(); err != nil {
		logFile.Close()
		return nil, fmt.Errorf("extctl: starting %s: %w", bin, err)
	}
	copied := make(chan struct{})
	go func() {
		defer close(copied)
		sc := bufio.NewScanner(out)
		sc.Buffer(make([]byte, 64*1024), 4*1024*1024)
		seen := false
		for sc.Scan() {
			line := sc.Bytes()
			logFile.Write(line)
			logFile.Write([]byte{'\n'})
			if !seen && bytes.Contains(line, []byte("Caches are synced")) {
				seen = true
				close(p.synced)
			}
		}
	}()
	go func() {
		<-copied
		_ = cmd.Wait()
		logFile.Close()
		close(p.exited)
	}()
	if runCtx == nil {
		tb.Logf("extctl: started %s %s (pid %d), log %s; flags: %s", kind, controller, cmd.Process.Pid, logPath, strings.Join(args, " "))
	}
	var cancelled <-chan struct{}
	if runCtx != nil {
		cancelled = runCtx.Done()
	}
	if err := p.waitReady(60*time.Second, cancelled); err != nil {
		p.Stop()
		return nil, fmt.Errorf("extctl: %s %s did not become ready: %v\n--- last lines of %s:\n%s", kind, controller, err, logPath, tail(logPath, 25))
	}
	mu.Lock()
	running[p] = true
	mu.Unlock()
	if runCtx == nil {
		tb.Cleanup(p.Stop)
	} else if runCtx.Err() != nil {
		p.Stop()
		return nil, runCtx.Err()
	}
	return p, nil
}

// waitReady waits for kcm-rs's /readyz (every informer synced), or for KCM's
// /healthz and its "Caches are synced" log line (KCM has no readiness for
// its informers).
func (p *Process) waitReady(timeout time.Duration, cancelled <-chan struct{}) error {
	deadline := time.Now().Add(timeout)
	path := "/readyz"
	if p.kind == KindKCM {
		path = "/healthz"
	}
	last := "no answer"
	for {
		select {
		case <-p.exited:
			return fmt.Errorf("the process exited (%v)", p.cmd.ProcessState)
		case <-cancelled:
			return fmt.Errorf("the test's context ended first")
		default:
		}
		code, body, err := p.get(path)
		if err == nil && code == 200 {
			break
		}
		if err != nil {
			last = err.Error()
		} else {
			last = fmt.Sprintf("%d %s", code, strings.TrimSpace(string(body)))
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s not ready within %v (last: %s)", path, timeout, last)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if p.kind == KindKCM {
		select {
		case <-p.synced:
		case <-p.exited:
			return fmt.Errorf("the process exited (%v)", p.cmd.ProcessState)
		case <-time.After(20 * time.Second):
			// Proceed: the controller may log under another message.
		}
	}
	return nil
}

// Stop reads the process's counters for later checks, then kills it
// (SIGKILL) and waits for it to exit. Not SIGTERM: kcm-rs stops serving
// /metrics at SIGTERM and then drains its in-flight syncs, so what a drain
// counts would be lost to the checks (KCM exits at SIGTERM without a drain,
// so both stop alike). Idempotent.
func (p *Process) Stop() {
	p.stopOnce.Do(func() {
		mu.Lock()
		wasRunning := running[p]
		delete(running, p)
		mu.Unlock()
		var last map[string]float64
		if wasRunning {
			last, _ = p.scrape()
		}
		p.stopped.Store(true)
		_ = p.cmd.Process.Kill()
		<-p.exited
		_ = p.stdin.Close()
		mu.Lock()
		for k, v := range last {
			carried[k] += v
		}
		mu.Unlock()
	})
}

// sampleKey is a sample's family name and its sorted label pairs.
func sampleKey(name string, labels map[string]string) string {
	keys := make([]string, 0, len(labels))
	for k := range labels {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	b.WriteString(name)
	b.WriteByte('{')
	for i, k := range keys {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, "%s=%q", k, labels[k])
	}
	b.WriteByte('}')
	return b.String()
}

// scrape reads the process's /metrics (Prometheus text format) into sample
// key -> value.
func (p *Process) scrape() (map[string]float64, error) {
	code, body, err := p.get("/metrics")
	if err != nil {
		return nil, err
	}
	if code != 200 {
		return nil, fmt.Errorf("GET /metrics: %d %s", code, strings.TrimSpace(string(body)))
	}
	return parseText(body)
}

func parseText(body []byte) (map[string]float64, error) {
	out := map[string]float64{}
	for _, line := range strings.Split(string(body), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || line[0] == '#' {
			continue
		}
		name, labels, rest, err := parseSample(line)
		if err != nil {
			return nil, fmt.Errorf("parsing %q: %w", line, err)
		}
		f := strings.Fields(rest)
		if len(f) == 0 {
			return nil, fmt.Errorf("parsing %q: no value", line)
		}
		v, err := strconv.ParseFloat(f[0], 64)
		if err != nil {
			return nil, fmt.Errorf("parsing %q: %w", line, err)
		}
		out[sampleKey(name, labels)] = v
	}
	return out, nil
}

func parseSample(line string) (string, map[string]string, string, error) {
	i := strings.IndexAny(line, "{ \t")
	if i < 0 {
		return "", nil, "", fmt.Errorf("no value")
	}
	name := line[:i]
	labels := map[string]string{}
	if line[i] != '{' {
		return name, labels, line[i:], nil
	}
	s := line[i+1:]
	for {
		s = strings.TrimLeft(s, " ,")
		if strings.HasPrefix(s, "}") {
			return name, labels, s[1:], nil
		}
		eq := strings.IndexByte(s, '=')
		if eq < 0 || len(s) < eq+2 || s[eq+1] != '"' {
			return "", nil, "", fmt.Errorf("bad label")
		}
		key := strings.TrimSpace(s[:eq])
		s = s[eq+2:]
		var val strings.Builder
		j := 0
		for ; j < len(s) && s[j] != '"'; j++ {
			if s[j] == '\\' && j+1 < len(s) {
				j++
				switch s[j] {
				case 'n':
					val.WriteByte('\n')
				default:
					val.WriteByte(s[j])
				}
				continue
			}
			val.WriteByte(s[j])
		}
		if j >= len(s) {
			return "", nil, "", fmt.Errorf("unterminated label value")
		}
		labels[key] = val.String()
		s = s[j+1:]
	}
}

func runningProcesses() []*Process {
	mu.Lock()
	defer mu.Unlock()
	var ps []*Process
	for p := range running {
		ps = append(ps, p)
	}
	return ps
}

// CounterValue is what testutil.GetCounterMetricValue(vec.WithLabelValues(
// labelValues...)) reads in process, read from the controller processes: the
// counters of the running ones plus those of the ones stopped since the last
// ResetMetrics. vec must be registered in the test process (the patches call
// the controller's metrics.Register()): its label names come from there.
func CounterValue(vec *basemetrics.CounterVec, labelValues ...string) (float64, error) {
	if !vec.IsCreated() {
		return 0, fmt.Errorf("extctl: %s is not registered in the test process, so its label names are unknown", vec.Name)
	}
	child, ok := vec.WithLabelValues(labelValues...).(interface{ Write(*dto.Metric) error })
	if !ok {
		return 0, fmt.Errorf("extctl: %s: no metric for labels %q", vec.FQName(), labelValues)
	}
	m := &dto.Metric{}
	if err := child.Write(m); err != nil {
		return 0, err
	}
	labels := map[string]string{}
	for _, lp := range m.Label {
		labels[lp.GetName()] = lp.GetValue()
	}
	key := sampleKey(vec.FQName(), labels)
	mu.Lock()
	v := carried[key]
	mu.Unlock()
	for _, p := range runningProcesses() {
		s, err := p.scrape()
		if err != nil {
			if p.stopped.Load() {
				continue
			}
			return 0, fmt.Errorf("extctl: scraping %s's /metrics: %w", p.name, err)
		}
		v += s[key]
	}
	return v, nil
}

// ResetMetrics is the tests' resetMetrics for the processes: counters read
// by CounterValue start from zero again.
func ResetMetrics() {
	mu.Lock()
	carried = map[string]float64{}
	mu.Unlock()
	for _, p := range runningProcesses() {
		if s, err := p.scrape(); err == nil {
			mu.Lock()
			for k, v := range s {
				carried[k] -= v
			}
			mu.Unlock()
		}
	}
}
