package config

import (
	"io"
	"strings"
	"testing"
)

func env(vars map[string]string) func(string) string {
	return func(k string) string { return vars[k] }
}

func TestSpoolDirIsPerBrokerUnlessSet(t *testing.T) {
	c, err := Load(nil, env(map[string]string{"LANES_PORT": "7001"}), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasSuffix(c.SpoolDir, "lanes-spool-7001") {
		t.Fatalf("default spool dir %q does not name the port", c.SpoolDir)
	}
	c, err = Load([]string{"--spool-dir", "/var/spool/lanes"}, env(map[string]string{"LANES_SPOOL_DIR": "/elsewhere"}), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if c.SpoolDir != "/var/spool/lanes" {
		t.Fatalf("flag should win over the variable: %q", c.SpoolDir)
	}
}

func TestBadSettingNamesItsVariable(t *testing.T) {
	_, err := Load(nil, env(map[string]string{"LANES_PORT": "http"}), io.Discard)
	if err == nil || !strings.Contains(err.Error(), "LANES_PORT") {
		t.Fatalf("want an error naming LANES_PORT, got %v", err)
	}
}
