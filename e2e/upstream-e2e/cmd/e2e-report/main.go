// Command e2e-report renders the Ginkgo JSON reports of upstream's e2e
// suites run on the real node (run.sh) as markdown: per Kubernetes minor
// and suite, every spec with its result under upstream KCM and under
// kcm-rs, and for every spec whose results differ or that failed for both,
// the reason: a note from notes.tsv when there is one, else the first line
// of the failing side's failure (or the skip reason). It also checks the
// bar: every spec KCM passed passed for kcm-rs.
//
// usage:
//
//	e2e-report -results DIR -out DIR [-notes notes.tsv] 1.N...
//	e2e-report -results DIR -bar 1.N SUITE
//
// DIR/<minor>/<suite>/<impl>/ holds report.json (--ginkgo.json-report),
// focus and skip (the regular expressions the run used, one line each)
// and meta (key=value lines: wall, procs, rc, build, when).
package main

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"time"
)

var suites = []string{"job", "disruption", "taint-eviction", "podgc"}
var impls = []string{"kcm", "kcm-rs"}

// suiteTitle: what each suite runs, for the tables' headings.
var suiteTitle = map[string]string{
	"job":            "`[sig-apps] Job`",
	"disruption":     "`[sig-apps] DisruptionController`",
	"taint-eviction": "`[sig-node] NoExecuteTaintManager`",
	"podgc":          "`[sig-node] Pod garbage collector`",
}

type location struct {
	FileName   string
	LineNumber int
}

type failure struct {
	Message  string
	Location location
}

type specReport struct {
	ContainerHierarchyTexts []string
	LeafNodeType            string
	LeafNodeText            string
	State                   string
	RunTime                 time.Duration
	Failure                 failure
	NumAttempts             int
}

type suiteReport struct {
	SpecReports []specReport
}

type spec struct {
	state   string // passed, failed, skipped, timedout, panicked, interrupted, aborted; "" not run
	message string
	seconds float64
}

type run struct {
	specs   map[string]*spec
	meta    map[string]string
	present bool
	// setup: a failure outside any spec (BeforeSuite, AfterSuite).
	setup string
}

func readMeta(path string) map[string]string {
	m := map[string]string{}
	f, err := os.Open(path)
	if err != nil {
		return m
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if k, v, ok := strings.Cut(sc.Text(), "="); ok {
			m[k] = v
		}
	}
	return m
}

func firstLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s = s[:i]
	}
	if len(s) > 300 {
		s = s[:300] + "..."
	}
	return s
}

// load reads one run; the specs are those the run's focus and skip select
// (Ginkgo reports every spec of the binary, the filtered ones as skipped).
func load(dir string) (*run, error) {
	r := &run{specs: map[string]*spec{}, meta: readMeta(filepath.Join(dir, "meta"))}
	data, err := os.ReadFile(filepath.Join(dir, "report.json"))
	if os.IsNotExist(err) {
		r.present = len(r.meta) > 0
		return r, nil
	}
	if err != nil {
		return nil, err
	}
	r.present = true
	focus, skip, err := filters(dir)
	if err != nil {
		return nil, err
	}
	var reports []suiteReport
	if err := json.Unmarshal(data, &reports); err != nil {
		return nil, fmt.Errorf("%s: %w", dir, err)
	}
	for _, sr := range reports {
		for _, s := range sr.SpecReports {
			if s.LeafNodeType != "It" {
				if s.State != "passed" && s.State != "skipped" && s.Failure.Message != "" {
					r.setup = fmt.Sprintf("%s %s: %s", s.LeafNodeType, s.State, firstLine(s.Failure.Message))
				}
				continue
			}
			name := strings.Join(append(append([]string{}, s.ContainerHierarchyTexts...), s.LeafNodeText), " ")
			if !focus.MatchString(name) || (skip != nil && skip.MatchString(name)) {
				continue
			}
			sp := &spec{state: s.State, seconds: s.RunTime.Seconds()}
			if s.State != "passed" {
				sp.message = firstLine(s.Failure.Message)
				if s.Failure.Location.FileName != "" {
					sp.message = fmt.Sprintf("%s:%d: %s", filepath.Base(s.Failure.Location.FileName), s.Failure.Location.LineNumber, sp.message)
				}
			}
			r.specs[name] = sp
		}
	}
	return r, nil
}

