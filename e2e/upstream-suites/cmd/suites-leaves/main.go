// Command suites-leaves works on the leaves of one suite's `go test -json`
// results for suites.sh, so that the script needs nothing but Go:
//
//	suites-leaves check RESULTS.json EXPECTED.tsv
//	    every leaf passed, or has the result EXPECTED.tsv lists for it
//	    ("flaky": any result); exit 1 otherwise. A leaf listed and not run
//	    is a failure too; a listed leaf that now passes is only reported.
//	suites-leaves durations RESULTS.json
//	    the seconds of every top-level test, in the form shard reads
//	suites-leaves bar ALLOWED.tsv KCM.json KCM_RS.json [KCM_RS_RERUN.json...]
//	    every leaf upstream KCM passes passes for kcm-rs (a leaf's result
//	    is its last one over the kcm-rs files, reruns last); each leaf
//	    that does not is printed as "LEAF<TAB>result"; exit 1 if any.
//	    ALLOWED.tsv (leaf or "prefix*"<TAB>reason; may be missing) lists
//	    the deliberate deviations: reported on stderr, not counted.
//	suites-leaves regex < leaves
//	    one -test.run expression that selects exactly those leaves
//	suites-leaves shard N DURATIONS.tsv < test names
//	    at most N -test.run expressions, one per line, over the names on
//	    stdin (`TEST.test -test.list`), dealt out longest first to the
//	    shard with the least time so far; a name DURATIONS.tsv lacks
//	    counts as its median.
//
// EXPECTED.tsv: leaf<TAB>result<TAB>reason; DURATIONS.tsv: test<TAB>seconds;
// "#" starts a comment line in both.
package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"regexp"
	"sort"
	"strconv"
	"strings"
)

func main() {
	if len(os.Args) < 2 {
		usage()
	}
	var err error
	code := 0
	switch args := os.Args[2:]; os.Args[1] {
	case "check":
		if len(args) != 2 {
			usage()
		}
		code, err = check(args[0], args[1], os.Stdout)
	case "bar":
		if len(args) < 3 {
			usage()
		}
		code, err = bar(args[0], args[1], args[2:], os.Stdout)
	case "regex":
		err = leafRegex(os.Stdin, os.Stdout)
	case "durations":
		if len(args) != 1 {
			usage()
		}
		err = durations(args[0], os.Stdout)
	case "shard":
		if len(args) != 2 {
			usage()
		}
		n, perr := strconv.Atoi(args[0])
		if perr != nil || n < 1 {
			fmt.Fprintf(os.Stderr, "error: shard count %q is not a positive number\n", args[0])
			os.Exit(2)
		}
		err = shard(n, args[1], os.Stdin, os.Stdout)
	default:
		usage()
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "error:", err)
		os.Exit(2)
	}
	os.Exit(code)
}

func usage() {
	fmt.Fprintln(os.Stderr, "usage: suites-leaves check RESULTS.json EXPECTED.tsv | bar ALLOWED.tsv KCM.json KCM_RS.json [RERUN.json...] | regex < leaves | durations RESULTS.json | shard N DURATIONS.tsv < names")
	os.Exit(2)
}

type event struct {
	Action  string
	Test    string
	Elapsed float64
}

// results reads a `go test -json` stream: the last pass/fail/skip of every
// test ("" when it has none, e.g. the binary died in it) and, per test,
// the seconds of that result.
func results(path string) (map[string]string, map[string]float64, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, nil, err
	}
	defer f.Close()
	res, secs := map[string]string{}, map[string]float64{}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 64<<20)
	for sc.Scan() {
		var e event
		if json.Unmarshal(sc.Bytes(), &e) != nil || e.Test == "" {
			continue
		}
		if _, ok := res[e.Test]; !ok {
			res[e.Test] = ""
		}
		switch e.Action {
		case "pass", "fail", "skip":
			res[e.Test] = e.Action
			secs[e.Test] = e.Elapsed
		}
	}
	return res, secs, sc.Err()
}

