package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"go.yaml.in/yaml/v3"
)

// caseFile is one YAML file of cases: one concern.
type caseFile struct {
	Cases []caseSpec `yaml:"cases"`
}

// caseSpec is one case as written in YAML.
type caseSpec struct {
	Name        string         `yaml:"name"`
	Description string         `yaml:"description"`
	Client      map[string]any `yaml:"client"`
	Faults      []faultSpec    `yaml:"faults"`
	Steps       []map[string]any
	Requests    []requestSpec `yaml:"requests"`
	// TimeoutSeconds bounds the whole case in one adapter (default 60).
	TimeoutSeconds int `yaml:"timeoutSeconds"`
	// Exclusive runs the case alone on the broker (no other case of any SDK meanwhile), for
	// cases that switch broker-wide state (push or pop maintenance); the runner checks after it
	// that the switches are off again.
	Exclusive bool `yaml:"exclusive"`
	// Needs names what the case requires of the broker beyond its API (brokerNeeds); a
	// broker not known to meet it skips the case.
	Needs []string `yaml:"needs"`
}

// faultSpec is a broker fault rule plus what its counters must read after the case.
type faultSpec struct {
	Method string `yaml:"method" json:"method,omitempty"`
	Path   string `yaml:"path" json:"path"`
	// Query names parameters a request must carry to match the rule (a value, a prefix ending
	// in "*", or "*" for any value): {after: "*"} is every page of a listing but the first.
	Query     map[string]string `yaml:"query" json:"query,omitempty"`
	Responses []map[string]any  `yaml:"responses" json:"responses,omitempty"`
	Expect    map[string]any    `yaml:"expect" json:"-"`
}

// forRun is the rule with the run's names in its path and scripted answers (a scripted page
// of a listing names the case's queues); the case's own rule is left as it is for the next run.
func (f faultSpec) forRun(vars map[string]string) faultSpec {
	f.Path = substitute(f.Path, vars).(string)
	if f.Query != nil {
		query := make(map[string]string, len(f.Query))
		for k, v := range f.Query {
			query[k] = substitute(v, vars).(string)
		}
		f.Query = query
	}
	responses := make([]map[string]any, len(f.Responses))
	for i, r := range f.Responses {
		responses[i] = substitute(r, vars).(map[string]any)
	}
	f.Responses = responses
	return f
}

// requestSpec expects a request the SDK sent (recorded by the proxy), in order: its path,
// where a "*" stands for one segment (an id the case cannot know, such as a partition id);
// its query byte for byte, or, with params, its parameters in any order (the order an SDK
// writes them in is not the contract; what it sends is), a value "*" standing for any value
// (an opaque listing key).
type requestSpec struct {
	Method string            `yaml:"method"`
	Path   string            `yaml:"path"`
	Query  string            `yaml:"query"`
	Params map[string]string `yaml:"params"`
	// Headers name headers the request must carry, each value matched as a request path is
	// (a * stands for any text but a /).
	Headers map[string]string `yaml:"headers"`
}

// matches says whether a recorded request is the one r expects, its query aside.
func (r requestSpec) matches(method, path string, vars map[string]string) bool {
	return method == r.Method && globMatch(substitute(r.Path, vars).(string), path)
}

// queryProblem says how a recorded query differs from the spec's (substituted) query or
// params, "" when it matches.
func (r requestSpec) queryProblem(query string, vars map[string]string) string {
	if r.Params == nil {
		if want := substitute(r.Query, vars).(string); query != want {
			return fmt.Sprintf("query %q, want %q", query, want)
		}
		return ""
	}
	got, err := url.ParseQuery(query)
	want := map[string]any{}
	for k, v := range r.Params {
		want[substitute(k, vars).(string)] = substitute(v, vars)
	}
	same := err == nil && len(got) == len(want)
	for k, v := range want {
		same = same && len(got[k]) == 1 && (got[k][0] == v || v == "*")
	}
	if !same {
		return fmt.Sprintf("query %q, want the parameters %s in any order", query, show(want))
	}
	return ""
}

// headerProblem says how the recorded headers differ from the ones the spec names, "" when
// they match. A named header must come once: two lines of one name (in any letter case) are a
// problem even when one of them holds the wanted value.
func (r requestSpec) headerProblem(h http.Header, vars map[string]string) string {
	var problems []string
	for k, v := range r.Headers {
		want := substitute(v, vars).(string)
		if got := h.Values(k); len(got) > 1 {
			problems = append(problems, fmt.Sprintf("header %s sent %d times %q, want once %q", k, len(got), got, want))
		} else if !globMatch(want, h.Get(k)) {
			problems = append(problems, fmt.Sprintf("header %s %q, want %q", k, h.Get(k), want))
		}
	}
	sort.Strings(problems)
	return strings.Join(problems, "; ")
}

