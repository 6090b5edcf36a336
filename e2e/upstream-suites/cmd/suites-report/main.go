// Command suites-report renders the `go test -json` results of upstream's
// integration suites (suites.sh run) as markdown: per Kubernetes minor and
// suite, every leaf test with its result under upstream KCM and under kcm-rs,
// and for every leaf whose results differ, the reason: a note from
// notes.tsv when there is one, else the first failure line of the failing
// side (or its skip reason).
//
// usage: suites-report -out DIR [-notes notes.tsv] 1.N=RESULTS_DIR...
//
// notes.tsv: version, suite, leaf (exact name, or a prefix ending in "*"),
// note; tab-separated, "#" starts a comment line.
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
)

var suites = []string{"job", "podgc", "disruption", "node"}
var impls = []string{"kcm", "kcm-rs"}

const notRunnable = "extctl: not runnable against an external controller: "

type event struct {
	Action  string
	Test    string
	Output  string
	Elapsed float64
}

type leaf struct {
	result string // pass, fail, skip, "" (not run / no result)
	output []string
	rerun  bool // the result of a rerun
}

func mtime(path string) int64 {
	st, err := os.Stat(path)
	if err != nil {
		return 0
	}
	return st.ModTime().UnixNano()
}

type run struct {
	tests   map[string]*leaf
	parents map[string]bool
	seconds string
	present bool
}

func load(path string) (*run, error) {
	r := &run{tests: map[string]*leaf{}, parents: map[string]bool{}}
	f, err := os.Open(path)
	if os.IsNotExist(err) {
		return r, nil
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	r.present = true
	if b, err := os.ReadFile(strings.TrimSuffix(path, ".json") + ".seconds"); err == nil {
		r.seconds = strings.TrimSpace(string(b))
	}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 64<<20)
	for sc.Scan() {
		var e event
		if json.Unmarshal(sc.Bytes(), &e) != nil || e.Test == "" {
			continue
		}
		l := r.tests[e.Test]
		if l == nil {
			l = &leaf{}
			r.tests[e.Test] = l
			if i := strings.LastIndex(e.Test, "/"); i >= 0 {
				r.parents[e.Test[:i]] = true
			}
		}
		switch e.Action {
		case "pass", "fail", "skip":
			l.result = e.Action
		case "output":
			// Only lines a reason can come from: the tests' own lines, the
			// harness's, and error lines (a refusal's message).
			o := strings.TrimRight(e.Output, "\n")
			if len(l.output) < 400 && (failLine.MatchString(o) || strings.Contains(o, "extctl") || errorLine.MatchString(o) || startError.MatchString(o)) {
				l.output = append(l.output, o)
			}
		}
	}
	// A parent of a parent is marked by its children's names.
	for name := range r.tests {
		for i := strings.LastIndex(name, "/"); i >= 0; i = strings.LastIndex(name[:i], "/") {
			r.parents[name[:i]] = true
		}
	}
	return r, sc.Err()
}

func (r *run) leaves() []string {
	var out []string
	for name := range r.tests {
		if !r.parents[name] {
			out = append(out, name)
		}
	}
	return out
}

var (
	failLine   = regexp.MustCompile(`^\s+\S+_test\.go:\d+: `)
	extctlErr  = regexp.MustCompile(`extctl: .*did not become ready|extctl: KCM_UNDER_TEST`)
	errorLine  = regexp.MustCompile(`(?i)\berror\b[: ]`)
	startError = regexp.MustCompile(`^\s*(error|Error):|"command failed"`)
)

