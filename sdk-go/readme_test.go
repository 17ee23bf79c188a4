package lanes_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

var (
	readmeGoBlock = regexp.MustCompile("(?s)```go\n(.*?)```")
	// A queue a block names, on the builder or to ConfigureQueue: group 1 is the call, 2 the name.
	readmeQueueCall = regexp.MustCompile(`(\.Queue\(|ConfigureQueue\(ctx, )"([^"]+)"`)
)

// The test stands in for SIGTERM, as the JS README test does: the signal context ends after 500 ms.
const (
	readmeSignal        = "signal.NotifyContext(context.Background(), syscall.SIGTERM)"
	readmeSignalStandIn = "context.WithTimeout(context.Background(), 500*time.Millisecond)"
)

// TestITReadmeGoBlocks runs every Go block of README.md against the broker, as the JS and
// Python README tests run theirs. Each block becomes a function of testdata/readme/main.go, in a
// module that requires this SDK through a replace (README's install section), with queue names
// made unique; the program is built once and runs each block. A block that does not compile,
// panics or returns an error fails.
func TestITReadmeGoBlocks(t *testing.T) {
	t.Parallel()
	url := testBrokerURL(t)
	sdkDir, err := os.Getwd()
	require.NoError(t, err)
	readme, err := os.ReadFile("README.md")
	require.NoError(t, err)
	harness, err := os.ReadFile(filepath.Join("testdata", "readme", "main.go"))
	require.NoError(t, err)

	found := readmeGoBlock.FindAllSubmatchIndex(readme, -1)
	require.GreaterOrEqual(t, len(found), 7, "README.md Go blocks")
	src := string(harness)
	table := ""
	lines := make([]int, len(found))
	suffix := strconv.FormatInt(time.Now().UnixNano(), 36)
	for i, m := range found {
		code := string(readme[m[2]:m[3]])
		lines[i] = 1 + strings.Count(string(readme[:m[2]]), "\n")
		code = strings.ReplaceAll(code, readmeSignal, readmeSignalStandIn)
		require.NotContains(t, code, "signal.Notify", "README.md:%d waits for a signal the test does not stand in for", lines[i])
		var queues []string
		code = readmeQueueCall.ReplaceAllStringFunc(code, func(call string) string {
			parts := readmeQueueCall.FindStringSubmatch(call)
			name := fmt.Sprintf("%s-readme-%s-%d", parts[2], suffix, i+1)
			if !slices.Contains(queues, name) {
				queues = append(queues, name)
			}
			return parts[1] + strconv.Quote(name)
		})
		// The line directive makes compile errors and panics name README.md's lines.
		src += fmt.Sprintf("\nfunc readmeBlock%d(ctx context.Context) error {\n//line %s:%d\n%sreturn nil\n}\n",
			i+1, filepath.Join(sdkDir, "README.md"), lines[i], code)
		table += fmt.Sprintf("\t{run: readmeBlock%d, queues: %#v},\n", i+1, queues)
	}
	src += "\nvar blocks = []readmeBlock{\n" + table + "}\n"

	dir := t.TempDir()
	goMod, err := os.ReadFile("go.mod")
	require.NoError(t, err)
	mod := regexp.MustCompile(`(?m)^module .*$`).ReplaceAllString(string(goMod), "module readme") +
		"\nrequire github.com/lanesmq/lanes/sdk-go v0.0.0\n\nreplace github.com/lanesmq/lanes/sdk-go => " + sdkDir + "\n"
	goSum, err := os.ReadFile("go.sum")
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "go.mod"), []byte(mod), 0o600))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "go.sum"), goSum, 0o600))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "main.go"), []byte(src), 0o600))
	bin := filepath.Join(dir, "readme")
	build := exec.Command("go", "build", "-o", bin, ".")
	build.Dir = dir
	build.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=-mod=mod")
	out, err := build.CombinedOutput()
	require.NoError(t, err, "the README.md Go blocks do not build:\n%s", out)

	for i := range found {
		t.Run(fmt.Sprintf("README.md:%d", lines[i]), func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			run := exec.CommandContext(ctx, bin, strconv.Itoa(i))
			run.Env = append(os.Environ(), "LANES_TEST_URL="+url)
			out, err := run.CombinedOutput()
			require.NoError(t, err, "the block at README.md:%d:\n%s", lines[i], out)
		})
	}
}