// step is one step as sent to an adapter.
type step struct {
	ID         string          `json:"id"`
	Op         string          `json:"op"`
	Args       map[string]any  `json:"args"`
	Background *backgroundSpec `json:"background,omitempty"`
	expect     any
}

// backgroundSpec starts a step AfterMs after the previous one without waiting for it, so it
// runs during the steps after it (a push while a pop is parked); the adapter reports its result
// before the case ends. Only push may run in the background: it shares no saved state.
type backgroundSpec struct {
	AfterMs int `json:"afterMs"`
}

// testCase is a loaded case: ID is "<file stem>/<name>".
type testCase struct {
	ID    string
	Spec  caseSpec
	Steps []step
}

var stepKeys = map[string]bool{"id": true, "expect": true, "background": true}

func loadCases(dir string) ([]testCase, error) {
	files, err := filepath.Glob(filepath.Join(dir, "*.yaml"))
	if err != nil {
		return nil, err
	}
	sort.Strings(files)
	var out []testCase
	seen := map[string]bool{}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			return nil, err
		}
		var cf caseFile
		dec := yaml.NewDecoder(strings.NewReader(string(b)))
		dec.KnownFields(true)
		if err := dec.Decode(&cf); err != nil {
			return nil, fmt.Errorf("%s: %w", f, err)
		}
		stem := strings.TrimSuffix(filepath.Base(f), ".yaml")
		for _, cs := range cf.Cases {
			id := stem + "/" + cs.Name
			if cs.Name == "" || seen[id] {
				return nil, fmt.Errorf("%s: case name %q empty or repeated", f, cs.Name)
			}
			seen[id] = true
			if err := checkClientArgs(cs.Client); err != nil {
				return nil, fmt.Errorf("%s: case %s: %w", f, cs.Name, err)
			}
			for _, n := range cs.Needs {
				if _, ok := brokerNeeds[n]; !ok {
					return nil, fmt.Errorf("%s: case %s: needs: unknown need %q", f, cs.Name, n)
				}
			}
			tc := testCase{ID: id, Spec: cs}
			for i, raw := range cs.Steps {
				st := step{ID: fmt.Sprintf("s%d", i+1)}
				if v, ok := raw["id"].(string); ok {
					st.ID = v
				}
				st.expect = normalize(raw["expect"])
				for k, v := range raw {
					if stepKeys[k] {
						continue
					}
					if st.Op != "" {
						return nil, fmt.Errorf("%s: case %s step %d names two operations (%s, %s)", f, cs.Name, i+1, st.Op, k)
					}
					st.Op = k
					args, _ := normalize(v).(map[string]any)
					if args == nil {
						args = map[string]any{}
					}
					st.Args = args
				}
				if st.Op == "" {
					return nil, fmt.Errorf("%s: case %s step %d has no operation", f, cs.Name, i+1)
				}
				if err := checkStepArgs(st.Op, st.Args); err != nil {
					return nil, fmt.Errorf("%s: case %s step %d: %w", f, cs.Name, i+1, err)
				}
				if bg, ok := raw["background"]; ok {
					if st.Background, err = decodeBackground(st.Op, bg); err != nil {
						return nil, fmt.Errorf("%s: case %s step %d: %w", f, cs.Name, i+1, err)
					}
				}
				tc.Steps = append(tc.Steps, st)
			}
			out = append(out, tc)
		}
	}
	return out, nil
}

// normalize turns YAML-decoded values into what encoding/json would produce
// (map[string]any, []any, float64), so expectations compare with adapter output.
func normalize(v any) any {
	b, err := json.Marshal(v)
	if err != nil {
		return v
	}
	var out any
	_ = json.Unmarshal(b, &out)
	return out
}

// substitute replaces ${q} (the case run's queue name) and ${run} in every string of v, map
// keys included (a consumer group's detail is keyed by queue name).
func substitute(v any, vars map[string]string) any {
	switch t := v.(type) {
	case string:
		for k, val := range vars {
			t = strings.ReplaceAll(t, "${"+k+"}", val)
		}
		return t
	case map[string]any:
		out := make(map[string]any, len(t))
		for k, x := range t {
			out[substitute(k, vars).(string)] = substitute(x, vars)
		}
		return out
	case []any:
		out := make([]any, len(t))
		for i, x := range t {
			out[i] = substitute(x, vars)
		}
		return out
	default:
		return v
	}
}

// decodeBackground reads a step's background: {afterMs: N}, for a push only.
func decodeBackground(op string, v any) (*backgroundSpec, error) {
	if op != "push" {
		return nil, fmt.Errorf("background: only a push step may run in the background, not %s", op)
	}
	m, ok := normalize(v).(map[string]any)
	after, isNum := m["afterMs"].(float64)
	if !ok || len(m) != 1 || !isNum || after < 0 {
		return nil, fmt.Errorf("background: want {afterMs: N}, got %s", show(normalize(v)))
	}
	return &backgroundSpec{AfterMs: int(after)}, nil
}