// reason is the first line that says why a leaf failed or was skipped.
func reason(l *leaf) string {
	if l == nil || l.result == "" {
		return "no result (the suite stopped before this leaf: timeout or panic)"
	}
	if l.result == "skip" {
		for _, o := range l.output {
			if i := strings.Index(o, notRunnable); i >= 0 {
				return "not runnable: " + o[i+len(notRunnable):]
			}
		}
		for _, o := range l.output {
			if failLine.MatchString(o) {
				return "skipped: " + strings.TrimSpace(failLine.ReplaceAllString(o, ""))
			}
		}
		return "skipped"
	}
	for i, o := range l.output {
		if extctlErr.MatchString(o) {
			// The refusal: the process's own error line, if it printed one
			// (kcm-rs: "error: ...", KCM: "command failed" err=...).
			for _, re := range []*regexp.Regexp{startError, errorLine} {
				for _, p := range l.output[i:] {
					if re.MatchString(p) && !strings.Contains(p, "extctl:") && !strings.Contains(p, `"level":"warn"`) {
						return "refused at start: " + trim(p)
					}
				}
			}
			return trim(o)
		}
	}
	for _, o := range l.output {
		if failLine.MatchString(o) && !strings.Contains(o, "extctl: started") {
			return trim(o)
		}
	}
	return "failed (no failure line)"
}

func trim(s string) string {
	s = strings.TrimSpace(s)
	s = strings.ReplaceAll(s, "|", "\\|")
	if len(s) > 300 {
		s = s[:300] + "…"
	}
	return s
}

type note struct{ version, suite, leaf, text string }

func loadNotes(path string) []note {
	var out []note
	b, err := os.ReadFile(path)
	if err != nil {
		return nil
	}
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, "#") || strings.TrimSpace(line) == "" {
			continue
		}
		f := strings.SplitN(line, "\t", 4)
		if len(f) == 4 {
			out = append(out, note{f[0], f[1], f[2], f[3]})
		}
	}
	return out
}

func findNote(notes []note, version, suite, name string) string {
	for _, n := range notes {
		if (n.version != "*" && n.version != version) || (n.suite != "*" && n.suite != suite) {
			continue
		}
		if n.leaf == name || (strings.HasSuffix(n.leaf, "*") && strings.HasPrefix(name, strings.TrimSuffix(n.leaf, "*"))) {
			return n.text
		}
	}
	return ""
}

func cell(l *leaf) string {
	if l == nil || l.result == "" {
		return "—"
	}
	return l.result
}

// mark is cell with a note when the result comes from a rerun.
func mark(l *leaf) string {
	if l != nil && l.rerun {
		return cell(l) + " (rerun)"
	}
	return cell(l)
}

