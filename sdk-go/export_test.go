package lanes

import (
	"crypto/tls"
	"crypto/x509"
	"net/http"
)

// TrustRootsForTest makes the transports New built for c (the one for every call and the
// HTTP/1.1-only one for the loops' pops) trust roots, a test server's certificate, as they would
// trust a broker's certificate from the system pool.
func TrustRootsForTest(c *Client, roots *x509.CertPool) {
	for _, t := range []*http.Transport{c.cfg.httpClient.Transport.(*http.Transport), c.loopPopTransport} {
		if t.TLSClientConfig == nil {
			t.TLSClientConfig = &tls.Config{MinVersion: tls.VersionTLS12}
		}
		t.TLSClientConfig.RootCAs = roots
	}
}
