// Command conformance runs the language-neutral cases of conformance/cases through every SDK's
// adapter against a real broker and prints an SDK × case table. See docs/conformance.md.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"
)

func main() {
	os.Exit(run())
}

type options struct {
	url, lanes, sdks, filter, casesDir, knownDir string
	brokerMeets                                  string
	parallel, brokerPort, proxyPort              int
	verbose                                      bool
}

func run() int {
	var o options
	flag.StringVar(&o.url, "url", "", "use this broker (started with LANES_TEST_FAULTS=true) instead of starting one; cases with needs: it does not meet (-broker-meets) are skipped")
	flag.StringVar(&o.brokerMeets, "broker-meets", "", "with -url: the case needs that broker meets, comma-separated (noKVSweeper: started with LANES_KV_SWEEP_INTERVAL_MS=0)")
	flag.StringVar(&o.lanes, "lanes", "", "lanes binary to start (default: go build ./server/cmd/lanes into a temp dir)")
	flag.StringVar(&o.sdks, "sdk", sdkNames(), "SDKs to run, comma-separated")
	flag.StringVar(&o.filter, "run", "", "only cases whose id matches one of these comma-separated patterns (* and **)")
	flag.StringVar(&o.casesDir, "cases", "", "case directory (default conformance/cases)")
	flag.StringVar(&o.knownDir, "known-failing", "", "known-failing list directory (default conformance/known-failing)")
	flag.IntVar(&o.parallel, "parallel", 4, "adapter processes per SDK")
	flag.IntVar(&o.brokerPort, "broker-port", envInt("LANES_CONFORMANCE_BROKER_PORT"), "port of the broker the runner starts (default $LANES_CONFORMANCE_BROKER_PORT, else a free one)")
	flag.IntVar(&o.proxyPort, "proxy-port", envInt("LANES_CONFORMANCE_PROXY_PORT"), "port of the validating proxy (default $LANES_CONFORMANCE_PROXY_PORT, else a free one)")
	flag.BoolVar(&o.verbose, "v", false, "print every case as it finishes")
	flag.Parse()

	repo, err := findRepo()
	if err != nil {
		return fatal(err)
	}
	if o.casesDir == "" {
		o.casesDir = filepath.Join(repo, "conformance", "cases")
	}
	if o.knownDir == "" {
		o.knownDir = filepath.Join(repo, "conformance", "known-failing")
	}
	cases, err := loadCases(o.casesDir)
	if err != nil {
		return fatal(err)
	}
	meets, err := parseBrokerMeets(o.brokerMeets)
	if err != nil {
		return fatal(err)
	}
	if o.filter != "" {
		var kept []testCase
		pats := strings.Split(o.filter, ",")
		for _, c := range cases {
			if matchAny(pats, c.ID) {
				kept = append(kept, c)
			}
		}
		cases = kept
	}
	if len(cases) == 0 {
		return fatal(errors.New("no cases selected"))
	}
	cases, skipped := runnable(cases, o.url == "", meets)
	for _, id := range slices.Sorted(maps.Keys(skipped)) {
		fmt.Printf("skipped %s: %s\n", id, skipped[id])
	}
	if len(cases) == 0 {
		return fatal(errors.New("every case selected was skipped"))
	}
	var chosen []sdk
	for _, name := range strings.Split(o.sdks, ",") {
		found := false
		for _, s := range sdks {
			if s.Name == strings.TrimSpace(name) {
				chosen = append(chosen, s)
				found = true
			}
		}
		if !found {
			return fatal(fmt.Errorf("unknown SDK %q (have %s)", name, sdkNames()))
		}
	}
	known := map[string][]knownEntry{}
	for _, s := range chosen {
		k, err := loadKnown(filepath.Join(o.knownDir, s.Name+".txt"))
		if err != nil {
			return fatal(err)
		}
		known[s.Name] = k
	}

	tmp, err := os.MkdirTemp("", "lanes-conformance-")
	if err != nil {
		return fatal(err)
	}
	defer func() { _ = os.RemoveAll(tmp) }()

	brokerURL := o.url
	if brokerURL == "" {
		bin := o.lanes
		if bin == "" {
			bin = filepath.Join(tmp, "lanes")
			cmd := exec.CommandContext(context.Background(), "go", "build", "-o", bin, "./server/cmd/lanes")
			cmd.Dir = repo
			if out, err := cmd.CombinedOutput(); err != nil {
				return fatal(fmt.Errorf("go build ./server/cmd/lanes: %w\n%s", err, out))
			}
		}
		b, err := startBroker(repo, bin, tmp, o.brokerPort)
		if err != nil {
			return fatal(err)
		}
		defer b.Stop()
		brokerURL = b.URL
		fmt.Printf("broker: %s (database %s, log %s)\n", b.URL, b.db, b.logPath)
	}
	proxy, err := newValidatingProxy(filepath.Join(repo, "openapi.yaml"), brokerURL, o.proxyPort)
	if err != nil {
		return fatal(err)
	}
	defer proxy.Close()
	faults := faultControl{base: brokerURL}
	if _, err := faults.counts(context.Background(), "probe"); err != nil {
		return fatal(err)
	}
	fmt.Printf("validating proxy: %s → %s; %d cases × %d SDKs\n", proxy.URL, brokerURL, len(cases), len(chosen))

	start := time.Now()
	results := map[string]map[string]*outcome{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	shared := &brokerWide{base: brokerURL}
	for _, s := range chosen {
		results[s.Name] = map[string]*outcome{}
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := runSDK(repo, tmp, s, cases, proxy, faults, shared, o)
			mu.Lock()
			results[s.Name] = r
			mu.Unlock()
		}()
	}
	wg.Wait()
	failed := report(cases, chosen, results, known, proxy, time.Since(start), o.knownDir)
	if uncovered := reportCoverage(proxy.operations, chosen, results, coverageJudged(o.filter, chosen)); uncovered > 0 {
		fmt.Printf("%d operations reached by no case: add a case, or list the operation in notThroughSDKs (coverage.go) with the reason\n", uncovered)
		failed = 1
	}
	return failed
}

