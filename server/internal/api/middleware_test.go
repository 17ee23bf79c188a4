package api

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/gorilla/mux"
)

// The router hands the matched template to observe's recorder, so the metrics
// label costs no second route match; unrouted requests leave it empty.
func TestRecordRouteHandsTheTemplateToTheRecorder(t *testing.T) {
	router := mux.NewRouter()
	router.HandleFunc("/api/v1/pop/queue/{queue}", func(http.ResponseWriter, *http.Request) {}).Methods(http.MethodGet)
	router.Use(recordRoute)
	for path, want := range map[string]string{"/api/v1/pop/queue/orders": "/api/v1/pop/queue/{queue}", "/nowhere": ""} {
		rec := &statusRecorder{ResponseWriter: httptest.NewRecorder()}
		router.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
		if rec.route != want {
			t.Errorf("%s: recorded route %q, want %q", path, rec.route, want)
		}
	}
}

// IPv6 clients were keyed by their full address, so one host with a /64
// was as many clients as it liked to the token bucket and the body share.
func TestClientKeyGroupsIPv6ByItsSlash64(t *testing.T) {
	key := func(remote string) string {
		r := httptest.NewRequest(http.MethodPost, "/api/v1/push", nil)
		r.RemoteAddr = remote
		return clientKey(r)
	}
	for _, same := range [][2]string{
		{"[2001:db8:1:2::1]:4000", "[2001:db8:1:2:ffff:ffff:ffff:ffff]:4001"},
		{"[fe80::1%eth0]:1", "[fe80::2]:2"},
		{"[::ffff:192.0.2.1]:1", "[::ffff:192.0.2.1]:2"},
		{"192.0.2.1:1", "192.0.2.1:2"},
	} {
		if a, b := key(same[0]), key(same[1]); a != b {
			t.Errorf("%s and %s: keys %q and %q; want one client", same[0], same[1], a, b)
		}
	}
	for _, apart := range [][2]string{
		{"[2001:db8:1:2::1]:1", "[2001:db8:1:3::1]:1"},
		{"[::ffff:192.0.2.1]:1", "[::ffff:192.0.2.2]:1"},
		{"192.0.2.1:1", "192.0.2.2:1"},
	} {
		if a, b := key(apart[0]), key(apart[1]); a == b {
			t.Errorf("%s and %s: both key %q; want two clients", apart[0], apart[1], a)
		}
	}
}