// table reads a tab-separated file of name and value, skipping comments
// and blank lines; a missing file is an empty table.
func table(path string) (map[string]string, error) {
	out := map[string]string{}
	b, err := os.ReadFile(path)
	if os.IsNotExist(err) {
		return out, nil
	}
	if err != nil {
		return nil, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if strings.TrimSpace(line) == "" || strings.HasPrefix(line, "#") {
			continue
		}
		f := strings.Split(line, "\t")
		if len(f) < 2 {
			return nil, fmt.Errorf("%s: %q has no tab-separated value", path, line)
		}
		out[f[0]] = strings.TrimSpace(f[1])
	}
	return out, nil
}

// leavesOf drops the tests that have subtests: only leaves are results.
func leavesOf(res map[string]string) map[string]string {
	parents := map[string]bool{}
	for t := range res {
		for i := strings.LastIndex(t, "/"); i >= 0; i = strings.LastIndex(t, "/") {
			t = t[:i]
			parents[t] = true
		}
	}
	out := map[string]string{}
	for t, r := range res {
		if !parents[t] {
			out[t] = r
		}
	}
	return out
}

func bar(allowedPath, kcmPath string, rsPaths []string, w io.Writer) (int, error) {
	allowed, err := table(allowedPath)
	if err != nil {
		return 0, err
	}
	kcm, _, err := results(kcmPath)
	if err != nil {
		return 0, err
	}
	rs := map[string]string{}
	for _, p := range rsPaths {
		res, _, err := results(p)
		if err != nil {
			return 0, err
		}
		for t, r := range res {
			if r != "" || rs[t] == "" {
				rs[t] = r
			}
		}
	}
	kcmLeaves, rsLeaves := leavesOf(kcm), leavesOf(rs)
	missed, passes, deviations := 0, 0, 0
	for _, t := range sortedKeys(kcmLeaves) {
		if kcmLeaves[t] != "pass" {
			continue
		}
		passes++
		got, ok := rsLeaves[t]
		if !ok {
			got = "not run"
		} else if got == "" {
			got = "no result"
		}
		if got == "pass" {
			continue
		}
		if reason, ok := allowedFor(allowed, t); ok {
			deviations++
			fmt.Fprintf(os.Stderr, "allowed: %s: %s (%s)\n", t, got, reason)
			continue
		}
		missed++
		fmt.Fprintf(w, "%s\t%s\n", t, got)
	}
	fmt.Fprintf(os.Stderr, "%d leaves KCM passes: %d not passed by kcm-rs, %d listed deviations\n", passes, missed, deviations)
	if missed > 0 {
		return 1, nil
	}
	return 0, nil
}

// allowedFor: the reason `leaf` is listed for, by its exact name or a
// "prefix*" entry.
func allowedFor(allowed map[string]string, leaf string) (string, bool) {
	if r, ok := allowed[leaf]; ok {
		return r, true
	}
	for k, r := range allowed {
		if p, ok := strings.CutSuffix(k, "*"); ok && strings.HasPrefix(leaf, p) {
			return r, true
		}
	}
	return "", false
}

// leafRegex: `go test -run` splits its expression at slashes, one part
// per level, each matched unanchored; a leaf is selected by anchoring every
// part of its name. Leaves are alternatives of one expression per level, so
// the union may select a few more leaves (a cross product), never fewer.
func leafRegex(leaves io.Reader, w io.Writer) error {
	var levels [][]string
	seen := map[string]bool{}
	sc := bufio.NewScanner(leaves)
	for sc.Scan() {
		name := strings.TrimSpace(strings.SplitN(sc.Text(), "\t", 2)[0])
		if name == "" {
			continue
		}
		for i, part := range strings.Split(name, "/") {
			if len(levels) <= i {
				levels = append(levels, nil)
			}
			key := strconv.Itoa(i) + "/" + part
			if !seen[key] {
				seen[key] = true
				levels[i] = append(levels[i], "^"+regexp.QuoteMeta(part)+"$")
			}
		}
	}
	if err := sc.Err(); err != nil {
		return err
	}
	parts := make([]string, len(levels))
	for i, alts := range levels {
		parts[i] = strings.Join(alts, "|")
	}
	fmt.Fprintln(w, strings.Join(parts, "/"))
	return nil
}

