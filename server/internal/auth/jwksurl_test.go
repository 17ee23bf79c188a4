package auth

import (
	"strings"
	"testing"
)

// TestRedactedJWKSURLShowsNoCredentials: the log's form of a JWKS URL keeps
// the scheme, host, path and query keys, and drops the userinfo, the fragment
// and every query value; a text whose userinfo cannot be told apart shows nothing.
func TestRedactedJWKSURLShowsNoCredentials(t *testing.T) {
	cases := map[string]string{
		"https://idp.example/jwks":                                 "https://idp.example/jwks",
		"https://alice:s3cret@idp.example/jwks":                    "https://idp.example/jwks",
		"https://alice@idp.example/jwks":                           "https://idp.example/jwks",
		"https://idp.example/jwks?token=s3cret&tenant=a":           "https://idp.example/jwks?token=xxxxx&tenant=xxxxx",
		"https://idp.example/jwks?s3cret":                          "https://idp.example/jwks?xxxxx",
		"https://idp.example/jwks?token=":                          "https://idp.example/jwks?token=xxxxx",
		"https://idp.example/jwks#s3cret":                          "https://idp.example/jwks",
		"ftp://alice:s3cret@idp.example/jwks?token=s3cret":         "ftp://idp.example/jwks?token=xxxxx",
		"https://alice:s3cret@idp.example:bad/jwks":                "xxxxx", // unreadable port
		"https://alice:12#3@idp.example/jwks":                      "xxxxx", // '#' in the password: net/url reads host alice:12
		"https://alice:12/3@idp.example/jwks":                      "xxxxx",
		"https://alice:12?s3cret@idp.example/jwks":                 "xxxxx",
		"alice:s3cret@idp.example/jwks":                            "xxxxx", // no scheme: alice reads as one
		"idp.example/jwks?token=s3cret":                            "xxxxx", // no host
		"s3cret":                                                   "xxxxx", // a token pasted by mistake
		"https://alice:s3%40cret@idp.example/jwks?token=s3%26cret": "https://idp.example/jwks?token=xxxxx",
	}
	for raw, want := range cases {
		got := RedactedJWKSURL(raw)
		if got != want {
			t.Errorf("RedactedJWKSURL(%q) = %q, want %q", raw, got, want)
		}
		for _, secret := range []string{"alice", "s3cret", "12"} {
			if strings.Contains(got, secret) {
				t.Errorf("RedactedJWKSURL(%q) = %q shows %q", raw, got, secret)
			}
		}
	}
}

// TestAMalformedJWKSURLErrorShowsNoCredentials: the startup error for a URL
// that is not absolute http(s) names it redacted, and which entry it is.
func TestAMalformedJWKSURLErrorShowsNoCredentials(t *testing.T) {
	err := CheckJWKSURLs([]string{"https://idp.example/jwks", "ftp://alice:s3cret@idp.example/jwks?token=s3cret"})
	if err == nil || !strings.Contains(err.Error(), `entry 2 of 2: jwks url "ftp://idp.example/jwks?token=xxxxx"`) {
		t.Fatalf("error %v, want entry 2 named redacted", err)
	}
	err = CheckJWKSURLs([]string{"https://alice:s3cret@idp.example:bad/jwks?token=s3cret"})
	if err == nil || strings.Contains(err.Error(), "alice") || strings.Contains(err.Error(), "s3cret") || !strings.Contains(err.Error(), "not shown") {
		t.Fatalf("error %v, want the URL not shown", err)
	}
}
