package main

import (
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/lanesmq/lanes/server/internal/config"
)

// TestAnUnusableSpoolDirectoryIsLoggedWithTheSettingToChange: a broker whose
// LANES_SPOOL_DIR cannot be used still serves, and its ERROR line tells the
// operator which setting to change, not only what breaks.
func TestAnUnusableSpoolDirectoryIsLoggedWithTheSettingToChange(t *testing.T) {
	notADir := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(notADir, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	log := slog.New(slog.NewTextHandler(&out, nil))
	if sp := openSpool(&config.Config{SpoolDir: notADir}, nil, nil, log); sp != nil {
		t.Fatal("a spool opened in a plain file")
	}
	if got := out.String(); !strings.Contains(got, "set LANES_SPOOL_DIR to a directory this broker can create and write") {
		t.Fatalf("the ERROR line does not say what to change:\n%s", got)
	}
}