func filters(dir string) (*regexp.Regexp, *regexp.Regexp, error) {
	read := func(name string) (*regexp.Regexp, error) {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			return nil, err
		}
		s := strings.TrimSpace(string(b))
		if s == "" {
			return nil, nil
		}
		return regexp.Compile(s)
	}
	focus, err := read("focus")
	if err != nil {
		return nil, nil, err
	}
	if focus == nil {
		return nil, nil, fmt.Errorf("%s: empty focus", dir)
	}
	skip, err := read("skip")
	if err != nil && !os.IsNotExist(err) {
		return nil, nil, err
	}
	return focus, skip, nil
}

type note struct{ version, suite, spec, text string }

func loadNotes(path string) ([]note, error) {
	if path == "" {
		return nil, nil
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []note
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "#") || strings.TrimSpace(line) == "" {
			continue
		}
		p := strings.SplitN(line, "\t", 4)
		if len(p) != 4 {
			return nil, fmt.Errorf("%s: want 4 tab-separated fields: %q", path, line)
		}
		out = append(out, note{p[0], p[1], p[2], p[3]})
	}
	return out, sc.Err()
}

func noteFor(notes []note, version, suite, name string) string {
	for _, n := range notes {
		if (n.version != "*" && n.version != version) || n.suite != suite {
			continue
		}
		if n.spec == name || (strings.HasSuffix(n.spec, "*") && strings.HasPrefix(name, strings.TrimSuffix(n.spec, "*"))) {
			return n.text
		}
	}
	return ""
}

func short(state string) string {
	switch state {
	case "passed":
		return "pass"
	case "failed", "timedout", "panicked", "interrupted", "aborted":
		return "fail"
	case "skipped", "pending":
		return "skip"
	case "":
		return "-"
	}
	return state
}

func counts(r *run, names []string) (pass, fail, skip int) {
	for _, n := range names {
		if s := r.specs[n]; s != nil {
			switch short(s.state) {
			case "pass":
				pass++
			case "fail":
				fail++
			case "skip":
				skip++
			}
		}
	}
	return
}

func wall(r *run) string {
	if w := r.meta["wall"]; w != "" {
		// A run with PROCS > 1 (ginkgo -p): its wall time is not the serial one.
		if p := r.meta["procs"]; p != "" && p != "1" {
			return w + "s (" + p + " procs)"
		}
		return w + "s"
	}
	return "-"
}

type table struct {
	version, suite string
	names          []string
	runs           map[string]*run
	differ         int
}

func loadTable(results, version, suite string) (*table, error) {
	t := &table{version: version, suite: suite, runs: map[string]*run{}}
	seen := map[string]bool{}
	for _, impl := range impls {
		r, err := load(filepath.Join(results, version, suite, impl))
		if err != nil {
			return nil, err
		}
		t.runs[impl] = r
		for n := range r.specs {
			if !seen[n] {
				seen[n] = true
				t.names = append(t.names, n)
			}
		}
	}
	sort.Strings(t.names)
	for _, n := range t.names {
		if result(t.runs["kcm"], n) != result(t.runs["kcm-rs"], n) {
			t.differ++
		}
	}
	return t, nil
}

func result(r *run, name string) string {
	if s := r.specs[name]; s != nil {
		return short(s.state)
	}
	return "-"
}

func (t *table) present() bool { return t.runs["kcm"].present || t.runs["kcm-rs"].present }

