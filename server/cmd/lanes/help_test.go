package main

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/lanesmq/lanes/server/internal/brokertest"
)

// TestHelpGoesToStandardOutput: "lanes --help | grep SPOOL" finds the
// settings, and the help exits 0; a flag the broker does not know still
// prints the usage on standard error and exits 2.
func TestHelpGoesToStandardOutput(t *testing.T) {
	var stdout, stderr bytes.Buffer
	help := exec.Command(brokertest.Binary(t), "--help")
	help.Stdout, help.Stderr = &stdout, &stderr
	if err := help.Run(); err != nil {
		t.Fatalf("lanes --help: %v\n%s", err, stderr.String())
	}
	if !strings.Contains(stdout.String(), "LANES_SPOOL_DIR") || stderr.Len() != 0 {
		t.Fatalf("lanes --help: want the settings on stdout and nothing on stderr\nstdout:\n%s\nstderr:\n%s", stdout.String(), stderr.String())
	}

	stdout.Reset()
	stderr.Reset()
	bad := exec.Command(brokertest.Binary(t), "--no-such-flag")
	bad.Stdout, bad.Stderr = &stdout, &stderr
	err := bad.Run()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 2 {
		t.Fatalf("lanes --no-such-flag: want exit status 2, got %v", err)
	}
	if stdout.Len() != 0 || !strings.Contains(stderr.String(), "no-such-flag") || !strings.Contains(stderr.String(), "LANES_SPOOL_DIR") {
		t.Fatalf("lanes --no-such-flag: want the error and usage on stderr only\nstdout:\n%s\nstderr:\n%s", stdout.String(), stderr.String())
	}
}

// TestVersionPrintsTheStampedVersion: "lanes --version" prints the version
// make build stamps (-X main.version) on stdout and exits 0, whatever the
// environment's settings; "lanes version" is refused (exit 2) pointing to it.
func TestVersionPrintsTheStampedVersion(t *testing.T) {
	binary := filepath.Join(t.TempDir(), "lanes")
	build := exec.Command("go", "build", "-ldflags", "-X main.version=v9.8.7-test", "-o", binary, ".")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	var stdout, stderr bytes.Buffer
	cmd := exec.Command(binary, "--version")
	cmd.Env = append(os.Environ(), "LANES_PORT=not-a-port")
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("lanes --version: %v\n%s", err, stderr.String())
	}
	if stdout.String() != "lanes v9.8.7-test\n" || stderr.Len() != 0 {
		t.Fatalf("lanes --version: want \"lanes v9.8.7-test\" on stdout only\nstdout:\n%s\nstderr:\n%s", stdout.String(), stderr.String())
	}

	stdout.Reset()
	stderr.Reset()
	cmd = exec.Command(binary, "version")
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 2 || !strings.Contains(stderr.String(), "lanes --version") {
		t.Fatalf("lanes version: want exit status 2 pointing to lanes --version, got %v\n%s", err, stderr.String())
	}
}