// failureKeys are the result keys that report a failure of a step, by op: a step whose
// expectation does not mention one must not report it (a consume loop or an iteration that had
// to be cut at maxMs, or a stop that failed, would otherwise pass on what it handled before; a
// walk that yielded anything after its error would pass on the rows and the error it expects).
var failureKeys = map[string][]string{
	"consume": {"error", "timedOut", "stopError"}, "iterate": {"error", "timedOut"},
	"dlqAll": walkFailures, "messagesAll": walkFailures, "queuesAll": walkFailures,
	"queueStatusesAll": walkFailures, "walkResume": walkFailures,
}

// walkFailures are a walk step's failure keys: its error, and afterError, what the walk
// yielded after it (an error ends a walk, so nothing may follow).
var walkFailures = []string{"error", "afterError"}

// unexpectedFailures lists the failures a step's result reports that its expectation does not name.
func unexpectedFailures(id, op string, expect any, result map[string]any) []string {
	keys, ok := failureKeys[op]
	if !ok {
		keys = []string{"error"}
	}
	em, _ := expect.(map[string]any)
	var problems []string
	for _, k := range keys {
		v := result[k]
		if _, mentioned := em[k]; mentioned || v == nil || v == false {
			continue
		}
		problems = append(problems, fmt.Sprintf("step %s (%s): unexpected %s %s", id, op, k, show(v)))
	}
	return problems
}

func fatal(err error) int {
	fmt.Fprintln(os.Stderr, "conformance:", err)
	return 2
}

func findRepo() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.work")); err == nil {
			if _, err := os.Stat(filepath.Join(dir, "openapi.yaml")); err == nil {
				return dir, nil
			}
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("run inside the lanes repository (no go.work with openapi.yaml above the working directory)")
		}
		dir = parent
	}
}

// outcome is one (SDK, case) result; Ops are the operationIds its requests reached.
type outcome struct {
	Passed   bool
	Problems []string
	Duration time.Duration
	Ops      []string
}