func (t *table) markdown(notes []note) string {
	var b strings.Builder
	fmt.Fprintf(&b, "# Kubernetes %s: upstream e2e suite `%s` on the real node\n\n", t.version, t.suite)
	fmt.Fprintf(&b, "The specs of %s in upstream's `test/e2e` of k8s.io/kubernetes %s (`e2e.test` built from the module), every one but `[Feature:…]` ones", suiteTitle[t.suite], t.version)
	if t.suite == "podgc" {
		b.WriteString(" (this suite's only spec is `[Feature:PodGarbageCollector]`; it runs with `--terminated-pod-gc-threshold=100`, as the spec asks)")
	}
	b.WriteString(", run on the real node (docs/real-node.md), a fresh cluster per run, against upstream KCM (the node's helper kube-controller-manager restarted with the four added, one process as upstream deploys it: its taint-eviction-controller needs node-lifecycle-controller's pod index; a build without \"one process\" ran the four in a second process) and against kcm-rs (beside the helper KCM). Generated by `e2e/upstream-e2e/run.sh report` from Ginkgo's JSON reports.\n\n")
	b.WriteString("| | pass / fail / skip | wall time | controller build | run |\n|---|---|---|---|---|\n")
	for _, impl := range impls {
		r := t.runs[impl]
		if !r.present {
			fmt.Fprintf(&b, "| %s | not run | - | - | - |\n", impl)
			continue
		}
		p, f, s := counts(r, t.names)
		fmt.Fprintf(&b, "| %s | %d / %d / %d | %s | %s | %s |\n", impl, p, f, s, wall(r), r.meta["build"], r.meta["when"])
	}
	fmt.Fprintf(&b, "\n%d specs, %d differ.\n\n", len(t.names), t.differ)
	for _, impl := range impls {
		if p := t.runs[impl].meta["procs"]; p != "" && p != "1" {
			fmt.Fprintf(&b, "%s ran as upstream's CI runs the suite: the ginkgo CLI, `ginkgo -p --procs=%s`, the `[Serial]` specs alone at the end; per-spec seconds overlap.\n\n", impl, p)
		}
	}
	for _, impl := range impls {
		if s := t.runs[impl].setup; s != "" {
			fmt.Fprintf(&b, "%s: outside the specs: %s\n\n", impl, mdEscape(s))
		}
	}
	b.WriteString("| spec | KCM | kcm-rs | seconds KCM, kcm-rs | why (for a difference, a failure of both, or a skip) |\n|---|---|---|---|---|\n")
	for _, n := range t.names {
		k, r := result(t.runs["kcm"], n), result(t.runs["kcm-rs"], n)
		why := ""
		if k != "pass" || r != "pass" {
			why = noteFor(notes, t.version, t.suite, n)
			if why == "" {
				var parts []string
				for _, impl := range impls {
					if s := t.runs[impl].specs[n]; s != nil && short(s.state) != "pass" && s.message != "" {
						parts = append(parts, impl+": "+s.message)
					}
				}
				why = strings.Join(parts, "; ")
			}
		}
		fmt.Fprintf(&b, "| `%s` | %s | %s | %s, %s | %s |\n", strings.ReplaceAll(n, "|", "\\|"), k, r,
			secs(t.runs["kcm"], n), secs(t.runs["kcm-rs"], n), mdEscape(why))
	}
	return b.String()
}

func secs(r *run, name string) string {
	if s := r.specs[name]; s != nil && short(s.state) != "skip" {
		return fmt.Sprintf("%.0f", s.seconds)
	}
	return "-"
}

func mdEscape(s string) string {
	s = strings.ReplaceAll(s, "|", "\\|")
	return strings.ReplaceAll(s, "\n", " ")
}

