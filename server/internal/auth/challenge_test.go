package auth

import (
	"regexp"
	"testing"
)

// fixedMessages are every message a refusal's body and challenge can carry.
var fixedMessages = []string{MsgAuthRequired, MsgBadHeader, MsgBadSignature, MsgExpired, MsgNoExpiry,
	MsgNotYetValid, MsgIssuedInFuture, MsgBadIssuer, MsgBadAudience, MsgUnsupportedAlg, MsgUnknownKeyID, MsgForbidden}

// errorDescription is RFC 6750 §3's error_description: printable ASCII without '"' or '\'.
var errorDescription = regexp.MustCompile(`^[\x20\x21\x23-\x5B\x5D-\x7E]+$`)

// TestEveryFixedMessageCanBeAnErrorDescription: the messages go into a quoted
// string as they are, so none may hold a quote, a backslash or a byte outside
// printable ASCII.
func TestEveryFixedMessageCanBeAnErrorDescription(t *testing.T) {
	for _, m := range fixedMessages {
		if !errorDescription.MatchString(m) || !quotable(m) {
			t.Errorf("%q cannot be an error_description as it is", m)
		}
	}
	for _, bad := range []string{`say "no"`, `back\slash`, "tab\there", "naïve", ""} {
		if quotable(bad) {
			t.Errorf("quotable(%q) is true", bad)
		}
	}
}

// TestChallengesFollowRFC6750: no token gets a bare challenge, a bad one
// invalid_token with its message, a missing role insufficient_scope.
func TestChallengesFollowRFC6750(t *testing.T) {
	if got := (&Error{MsgAuthRequired}).Challenge(); got != "Bearer" {
		t.Errorf("no token: %q, want a bare Bearer", got)
	}
	for _, m := range fixedMessages[1 : len(fixedMessages)-1] {
		want := `Bearer error="invalid_token", error_description="` + m + `"`
		if got := (&Error{m}).Challenge(); got != want {
			t.Errorf("%q: %q, want %q", m, got, want)
		}
	}
	if want := `Bearer error="insufficient_scope", error_description="Insufficient permissions"`; ForbiddenChallenge != want {
		t.Errorf("403: %q, want %q", ForbiddenChallenge, want)
	}
	if got, want := (&Error{`a "quoted" text`}).Challenge(), `Bearer error="invalid_token"`; got != want {
		t.Errorf("a description that cannot be quoted: %q, want %q", got, want)
	}
}
