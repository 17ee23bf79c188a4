package config

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
)

const repoRoot = "../../.."

// otherVariables are the LANES_* variables the docs may name that are not broker
// settings, each with a file that reads it (checked, so the list cannot rot).
var otherVariables = map[string]string{
	"LANES_URL":                     "sdk-go/client.go",
	"LANES_SDK_POP_AUTOPILOT":       "sdk-go/client.go",
	"LANES_CLIENT_LOG":              "sdk-js/src/internal/log.ts",
	"LANES_TEST_URL":                "scripts/make-with-test-broker.sh",
	"LANES_TEST_AUTH_URL":           "scripts/make-with-test-broker.sh",
	"LANES_TEST_PORT":               "scripts/test-broker.sh",
	"LANES_TEST_JWT_SECRET":         "scripts/test-broker.sh",
	"LANES_TEST_DATABASE_URL":       "server/internal/testdb/testdb.go",
	"LANES_PG_PORT":                 "scripts/pg.sh",
	"LANES_PG_DIR":                  "scripts/pg.sh",
	"LANES_PG_FAST":                 "scripts/pg.sh",
	"LANES_FUZZ_PORT":               "scripts/fuzz-api.sh",
	"LANES_CONFORMANCE_BROKER_PORT": "conformance/cmd/conformance/main.go",
	"LANES_CONFORMANCE_PROXY_PORT":  "conformance/cmd/conformance/main.go",
}

// skippedPathSegments are build outputs and local state: made by make deps,
// make build or scripts/pg.sh, never committed.
var skippedPathSegments = map[string]bool{
	".git": true, "node_modules": true, ".venv": true, "dist": true, "bin": true, ".lanes": true,
	"__pycache__": true, ".mypy_cache": true, ".ruff_cache": true, ".pytest_cache": true,
}