// runSDK runs every case through o.parallel adapter processes of one SDK.
func runSDK(repo, tmp string, s sdk, cases []testCase, proxy *validatingProxy, faults faultControl, shared *brokerWide, o options) map[string]*outcome {
	out := map[string]*outcome{}
	var mu sync.Mutex
	argv, err := s.Prepare(repo, tmp)
	if err != nil {
		fmt.Printf("\n%s adapter unavailable: %v\n", s.Name, err)
		for _, c := range cases {
			out[c.ID] = &outcome{Problems: []string{"the " + s.Name + " adapter is unavailable (reason printed above the table)"}}
		}
		return out
	}
	work := make(chan int)
	var wg sync.WaitGroup
	for w := 0; w < max(o.parallel, 1); w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var proc *adapterProc
			defer func() {
				if proc != nil {
					proc.kill()
				}
			}()
			for i := range work {
				c := cases[i]
				if proc == nil {
					p, err := startAdapter(argv, repo)
					if err != nil {
						mu.Lock()
						out[c.ID] = &outcome{Problems: []string{"starting the adapter: " + err.Error()}}
						mu.Unlock()
						continue
					}
					proc = p
				}
				proc.stderr.Reset()
				release := shared.enter(c)
				res, broken := runCase(s.Name, i, c, proc, proxy, faults)
				if c.Spec.Exclusive {
					res.Problems = append(res.Problems, shared.restore(context.Background())...)
					res.Passed = len(res.Problems) == 0
				}
				release()
				if broken {
					proc.kill()
					proc = nil
				}
				mu.Lock()
				out[c.ID] = res
				mu.Unlock()
				if o.verbose {
					status := "PASS"
					if !res.Passed {
						status = "FAIL"
					}
					fmt.Printf("%-12s %-4s %-50s %6.1fs\n", s.Name, status, c.ID, res.Duration.Seconds())
				}
			}
		}()
	}
	for i := range cases {
		work <- i
	}
	close(work)
	wg.Wait()
	return out
}

