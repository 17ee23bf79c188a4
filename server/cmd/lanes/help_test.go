package main

import (
	"bytes"
	"errors"
	"os/exec"
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
