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