// checkedDocs are the Markdown files whose references are checked: docs/*.md
// and every README.md.
func checkedDocs(t *testing.T) []string {
	t.Helper()
	docs, err := filepath.Glob(filepath.Join(repoRoot, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	err = filepath.WalkDir(repoRoot, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && skippedPathSegments[d.Name()] {
			return filepath.SkipDir
		}
		if !d.IsDir() && d.Name() == "README.md" {
			docs = append(docs, path)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return docs
}

// repoTree is every file and folder of the repository (build outputs left out),
// as slash-separated paths from its root.
type repoTree struct {
	paths       map[string]bool
	topLevel    map[string]bool
	folderNames map[string]bool
}

func readRepoTree(t *testing.T) repoTree {
	t.Helper()
	tree := repoTree{paths: map[string]bool{}, topLevel: map[string]bool{}, folderNames: map[string]bool{}}
	err := filepath.WalkDir(repoRoot, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(repoRoot, path)
		if rel == "." {
			return nil
		}
		if d.IsDir() && skippedPathSegments[d.Name()] {
			return filepath.SkipDir
		}
		rel = filepath.ToSlash(rel)
		tree.paths[rel] = true
		if d.IsDir() {
			tree.folderNames[d.Name()] = true
		}
		if !strings.Contains(rel, "/") {
			tree.topLevel[rel] = true
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return tree
}

// hasSuffix reports whether some path of the tree ends in the given folder-relative
// path, as the docs' short forms (`api/push.go`, `engine/schema/`, `pg.sh`) name one.
func (tree repoTree) hasSuffix(short string) bool {
	for p := range tree.paths {
		if p == short || strings.HasSuffix(p, "/"+short) {
			return true
		}
	}
	return false
}

var (
	inlineCode  = regexp.MustCompile("`([^`\n]+)`")
	fencedBlock = regexp.MustCompile("(?ms)^```.*?^```")
	fileLike    = regexp.MustCompile(`\.(go|ts|mjs|py|sql|sh|md|yaml|yml|toml|txt|json)$`)
	// A Markdown link to a file of the repository, without its #anchor.
	relativeLink = regexp.MustCompile(`\]\(([^)#:\s]+)(?:#[^)]*)?\)`)
	// A variable, possibly with a {A,B} alternative list or a trailing * glob.
	variableRef = regexp.MustCompile(`LANES_[A-Z0-9_]*(\{[A-Z0-9_,]+\}[A-Z0-9_]*)?\*?`)
)

// pathRef returns the repository path a token of inline code names, if it names
// one, and whether it is written from the root (else it is a short form, the end
// of a path: `api/push.go`, `engine/schema/`, `pg.sh`). A short form is a path
// only when it ends in a file name or starts with a folder name of the tree.
// Placeholders (`<area>`, `{id}`, `NNN`), globs, routes, URLs, module paths and
// build outputs are not repository paths.
func pathRef(token string, tree repoTree) (path string, fromRoot, ok bool) {
	token = strings.TrimPrefix(strings.Trim(token, ",;:()'\""), "./")
	if token == "" || strings.ContainsAny(token, "<>{}*?[]|…=:@$%") || strings.HasPrefix(token, "/") ||
		strings.HasPrefix(token, "-") || strings.Contains(token, "NNN") {
		return "", false, false
	}
	path = strings.TrimSuffix(token, "/")
	segments := strings.Split(path, "/")
	for _, seg := range segments {
		if skippedPathSegments[seg] {
			return "", false, false
		}
	}
	if tree.topLevel[segments[0]] && (len(segments) > 1 || fileLike.MatchString(path)) {
		return path, true, true
	}
	if fileLike.MatchString(segments[len(segments)-1]) || len(segments) > 1 && tree.folderNames[segments[0]] {
		return path, false, true
	}
	return "", false, false
}

// TestDocsNameOnlyPathsAndVariablesThatExist keeps docs/*.md and the READMEs
// true to the repository: every path in inline code exists (a file, a folder,
// or the end of one's path), every relative link's target exists, and every LANES_* variable is a broker setting or
// one of otherVariables; the code names they give are words of some source
// file; every route they name is an operation of openapi.yaml, every error
// code one the spec lists and every make target one of the Makefile; and
// docs/architecture.md places every folder of code and names every file of
// filedFolders.
func TestDocsNameOnlyPathsAndVariablesThatExist(t *testing.T) {
	tree := readRepoTree(t)
	known := map[string]bool{}
	for _, s := range settings {
		known[s.env] = true
	}
	for name, reader := range otherVariables {
		raw, err := os.ReadFile(filepath.Join(repoRoot, reader))
		if err != nil || !strings.Contains(string(raw), name) {
			t.Errorf("otherVariables: %s does not read %s", reader, name)
		}
		known[name] = true
	}

	var problems []string
	for _, doc := range checkedDocs(t) {
		raw, err := os.ReadFile(doc)
		if err != nil {
			t.Fatal(err)
		}
		rel, _ := filepath.Rel(repoRoot, doc)
		text := string(raw)
		prose := fencedBlock.ReplaceAllString(text, "")
		for _, m := range inlineCode.FindAllStringSubmatch(prose, -1) {
			for _, token := range strings.Fields(m[1]) {
				path, fromRoot, ok := pathRef(token, tree)
				if !ok || tree.paths[path] {
					continue
				}
				if fromRoot || !tree.hasSuffix(path) {
					problems = append(problems, rel+": no such path `"+path+"`")
				}
			}
		}
		for _, m := range relativeLink.FindAllStringSubmatch(prose, -1) {
			if _, err := os.Stat(filepath.Join(filepath.Dir(doc), m[1])); err != nil {
				problems = append(problems, rel+": no such link target "+m[1])
			}
		}
		for _, name := range variableRef.FindAllString(text, -1) {
			if !variableExists(name, known) {
				problems = append(problems, rel+": no such setting or variable "+name)
			}
		}
	}
	problems = append(problems, namesMissingFromCode(t, tree)...)
	problems = append(problems, routesMissingFromSpec(t)...)
	problems = append(problems, errorCodesMissingFromSpec(t)...)
	problems = append(problems, makeTargetsMissing(t)...)
	problems = append(problems, foldersArchitectureLeavesOut(t, tree)...)
	problems = append(problems, filesArchitectureLeavesOut(t, tree)...)
	if len(problems) > 0 {
		sort.Strings(problems)
		t.Fatalf("the docs and the repository disagree (fix the doc; a variable that is no setting goes in otherVariables with the file that reads it, a name from outside the repository in outsideNames):\n%s",
			strings.Join(dedupe(problems), "\n"))
	}
}

var (
	codeName   = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*(\(\))?$`)
	identifier = regexp.MustCompile(`[A-Za-z_][A-Za-z0-9_]*`)
	sourceFile = regexp.MustCompile(`\.(go|sql|ts|mjs|py|yaml|yml|sh|toml)$`)
)

// outsideNames are the code names the checked docs quote from outside this
// repository, each with where it comes from: no source file here holds them.
var outsideNames = map[string]string{
	"tcp_retries2":            "Linux's TCP retransmission setting (operations.md)",
	"QUEEN_KV_MAX_READ_BYTES": "the reference broker's KV read budget (operations.md, wire-compatibility.md)",
}

// namesUnchecked are the docs whose code names are not checked: the benchmark
// notes quote profiler symbols of PostgreSQL, the kernel and libraries.
var namesUnchecked = map[string]bool{"docs/benchmarks.md": true}

// namesMissingFromCode lists the functions, types, fields, options, columns
// and metrics the docs name in inline code (camelCase, PascalCase, snake_case
// or dotted: `engine.ReplayPush`, `claimWindow`, `last_write_xid`) whose last
// part is a word of no source file: renamed or removed since.
func namesMissingFromCode(t *testing.T, tree repoTree) []string {
	t.Helper()
	words := map[string]bool{}
	for p := range tree.paths {
		if !sourceFile.MatchString(p) {
			continue
		}
		raw, err := os.ReadFile(filepath.Join(repoRoot, p))
		if err != nil {
			continue // a folder named like a file
		}
		for _, w := range identifier.FindAll(raw, -1) {
			words[string(w)] = true
		}
	}
	var missing []string
	for _, doc := range checkedDocs(t) {
		rel, _ := filepath.Rel(repoRoot, doc)
		rel = filepath.ToSlash(rel)
		if namesUnchecked[rel] {
			continue
		}
		raw, err := os.ReadFile(doc)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range inlineCode.FindAllStringSubmatch(fencedBlock.ReplaceAllString(string(raw), ""), -1) {
			name := m[1]
			if !codeName.MatchString(name) || !strings.ContainsAny(name, "._ABCDEFGHIJKLMNOPQRSTUVWXYZ") {
				continue // a plain word: a wire value or prose
			}
			last := strings.TrimSuffix(name[strings.LastIndex(name, ".")+1:], "()")
			if !words[last] && !fileLike.MatchString(name) && outsideNames[name] == "" {
				missing = append(missing, rel+": no source file has `"+name+"`")
			}
		}
	}
	return missing
}

// placedRoots are where every folder of code must be placed in docs/architecture.md.
var placedRoots = []string{"server/", "sdk-go/", "sdk-js/src/", "sdk-python/src/", "conformance/", "bench/", "scripts/", "tools/"}

var (
	codeFile     = regexp.MustCompile(`\.(go|ts|mjs|py|sh|sql)$`)
	testCodeFile = regexp.MustCompile(`(_test\.go|\.test\.ts|/test_[^/]*\.py|/conftest\.py)$`)
	placeholder  = regexp.MustCompile(`[<>{}*?\[\]|…]`)
)

// architecturePlaces is every path of the tree docs/architecture.md names in
// inline code (a file, by its path or the end of it, or a folder), with the
// folder of each file it names.
func architecturePlaces(t *testing.T, tree repoTree) map[string]bool {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(repoRoot, "docs", "architecture.md"))
	if err != nil {
		t.Fatal(err)
	}
	placed := map[string]bool{}
	place := func(p string) {
		placed[p] = true
		if i := strings.LastIndex(p, "/"); i > 0 && fileLike.MatchString(p) {
			placed[p[:i]] = true
		}
	}
	for _, m := range inlineCode.FindAllStringSubmatch(fencedBlock.ReplaceAllString(string(raw), ""), -1) {
		for _, token := range strings.Fields(m[1]) {
			token = strings.TrimSuffix(strings.TrimPrefix(strings.Trim(token, ",;:()'\""), "./"), "/")
			if loc := placeholder.FindStringIndex(token); loc != nil {
				token = token[:loc[0]] // `conformance/cases/<concern>.yaml` places its folder
				token = strings.TrimSuffix(token[:strings.LastIndex(token, "/")+1], "/")
			}
			if token == "" {
				continue
			}
			for p := range tree.paths {
				if p == token || strings.Contains(token, "/") && strings.HasSuffix(p, "/"+token) || fileLike.MatchString(token) && strings.HasSuffix(p, "/"+token) {
					place(p)
				}
			}
		}
	}
	return placed
}

// foldersArchitectureLeavesOut lists the folders of code (test folders and
// testdata aside) that docs/architecture.md does not place: it names neither
// the folder nor a file in it.
func foldersArchitectureLeavesOut(t *testing.T, tree repoTree) []string {
	t.Helper()
	placed := architecturePlaces(t, tree)
	var missing []string
	for p := range tree.paths {
		if !codeFile.MatchString(p) || testCodeFile.MatchString(p) {
			continue
		}
		dir := p[:max(strings.LastIndex(p, "/"), 0)]
		inRoot := false
		for _, root := range placedRoots {
			inRoot = inRoot || strings.HasPrefix(p, root)
		}
		segments := "/" + dir + "/"
		if !inRoot || placed[dir] || strings.Contains(segments, "/testdata/") || strings.Contains(segments, "/test/") || strings.Contains(segments, "/tests/") {
			continue
		}
		missing = append(missing, "docs/architecture.md: does not place the folder `"+dir+"` (its files or the folder itself, in \"Where the code is\")")
	}
	return missing
}

// variableExists accepts a variable, each name of a {A,B} list, and a prefix
// glob (LANES_MAX_*) that some known variable starts with.
func variableExists(name string, known map[string]bool) bool {
	if prefix, glob := strings.CutSuffix(name, "*"); glob {
		for k := range known {
			if strings.HasPrefix(k, prefix) {
				return true
			}
		}
		return false
	}
	if open := strings.Index(name, "{"); open >= 0 {
		closing := strings.Index(name, "}")
		for _, alt := range strings.Split(name[open+1:closing], ",") {
			if !known[name[:open]+alt+name[closing+1:]] {
				return false
			}
		}
		return true
	}
	return known[name]
}

func dedupe(sorted []string) []string {
	out := sorted[:0]
	for i, s := range sorted {
		if i == 0 || s != sorted[i-1] {
			out = append(out, s)
		}
	}
	return out
}

// filedFolders are the folders whose row of "Where the code is" names their
// files one by one (the engine's ends in "…" and is left out): a file added
// there is placed too, or the row stops saying what the folder holds.
var filedFolders = []string{
	"server/cmd/lanes", "server/internal/api", "server/internal/auth", "server/internal/admission",
	"server/internal/spool", "server/internal/testdb", "sdk-go", "sdk-js/src", "sdk-js/src/internal",
	"sdk-python/src/lanes", "sdk-python/bench", "conformance/cmd/conformance", "bench/cmd/lanes-bench", "scripts",
}

// filesArchitectureLeavesOut lists the code files (tests aside) of
// filedFolders that docs/architecture.md does not name.
func filesArchitectureLeavesOut(t *testing.T, tree repoTree) []string {
	t.Helper()
	placed := architecturePlaces(t, tree)
	filed := map[string]bool{}
	for _, dir := range filedFolders {
		filed[dir] = true
	}
	var missing []string
	for p := range tree.paths {
		dir := p[:max(strings.LastIndex(p, "/"), 0)]
		if !filed[dir] || !codeFile.MatchString(p) || testCodeFile.MatchString(p) || placed[p] {
			continue
		}
		missing = append(missing, "docs/architecture.md: does not name `"+p+"` in its folder's row of \"Where the code is\"")
	}
	return missing
}

// docsText returns each checked doc's text by its path from the repository root.
func docsText(t *testing.T) map[string]string {
	t.Helper()
	texts := map[string]string{}
	for _, doc := range checkedDocs(t) {
		raw, err := os.ReadFile(doc)
		if err != nil {
			t.Fatal(err)
		}
		rel, _ := filepath.Rel(repoRoot, doc)
		texts[filepath.ToSlash(rel)] = string(raw)
	}
	return texts
}

func readSpec(t *testing.T) string {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(repoRoot, "openapi.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	return string(raw)
}

var (
	specPath      = regexp.MustCompile(`^  (/\S*):$`)
	specMethod    = regexp.MustCompile(`^    (get|put|post|delete|patch|head):`)
	specParameter = regexp.MustCompile(`\\\{[^}]*\\\}`)
	// A route in inline code: `GET /api/v1/pop/queue/{queue}`, `POST /push`,
	// `DELETE /api/v1/dlq/:id` (a query string is allowed and ignored).
	routeRef     = regexp.MustCompile(`^(GET|HEAD|POST|PUT|PATCH|DELETE) (/[^?\s]*)(\?\S*)?$`)
	colonParam   = regexp.MustCompile(`:[A-Za-z]+`)
	statusCode   = regexp.MustCompile("`[45][0-9][0-9] ([a-z][a-z_]*)`")
	namedCode    = regexp.MustCompile("\\bcode `([a-z][a-z_]*)`")
	makeTarget   = regexp.MustCompile(`(?:^|[\s;&(])make ((?:[A-Z_]+=\S+ )*)([a-z][a-z0-9-]*)`)
	makefileRule = regexp.MustCompile(`(?m)^([A-Za-z0-9_.-]+)\s*:($|[^=])`)
)

// routesMissingFromSpec lists the routes the docs name in inline code (a
// method and a path, the path whole or without its /api/v1 prefix, with
// {name} or :name parameters) that are no operation of openapi.yaml. Paths
// abbreviated with … or optional parts in [ ] are left alone.
func routesMissingFromSpec(t *testing.T) []string {
	t.Helper()
	type specRoute struct {
		path    *regexp.Regexp
		methods map[string]bool
	}
	var routes []specRoute
	for _, line := range strings.Split(readSpec(t), "\n") {
		if m := specPath.FindStringSubmatch(line); m != nil {
			pattern := "^" + specParameter.ReplaceAllString(regexp.QuoteMeta(m[1]), "[^/]+") + "$"
			routes = append(routes, specRoute{regexp.MustCompile(pattern), map[string]bool{}})
		} else if m := specMethod.FindStringSubmatch(line); m != nil && len(routes) > 0 {
			routes[len(routes)-1].methods[strings.ToUpper(m[1])] = true
		}
	}
	if len(routes) == 0 {
		t.Fatal("openapi.yaml: no paths read")
	}
	var missing []string
	for doc, text := range docsText(t) {
		for _, m := range inlineCode.FindAllStringSubmatch(fencedBlock.ReplaceAllString(text, ""), -1) {
			ref := routeRef.FindStringSubmatch(m[1])
			if ref == nil || strings.ContainsAny(ref[2], "…[") {
				continue
			}
			method, path := ref[1], colonParam.ReplaceAllString(ref[2], "x")
			found := false
			for _, r := range routes {
				if (r.path.MatchString(path) || r.path.MatchString("/api/v1"+path)) &&
					(r.methods[method] || method == "HEAD" && r.methods["GET"]) {
					found = true
				}
			}
			if !found {
				missing = append(missing, doc+": openapi.yaml has no operation `"+m[1]+"`")
			}
		}
	}
	return missing
}

// errorCodesMissingFromSpec lists the error codes the docs give (`400
// bad_request`, code `maintenance`) that the spec's Error.code does not list;
// TestEveryErrorCodeIsInTheSpec (api) keeps that list equal to errorcodes.go.
func errorCodesMissingFromSpec(t *testing.T) []string {
	t.Helper()
	spec := readSpec(t)
	begin := strings.Index(spec, "\n    Error:\n")
	if begin < 0 {
		t.Fatal("openapi.yaml: no Error schema")
	}
	block := spec[begin+1:]
	if end := regexp.MustCompile(`\n    [A-Za-z]+:\n`).FindStringIndex(block); end != nil {
		block = block[:end[0]]
	}
	codes := map[string]bool{}
	for _, m := range inlineCode.FindAllStringSubmatch(block, -1) {
		codes[m[1]] = true
	}
	var missing []string
	for doc, text := range docsText(t) {
		for _, re := range []*regexp.Regexp{statusCode, namedCode} {
			for _, m := range re.FindAllStringSubmatch(text, -1) {
				if !codes[m[1]] {
					missing = append(missing, doc+": openapi.yaml's Error.code does not list `"+m[1]+"`")
				}
			}
		}
	}
	return missing
}

// makeTargetsMissing lists the make targets the docs' commands name (in inline
// code or a fenced block) that the Makefile has no rule for.
func makeTargetsMissing(t *testing.T) []string {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(repoRoot, "Makefile"))
	if err != nil {
		t.Fatal(err)
	}
	targets := map[string]bool{}
	for _, m := range makefileRule.FindAllStringSubmatch(string(raw), -1) {
		targets[m[1]] = true
	}
	var missing []string
	for doc, text := range docsText(t) {
		var commands []string
		for _, m := range inlineCode.FindAllStringSubmatch(fencedBlock.ReplaceAllString(text, ""), -1) {
			commands = append(commands, m[1])
		}
		commands = append(commands, fencedBlock.FindAllString(text, -1)...)
		for _, command := range commands {
			for _, m := range makeTarget.FindAllStringSubmatch(command, -1) {
				if !targets[m[2]] {
					missing = append(missing, doc+": the Makefile has no target `make "+m[2]+"`")
				}
			}
		}
	}
	return missing
}