// runCase runs one case in one adapter; broken reports that the adapter must be restarted.
func runCase(sdkName string, idx int, c testCase, proc *adapterProc, proxy *validatingProxy, faults faultControl) (res *outcome, broken bool) {
	start := time.Now()
	res = &outcome{}
	defer func() { res.Duration = time.Since(start); res.Passed = len(res.Problems) == 0 }()
	run := fmt.Sprintf("cf-%s-%03d-%04x", sdkName, idx, rand.IntN(1<<16))
	vars := map[string]string{"q": run, "run": run, "url": proxy.URL}
	ctx := context.Background()

	var rules []faultSpec
	for _, f := range c.Spec.Faults {
		rules = append(rules, f.forRun(vars))
	}
	if len(rules) > 0 {
		if err := faults.set(ctx, run, rules); err != nil {
			res.Problems = append(res.Problems, "setting the fault script: "+err.Error())
			return res, false
		}
		defer faults.clear(ctx, run)
	}
	steps := make([]map[string]any, len(c.Steps))
	for i, st := range c.Steps {
		steps[i] = map[string]any{"id": st.ID, "op": st.Op, "args": substitute(st.Args, vars)}
		if st.Background != nil {
			steps[i]["background"] = st.Background
		}
	}
	client := map[string]any{}
	if c.Spec.Client != nil {
		client = substitute(normalize(c.Spec.Client), vars).(map[string]any)
	}
	in := map[string]any{
		"case": c.ID, "run": run, "url": proxy.URL,
		"headers": map[string]string{runHeader: run},
		"client":  client, "steps": steps,
	}
	timeout := 60 * time.Second
	if c.Spec.TimeoutSeconds > 0 {
		timeout = time.Duration(c.Spec.TimeoutSeconds) * time.Second
	}
	out, err := proc.run(in, timeout)
	requests, violations := proxy.take(run)
	for _, r := range requests {
		res.Ops = append(res.Ops, r.Op)
	}
	if err != nil {
		res.Problems = append(res.Problems, err.Error())
		if tail := strings.TrimSpace(proc.stderr.String()); tail != "" && errors.Is(err, errAdapterTimeout) {
			res.Problems = append(res.Problems, "adapter stderr: "+truncate(tail, 2000))
		}
		return res, true
	}
	for _, v := range violations {
		res.Problems = append(res.Problems, "spec: "+v)
	}
	if msg, ok := out["error"].(string); ok && msg != "" {
		res.Problems = append(res.Problems, "adapter error: "+msg)
	}

	// Step results, in order; a step missing from the output fails.
	m := matcher{results: map[string]any{}}
	got := map[string]any{}
	if list, ok := out["steps"].([]any); ok {
		for _, x := range list {
			if sm, ok := x.(map[string]any); ok {
				id, _ := sm["id"].(string)
				got[id] = sm["result"]
			}
		}
	}
	for _, st := range c.Steps {
		r, ok := got[st.ID]
		if !ok {
			res.Problems = append(res.Problems, fmt.Sprintf("step %s (%s): no result from the adapter", st.ID, st.Op))
			break
		}
		if rm, ok := r.(map[string]any); ok {
			if u, ok := rm["unsupported"]; ok {
				res.Problems = append(res.Problems, fmt.Sprintf("step %s (%s): unsupported by the adapter: %v", st.ID, st.Op, u))
			}
		}
		m.results[st.ID] = r
		if rm, ok := r.(map[string]any); ok {
			if ae, ok := rm["adapterError"]; ok {
				res.Problems = append(res.Problems, fmt.Sprintf("step %s (%s): adapter error: %v", st.ID, st.Op, ae))
			}
			res.Problems = append(res.Problems, unexpectedFailures(st.ID, st.Op, st.expect, rm)...)
		}
		if st.expect != nil {
			exp := substitute(st.expect, vars)
			res.Problems = append(res.Problems, m.match(st.ID+"("+st.Op+")", exp, r)...)
		}
	}

	// Fault counters.
	if len(rules) > 0 {
		counts, err := faults.counts(ctx, run)
		if err != nil {
			res.Problems = append(res.Problems, "reading fault counters: "+err.Error())
		} else {
			for i, f := range rules {
				if f.Expect == nil || i >= len(counts) {
					continue
				}
				res.Problems = append(res.Problems, m.match(fmt.Sprintf("faults[%d] %s %s", i, f.Method, f.Path), normalize(f.Expect), counts[i])...)
			}
		}
	}

	// Requests the SDK sent, matched in order.
	next := 0
	for _, want := range c.Spec.Requests {
		found := false
		for next < len(requests) {
			r := requests[next]
			next++
			if want.matches(r.Method, r.Path, vars) {
				if problem := want.queryProblem(r.Query, vars); problem != "" {
					res.Problems = append(res.Problems, fmt.Sprintf("request %s %s: %s", r.Method, r.Path, problem))
				}
				if problem := want.headerProblem(r.Header, vars); problem != "" {
					res.Problems = append(res.Problems, fmt.Sprintf("request %s %s: %s", r.Method, r.Path, problem))
				}
				found = true
				break
			}
		}
		if !found {
			res.Problems = append(res.Problems, fmt.Sprintf("request %s %s (query %q) was not sent", want.Method, substitute(want.Path, vars), want.Query))
		}
	}
	if len(res.Problems) > 0 {
		if tail := strings.TrimSpace(proc.stderr.String()); tail != "" {
			res.Problems = append(res.Problems, "adapter stderr: "+truncate(tail, 1500))
		}
	}
	return res, false
}

// knownEntry is one line of known-failing/<sdk>.txt: a pattern and its reason.
type knownEntry struct {
	Pattern, Reason string
}

func loadKnown(path string) ([]knownEntry, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []knownEntry
	for _, line := range strings.Split(string(b), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		pat, reason, _ := strings.Cut(line, "#")
		out = append(out, knownEntry{Pattern: strings.TrimSpace(pat), Reason: strings.TrimSpace(reason)})
	}
	return out, nil
}

func matchAny(patterns []string, id string) bool {
	for _, p := range patterns {
		if globMatch(strings.TrimSpace(p), id) {
			return true
		}
	}
	return false
}

