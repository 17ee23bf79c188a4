package api

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/gorillamux"

	"github.com/lanesmq/lanes/server/internal/api/gen"
)

var (
	specRouterOnce sync.Once
	specRouter     routers.Router
	specRouterErr  error
)

// specAnswer sends a request and checks the answer against openapi.yaml, as a
// client generated from it reads it: the status must be declared and the body
// must match its schema. It returns the status and the raw body.
func (b *testBroker) specAnswer(t testing.TB, method, path, body string) (int, []byte) {
	t.Helper()
	specRouterOnce.Do(func() {
		var spec *openapi3.T
		if spec, specRouterErr = gen.GetSpec(); specRouterErr != nil {
			return
		}
		spec.Servers = openapi3.Servers{{URL: "/"}}
		specRouter, specRouterErr = gorillamux.NewRouter(spec)
	})
	if specRouterErr != nil {
		t.Fatal(specRouterErr)
	}
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, b.URL+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	specReq, err := http.NewRequest(method, path, nil)
	if err != nil {
		t.Fatal(err)
	}
	route, params, err := specRouter.FindRoute(specReq)
	if err != nil {
		t.Fatalf("%s %s: no operation in the spec: %v", method, path, err)
	}
	in := &openapi3filter.ResponseValidationInput{
		RequestValidationInput: &openapi3filter.RequestValidationInput{Request: specReq, PathParams: params, Route: route,
			Options: &openapi3filter.Options{AuthenticationFunc: openapi3filter.NoopAuthenticationFunc}},
		Status: resp.StatusCode, Header: resp.Header, Body: io.NopCloser(bytes.NewReader(raw)),
		Options: &openapi3filter.Options{IncludeResponseStatus: true},
	}
	if err := openapi3filter.ValidateResponse(context.Background(), in); err != nil {
		t.Errorf("%s %s: %d %s does not match the spec: %v", method, path, resp.StatusCode, raw, err)
	}
	return resp.StatusCode, raw
}