func main() {
	out := flag.String("out", "", "output folder")
	notesPath := flag.String("notes", "", "notes.tsv")
	flag.Parse()
	if *out == "" || flag.NArg() == 0 {
		fmt.Fprintln(os.Stderr, "usage: suites-report -out DIR [-notes notes.tsv] 1.N=RESULTS_DIR...")
		os.Exit(2)
	}
	notes := loadNotes(*notesPath)
	var summary strings.Builder
	summary.WriteString("# Upstream's integration suites: summary\n\n")
	summary.WriteString("Leaves (tests without subtests) per suite; `not runnable` counts skips by the harness (the test needs something in process), within `skip`. Generated by `e2e/upstream-suites/suites.sh report`.\n\n")
	summary.WriteString("| minor | suite | leaves | KCM pass / fail / skip (not runnable) | kcm-rs pass / fail / skip (not runnable) | differ | wall time KCM, kcm-rs |\n|---|---|---|---|---|---|---|\n")
	for _, arg := range flag.Args() {
		version, dir, ok := strings.Cut(arg, "=")
		if !ok {
			fmt.Fprintf(os.Stderr, "error: %q is not 1.N=DIR\n", arg)
			os.Exit(2)
		}
		for _, s := range suites {
			runs := map[string]*run{}
			names := map[string]bool{}
			for _, impl := range impls {
				r, err := load(filepath.Join(dir, impl+"-"+s+".json"))
				if err != nil {
					fmt.Fprintf(os.Stderr, "error: %v\n", err)
					os.Exit(1)
				}
				// Reruns (suites.sh run with RERUN=name), oldest first:
				// a leaf's result is the newest one.
				reruns, _ := filepath.Glob(filepath.Join(dir, impl+"-"+s+".*.json"))
				sort.Slice(reruns, func(i, j int) bool { return mtime(reruns[i]) < mtime(reruns[j]) })
				for _, f := range reruns {
					rr, err := load(f)
					if err != nil {
						fmt.Fprintf(os.Stderr, "error: %v\n", err)
						os.Exit(1)
					}
					for _, n := range rr.leaves() {
						if l := rr.tests[n]; l.result != "" {
							l.rerun = true
							r.tests[n] = l
						}
					}
				}
				runs[impl] = r
				for _, n := range r.leaves() {
					names[n] = true
				}
			}
			if !runs["kcm"].present && !runs["kcm-rs"].present {
				continue
			}
			var sorted []string
			for n := range names {
				sorted = append(sorted, n)
			}
			sort.Strings(sorted)
			var b strings.Builder
			fmt.Fprintf(&b, "# Kubernetes %s: suite `%s`\n\n", version, s)
			fmt.Fprintf(&b, "Upstream's `test/integration/%s` of k8s.io/kubernetes %s, each in-process controller start replaced by an external process (e2e/upstream-suites). Generated by `e2e/upstream-suites/suites.sh report` from `go test -json`.\n\n", s, version)
			counts := map[string]map[string]int{}
			differ := 0
			var rows strings.Builder
			rows.WriteString("| leaf | KCM | kcm-rs | reason for the difference |\n|---|---|---|---|\n")
			for _, n := range sorted {
				a, r := runs["kcm"].tests[n], runs["kcm-rs"].tests[n]
				for impl, l := range map[string]*leaf{"kcm": a, "kcm-rs": r} {
					if counts[impl] == nil {
						counts[impl] = map[string]int{}
					}
					counts[impl][cell(l)]++
					if l != nil && l.result == "skip" && strings.HasPrefix(reason(l), "not runnable") {
						counts[impl]["notrunnable"]++
					}
				}
				why := ""
				if cell(a) != cell(r) {
					differ++
					why = findNote(notes, version, s, n)
					if why == "" {
						side, l := "kcm-rs", r
						if cell(r) == "pass" {
							side, l = "KCM", a
						}
						why = side + ": " + reason(l)
					}
				} else if cell(a) == "skip" || cell(a) == "fail" {
					ra, rr := reason(a), reason(r)
					if ra == rr {
						why = "(same) " + rr
					} else {
						why = "(both) KCM: " + ra + " — kcm-rs: " + rr
					}
					if n := findNote(notes, version, s, n); n != "" {
						why = "(both) " + n
					}
				}
				fmt.Fprintf(&rows, "| `%s` | %s | %s | %s |\n", n, mark(a), mark(r), why)
			}
			c := func(impl string) string {
				m := counts[impl]
				x := fmt.Sprintf("%d / %d / %d (%d)", m["pass"], m["fail"], m["skip"], m["notrunnable"])
				if m["—"] > 0 {
					x += fmt.Sprintf(", %d no result", m["—"])
				}
				return x
			}
			fmt.Fprintf(&b, "| | pass / fail / skip (not runnable) | wall time |\n|---|---|---|\n| KCM | %s | %ss |\n| kcm-rs | %s | %ss |\n\n%d leaves, %d differ.\n\n",
				c("kcm"), runs["kcm"].seconds, c("kcm-rs"), runs["kcm-rs"].seconds, len(sorted), differ)
			b.WriteString(rows.String())
			fmt.Fprintf(&summary, "| %s | [%s](%s-%s.md) | %d | %s | %s | %d | %ss, %ss |\n", version, s, version, s, len(sorted), c("kcm"), c("kcm-rs"), differ, runs["kcm"].seconds, runs["kcm-rs"].seconds)
			if err := os.WriteFile(filepath.Join(*out, version+"-"+s+".md"), []byte(b.String()), 0o644); err != nil {
				fmt.Fprintf(os.Stderr, "error: %v\n", err)
				os.Exit(1)
			}
		}
	}
	if err := os.WriteFile(filepath.Join(*out, "summary.md"), []byte(summary.String()), 0o644); err != nil {
		fmt.Fprintf(os.Stderr, "error: %v\n", err)
		os.Exit(1)
	}
}