// globMatch: "**" matches anything, "*" anything but "/".
func globMatch(pat, s string) bool {
	if pat == "" {
		return s == ""
	}
	if strings.HasPrefix(pat, "**") {
		for i := 0; i <= len(s); i++ {
			if globMatch(pat[2:], s[i:]) {
				return true
			}
		}
		return false
	}
	if pat[0] == '*' {
		for i := 0; i <= len(s); i++ {
			if globMatch(pat[1:], s[i:]) {
				return true
			}
			if i < len(s) && s[i] == '/' {
				return false
			}
		}
		return false
	}
	return s != "" && pat[0] == s[0] && globMatch(pat[1:], s[1:])
}

func report(cases []testCase, chosen []sdk, results map[string]map[string]*outcome, known map[string][]knownEntry, proxy *validatingProxy, took time.Duration, knownDir string) int {
	width := len("case")
	for _, c := range cases {
		width = max(width, len(c.ID))
	}
	// A column per SDK, as wide as its name or a "passed/failed/xfail" count.
	col := 8
	for _, s := range chosen {
		col = max(col, len(s.Name)+2)
	}
	fmt.Println()
	fmt.Printf("%-*s", width+2, "case")
	for _, s := range chosen {
		fmt.Printf("%-*s", col, s.Name)
	}
	fmt.Println()
	passed, failed, xfail := 0, 0, 0
	type detail struct {
		sdk, id, label string
		problems       []string
	}
	var details []detail
	perSDK := map[string][3]int{}
	for _, c := range cases {
		fmt.Printf("%-*s", width+2, c.ID)
		for _, s := range chosen {
			r := results[s.Name][c.ID]
			if r == nil {
				r = &outcome{Problems: []string{"not run"}}
			}
			var listed *knownEntry
			for i, k := range known[s.Name] {
				if globMatch(k.Pattern, c.ID) {
					listed = &known[s.Name][i]
					break
				}
			}
			cell := "PASS"
			n := perSDK[s.Name]
			switch {
			case r.Passed && listed == nil:
				passed++
				n[0]++
			case r.Passed:
				cell = "XPASS"
				failed++
				n[1]++
				details = append(details, detail{s.Name, c.ID, "passes but is listed in " + filepath.Join(knownDir, s.Name+".txt") + " (" + listed.Pattern + "): remove it from the list", nil})
			case listed != nil:
				cell = "xfail"
				xfail++
				n[2]++
				details = append(details, detail{s.Name, c.ID, "known failure: " + listed.Reason, r.Problems})
			default:
				cell = "FAIL"
				failed++
				n[1]++
				details = append(details, detail{s.Name, c.ID, "FAILED", r.Problems})
			}
			perSDK[s.Name] = n
			fmt.Printf("%-*s", col, cell)
		}
		fmt.Println()
	}
	fmt.Printf("%-*s", width+2, "passed/failed/xfail")
	for _, s := range chosen {
		n := perSDK[s.Name]
		fmt.Printf("%-*s", col, fmt.Sprintf("%d/%d/%d", n[0], n[1], n[2]))
	}
	fmt.Println()
	sort.SliceStable(details, func(i, j int) bool { return details[i].label == "FAILED" && details[j].label != "FAILED" })
	for _, d := range details {
		fmt.Printf("\n--- %s %s: %s\n", d.sdk, d.id, d.label)
		for _, p := range d.problems {
			fmt.Printf("    %s\n", p)
		}
	}
	proxy.mu.Lock()
	unowned := proxy.unowned
	proxy.mu.Unlock()
	for _, v := range unowned {
		fmt.Printf("\nspec violation outside any case: %s\n", v)
		failed++
	}
	fmt.Printf("\nconformance: %s\n", took.Round(100*time.Millisecond))
	if xfail > 0 {
		fmt.Printf("%d passed, %d failed (%d known failures)\n", passed, failed, xfail)
	} else {
		fmt.Printf("%d passed, %d failed\n", passed, failed)
	}
	if failed > 0 {
		return 1
	}
	return 0
}
