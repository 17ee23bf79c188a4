package api

import (
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// readmeCommand is one curl of the README walkthrough and the answer lines shown after it.
type readmeCommand struct {
	line    int
	args    []string
	answers []string
}

var (
	readmeWalkthrough  = regexp.MustCompile("(?s)## Walkthrough\n.*?```sh\n(.*?)```(.*?)\n## ")
	readmeInlineCurl   = regexp.MustCompile("`(curl [^`]+)`\\s+answers\\s+`([0-9]{3}) (\\{[^`]*\\})`")
	readmeShownField   = regexp.MustCompile(`"(\w+)":("[^"]*"|true|false|null|-?[0-9.]+)`)
	readmeQueueName    = regexp.MustCompile(`\borders\b`)
	readmePlaceholders = regexp.MustCompile(`<(\w+)>`)
)

// TestReadmeWalkthroughRunsAsShown sends every curl of README.md's walkthrough, and the error
// example after it, to a broker as curl would (-d is a POST with curl's form content type), in
// order, with the queue renamed to one of this run. Each must answer 2xx (the error example: its
// code), and every field an answer line shows with a value (not "…") must be in the answer.
// <partitionId> and <leaseId> take the values of the last pop, as a reader copies them.
func TestReadmeWalkthroughRunsAsShown(t *testing.T) {
	t.Parallel()
	b := newTestBroker(t)
	readme, err := os.ReadFile(filepath.Join("..", "..", "..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	found := readmeWalkthrough.FindSubmatchIndex(readme)
	if found == nil {
		t.Fatal("README.md has no sh block under ## Walkthrough")
	}
	queue := uniqueQueue(t)
	firstLine := 1 + strings.Count(string(readme[:found[2]]), "\n")
	commands := readmeCurls(t, string(readme[found[2]:found[3]]), firstLine)
	if len(commands) < 5 {
		t.Fatalf("README.md walkthrough: %d curl commands, want at least 5", len(commands))
	}

	last := map[string]string{}
	for _, c := range commands {
		body, status := b.curl(t, c, queue, last)
		if status/100 != 2 {
			t.Fatalf("README.md:%d answered %d: %s", c.line, status, body)
		}
		for _, shown := range c.answers {
			requireShownFields(t, c.line, readmeQueueName.ReplaceAllString(shown, queue), body)
		}
		var pop struct {
			LeaseID  string `json:"leaseId"`
			Messages []struct {
				PartitionID string `json:"partitionId"`
			} `json:"messages"`
		}
		if json.Unmarshal([]byte(body), &pop) == nil && pop.LeaseID != "" && len(pop.Messages) > 0 {
			last["leaseId"], last["partitionId"] = pop.LeaseID, pop.Messages[0].PartitionID
		}
	}

	after := string(readme[:found[5]])
	inline := readmeInlineCurl.FindAllStringSubmatchIndex(after[found[4]:], -1)
	if len(inline) == 0 {
		t.Fatal("README.md: no error example (`curl …` answers `400 {…}`) after the walkthrough")
	}
	for _, at := range inline {
		m := make([]string, 4)
		for i := range m {
			m[i] = after[found[4]+at[2*i] : found[4]+at[2*i+1]]
		}
		c := readmeCurls(t, m[1]+"\n", 1+strings.Count(after[:found[4]+at[0]], "\n"))[0]
		body, status := b.curl(t, c, queue, last)
		if strconv.Itoa(status) != m[2] {
			t.Fatalf("README.md error example %s answered %d, not %s: %s", m[1], status, m[2], body)
		}
		requireShownFields(t, c.line, m[3], body)
	}
}

// readmeCurls splits a shell block into its curl commands (single-quoted words may span lines)
// and attaches each "# → …" line to the command before it.
func readmeCurls(t *testing.T, block string, firstLine int) []readmeCommand {
	t.Helper()
	var (
		out     []readmeCommand
		words   []string
		word    strings.Builder
		inWord  bool
		quoted  bool
		comment bool
		line    = firstLine
		start   = firstLine
	)
	endWord := func() {
		if inWord {
			words = append(words, word.String())
			word.Reset()
			inWord = false
		}
	}
	var commentText strings.Builder
	for _, r := range block {
		switch {
		case comment:
			if r == '\n' {
				comment = false
				if text, ok := strings.CutPrefix(strings.TrimSpace(commentText.String()), "→ "); ok && len(out) > 0 {
					out[len(out)-1].answers = append(out[len(out)-1].answers, text)
				}
				commentText.Reset()
			} else {
				commentText.WriteRune(r)
			}
		case quoted:
			if r == '\'' {
				quoted = false
			} else {
				word.WriteRune(r)
			}
		case r == '\'':
			quoted, inWord = true, true
		case r == '#' && !inWord && len(words) == 0:
			comment = true
		case r == '\n':
			endWord()
			if len(words) > 0 {
				if words[0] != "curl" {
					t.Fatalf("README.md:%d: the walkthrough runs %q; this test knows curl only", start, words[0])
				}
				out = append(out, readmeCommand{line: start, args: words[1:]})
				words = nil
			}
		case r == ' ' || r == '\t':
			endWord()
		default:
			if !inWord && len(words) == 0 {
				start = line
			}
			word.WriteRune(r)
			inWord = true
		}
		if r == '\n' {
			line++
		}
	}
	if quoted {
		t.Fatalf("README.md:%d: unbalanced quote", start)
	}
	return out
}

// curl sends one README command as curl does and returns the answer's body and status.
func (b *testBroker) curl(t *testing.T, c readmeCommand, queue string, last map[string]string) (string, int) {
	t.Helper()
	method, target, body := http.MethodGet, "", ""
	for i := 0; i < len(c.args); i++ {
		switch a := c.args[i]; {
		case a == "-s":
		case a == "-d" && i+1 < len(c.args):
			method, body = http.MethodPost, c.args[i+1]
			i++
		case strings.HasPrefix(a, "localhost:6632/"):
			target = a
		default:
			t.Fatalf("README.md:%d: curl argument %q is not one this test knows", c.line, a)
		}
	}
	if target == "" {
		t.Fatalf("README.md:%d: no localhost:6632 URL", c.line)
	}
	fill := func(s string) string {
		s = readmeQueueName.ReplaceAllString(s, queue)
		return readmePlaceholders.ReplaceAllStringFunc(s, func(p string) string {
			v, ok := last[p[1:len(p)-1]]
			if !ok {
				t.Fatalf("README.md:%d: placeholder %s has no value from an earlier answer", c.line, p)
			}
			return v
		})
	}
	target = b.URL + strings.TrimPrefix(fill(target), "localhost:6632")
	var rd io.Reader
	if method == http.MethodPost {
		rd = strings.NewReader(fill(body))
	}
	req, err := http.NewRequest(method, target, rd)
	if err != nil {
		t.Fatal(err)
	}
	if method == http.MethodPost {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded") // what curl -d sends
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	got, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(got), resp.StatusCode
}

// requireShownFields checks that each "key":value the README shows is in the answer; values
// with "…" are abridged and only their key is checked.
func requireShownFields(t *testing.T, line int, shown, body string) {
	t.Helper()
	fields := readmeShownField.FindAllStringSubmatch(shown, -1)
	if len(fields) == 0 && !strings.Contains(shown, "…") {
		t.Fatalf("README.md:%d: answer line %q shows no field", line, shown)
	}
	for _, f := range fields {
		want := `"` + f[1] + `":` + f[2]
		if strings.Contains(f[2], "…") {
			want = `"` + f[1] + `":`
		}
		if !strings.Contains(body, want) {
			t.Errorf("README.md:%d shows %s; the answer has not: %s", line, want, body)
		}
	}
	if strings.Contains(shown, `"messages":[{`) && strings.Contains(body, `"messages":[]`) {
		t.Errorf("README.md:%d shows messages; the answer has none: %s", line, body)
	}
}
