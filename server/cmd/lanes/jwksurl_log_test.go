package main

import (
	"bytes"
	"errors"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/lanesmq/lanes/server/internal/brokertest"
)

// The credentials planted in the JWKS URLs below: none may reach the log.
var jwksURLSecrets = []string{"alice", "s3cret-pw", "q-secret"}

func wantNoJWKSURLSecrets(t *testing.T, what, logs string) {
	t.Helper()
	for _, secret := range jwksURLSecrets {
		if strings.Contains(logs, secret) {
			t.Errorf("%s shows %q:\n%s", what, secret, logs)
		}
	}
}

// TestAMalformedJWKSURLIsRefusedWithoutItsCredentials starts the binary with
// JWKS URLs that are not absolute http(s) URLs but carry a password and a
// query token: the broker refuses to start (status 2) and its error names the
// entry without the userinfo or the query's values.
func TestAMalformedJWKSURLIsRefusedWithoutItsCredentials(t *testing.T) {
	cases := []struct {
		name, url, shown string
	}{
		{"ftp scheme", "ftp://alice:s3cret-pw@idp.example/jwks?token=q-secret&kid=1", `"ftp://idp.example/jwks?token=xxxxx&kid=xxxxx"`},
		{"unreadable port", "https://alice:s3cret-pw@idp.example:bad/jwks?token=q-secret", "not shown"},
		{"no scheme", "alice:s3cret-pw@idp.example/jwks?token=q-secret", "not shown"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cmd := exec.Command(brokertest.Binary(t))
			cmd.Env = append(os.Environ(), "LANES_JWT_ENABLED=true", "LANES_JWT_SECRET=jwt-test-secret-jwt-test-secret", "LANES_JWT_JWKS_URL="+c.url)
			var out bytes.Buffer
			cmd.Stdout, cmd.Stderr = &out, &out
			err := cmd.Run()
			var exit *exec.ExitError
			if !errors.As(err, &exit) || exit.ExitCode() != 2 {
				t.Fatalf("want exit status 2, got %v:\n%s", err, out.String())
			}
			if !strings.Contains(out.String(), "LANES_JWT_JWKS_URL") || !strings.Contains(out.String(), c.shown) {
				t.Errorf("the error does not name LANES_JWT_JWKS_URL and show %s:\n%s", c.shown, out.String())
			}
			wantNoJWKSURLSecrets(t, "the startup error", out.String())
		})
	}
}

// TestTheJWKSURLsCredentialsStayOutOfTheLog starts the broker with a JWKS URL
// carrying a password and a query token, its endpoint down: the configuration
// line and the failed fetch's line show the URL without userinfo and with the
// query's values masked, and the fetch error does not quote the URL.
func TestTheJWKSURLsCredentialsStayOutOfTheLog(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	down := l.Addr().String()
	_ = l.Close()
	b := startBroker(t, newDatabase(t), freePort(t), t.TempDir(),
		"LANES_JWT_ENABLED=true", "LANES_JWT_JWKS_URL=http://alice:s3cret-pw@"+down+"/jwks?token=q-secret")
	b.waitHealth(t, http.StatusOK, 20*time.Second)
	b.Stop(0)
	logs := b.logs.String()
	shown := "http://" + down + "/jwks?token=xxxxx"
	for _, line := range []string{"msg=configuration ", "JWKS fetch failed"} {
		found := false
		for l := range strings.Lines(logs) {
			if strings.Contains(l, line) {
				found = true
				if !strings.Contains(l, shown) {
					t.Errorf("the %q line does not show the JWKS URL as %s:\n%s", line, shown, l)
				}
			}
		}
		if !found {
			t.Errorf("no %q line in the log:\n%s", line, logs)
		}
	}
	wantNoJWKSURLSecrets(t, "the log", logs)
}