func check(resultsPath, expectedPath string, w io.Writer) (int, error) {
	res, _, err := results(resultsPath)
	if err != nil {
		return 0, err
	}
	exp, err := table(expectedPath)
	if err != nil {
		return 0, err
	}
	parents := map[string]bool{}
	for t := range res {
		for i := strings.LastIndex(t, "/"); i >= 0; i = strings.LastIndex(t, "/") {
			t = t[:i]
			parents[t] = true
		}
	}
	var bad, fixed []string
	leaves := 0
	for _, t := range sortedKeys(res) {
		if parents[t] {
			continue
		}
		leaves++
		got, want := res[t], exp[t]
		if got == "" {
			got = "no result"
		}
		if want == "" {
			want = "pass"
		}
		if want == "flaky" || got == want || (want == "fail" && got == "no result") {
			continue
		}
		line := fmt.Sprintf("%s: %s (expected %s)", t, got, want)
		if got == "pass" {
			fixed = append(fixed, line)
		} else {
			bad = append(bad, line)
		}
	}
	for _, t := range sortedKeys(exp) {
		if _, ok := res[t]; !ok {
			bad = append(bad, fmt.Sprintf("%s: not run (expected %s)", t, exp[t]))
		}
	}
	for _, l := range fixed {
		fmt.Fprintln(w, "now passes, remove from the expected list:", l)
	}
	for _, l := range bad {
		fmt.Fprintln(w, "UNEXPECTED:", l)
	}
	fmt.Fprintf(w, "%d leaves, %d unexpected, %d fixed\n", leaves, len(bad), len(fixed))
	if len(bad) > 0 {
		return 1, nil
	}
	return 0, nil
}

func durations(resultsPath string, w io.Writer) error {
	res, secs, err := results(resultsPath)
	if err != nil {
		return err
	}
	fmt.Fprintln(w, "# top-level test<TAB>seconds of one run (suites.sh durations), for SHARDS")
	for _, t := range sortedKeys(res) {
		if !strings.Contains(t, "/") && res[t] != "" {
			fmt.Fprintf(w, "%s\t%.1f\n", t, secs[t])
		}
	}
	return nil
}

func shard(n int, durationsPath string, names io.Reader, w io.Writer) error {
	tab, err := table(durationsPath)
	if err != nil {
		return err
	}
	known := map[string]float64{}
	var all []float64
	for t, v := range tab {
		s, err := strconv.ParseFloat(v, 64)
		if err != nil {
			return fmt.Errorf("%s: %s: %q is not seconds", durationsPath, t, v)
		}
		known[t] = s
		all = append(all, s)
	}
	median := 1.0
	if len(all) > 0 {
		sort.Float64s(all)
		median = all[len(all)/2]
	}
	cost := func(t string) float64 {
		if s, ok := known[t]; ok {
			return s
		}
		return median
	}
	var tests []string
	sc := bufio.NewScanner(names)
	for sc.Scan() {
		if t := strings.TrimSpace(sc.Text()); strings.HasPrefix(t, "Test") {
			tests = append(tests, t)
		}
	}
	if err := sc.Err(); err != nil {
		return err
	}
	sort.SliceStable(tests, func(i, j int) bool { return cost(tests[i]) > cost(tests[j]) })
	type bin struct {
		total float64
		tests []string
	}
	bins := make([]bin, n)
	for _, t := range tests {
		least := 0
		for i := range bins {
			if bins[i].total < bins[least].total {
				least = i
			}
		}
		bins[least].total += cost(t)
		bins[least].tests = append(bins[least].tests, regexp.QuoteMeta(t))
	}
	for _, b := range bins {
		if len(b.tests) > 0 {
			fmt.Fprintf(w, "^(%s)$\n", strings.Join(b.tests, "|"))
		}
	}
	return nil
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
