// Package brokertest builds the real lanes broker for process-level tests, once per test
// binary, so the packages that start it as a child process share one build.
package brokertest

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
)

// brokerPackage is built by import path, so the build works from any test's directory.
const brokerPackage = "github.com/lanesmq/lanes/server/cmd/lanes"

var (
	buildOnce sync.Once
	buildDir  string
	binary    string
	buildErr  error
)

// Binary returns the path of the broker binary, built on the first call in this test
// process; a failed build fails t (and every later caller). Main removes the binary.
func Binary(t testing.TB) string {
	t.Helper()
	buildOnce.Do(func() {
		if buildDir, buildErr = os.MkdirTemp("", "lanes-test-bin-"); buildErr != nil {
			return
		}
		binary = filepath.Join(buildDir, "lanes")
		if out, err := exec.CommandContext(context.Background(), "go", "build", "-o", binary, brokerPackage).CombinedOutput(); err != nil {
			buildErr = fmt.Errorf("go build %s: %w\n%s", brokerPackage, err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return binary
}

// Main runs the tests, then removes the binary Binary built; call it from TestMain
// (os.Exit(brokertest.Main(m))).
func Main(m *testing.M) int {
	code := m.Run()
	if buildDir != "" {
		_ = os.RemoveAll(buildDir)
	}
	return code
}