func main() {
	results := flag.String("results", "", "directory of the runs: <minor>/<suite>/<impl>/")
	out := flag.String("out", "", "directory for <minor>-<suite>.md and summary.md")
	notesPath := flag.String("notes", "", "notes.tsv: reasons for differences and shared failures")
	bar := flag.Bool("bar", false, "check the bar for one minor and suite: every spec KCM passed passes for kcm-rs")
	flag.Parse()
	if *results == "" || (*out == "") == !*bar {
		fmt.Fprintln(os.Stderr, "usage: e2e-report -results DIR (-out DIR [-notes FILE] 1.N... | -bar 1.N SUITE)")
		os.Exit(2)
	}
	if *bar {
		if flag.NArg() != 2 {
			fmt.Fprintln(os.Stderr, "usage: e2e-report -results DIR -bar 1.N SUITE")
			os.Exit(2)
		}
		os.Exit(checkBar(*results, flag.Arg(0), flag.Arg(1)))
	}
	notes, err := loadNotes(*notesPath)
	if err != nil {
		fmt.Fprintln(os.Stderr, "error:", err)
		os.Exit(1)
	}
	if err := os.MkdirAll(*out, 0o755); err != nil {
		fmt.Fprintln(os.Stderr, "error:", err)
		os.Exit(1)
	}
	var sum strings.Builder
	sum.WriteString("# Upstream's e2e suites on the real node: summary\n\n")
	sum.WriteString("Specs per suite (every spec of the suite's `Describe` that is not `[Feature:…]`; pod GC's only spec is one), each run in a fresh cluster of one real node (docs/real-node.md) against upstream KCM and against kcm-rs. `differ`: specs whose results differ. Generated by `e2e/upstream-e2e/run.sh report`.\n\n")
	sum.WriteString("| minor | suite | specs | KCM pass / fail / skip | kcm-rs pass / fail / skip | differ | wall time KCM, kcm-rs |\n|---|---|---|---|---|---|---|\n")
	for _, v := range flag.Args() {
		for _, s := range suites {
			t, err := loadTable(*results, v, s)
			if err != nil {
				fmt.Fprintln(os.Stderr, "error:", err)
				os.Exit(1)
			}
			if !t.present() {
				continue
			}
			file := fmt.Sprintf("%s-%s.md", v, s)
			if err := os.WriteFile(filepath.Join(*out, file), []byte(t.markdown(notes)), 0o644); err != nil {
				fmt.Fprintln(os.Stderr, "error:", err)
				os.Exit(1)
			}
			cell := func(impl string) string {
				r := t.runs[impl]
				if !r.present {
					return "not run"
				}
				p, f, sk := counts(r, t.names)
				return fmt.Sprintf("%d / %d / %d", p, f, sk)
			}
			fmt.Fprintf(&sum, "| %s | [%s](%s) | %d | %s | %s | %d | %s, %s |\n", v, s, file, len(t.names),
				cell("kcm"), cell("kcm-rs"), t.differ, wall(t.runs["kcm"]), wall(t.runs["kcm-rs"]))
		}
	}
	if err := os.WriteFile(filepath.Join(*out, "summary.md"), []byte(sum.String()), 0o644); err != nil {
		fmt.Fprintln(os.Stderr, "error:", err)
		os.Exit(1)
	}
}

func checkBar(results, version, suite string) int {
	t, err := loadTable(results, version, suite)
	if err != nil {
		fmt.Fprintln(os.Stderr, "error:", err)
		return 1
	}
	if !t.runs["kcm"].present || !t.runs["kcm-rs"].present {
		fmt.Fprintf(os.Stderr, "%s %s: both KCM and kcm-rs must have run\n", version, suite)
		return 1
	}
	missed := 0
	for _, n := range t.names {
		if result(t.runs["kcm"], n) == "pass" && result(t.runs["kcm-rs"], n) != "pass" {
			missed++
			msg := ""
			if s := t.runs["kcm-rs"].specs[n]; s != nil {
				msg = s.message
			}
			fmt.Printf("MISSED %s %s: %s: kcm-rs %s %s\n", version, suite, n, result(t.runs["kcm-rs"], n), msg)
		}
	}
	if missed > 0 {
		return 1
	}
	fmt.Printf("bar %s %s: every spec KCM passed passed for kcm-rs (%d specs)\n", version, suite, len(t.names))
	return 0
}
