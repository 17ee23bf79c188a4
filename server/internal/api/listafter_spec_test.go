package api

import (
	"encoding/base64"
	"encoding/json"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"

	"github.com/lanesmq/lanes/server/internal/api/gen"
)

// The spec's ListAfter admits every key a listing gives (names of any text:
// empty, non-ASCII, characters JSON escapes) and refuses what is not
// unpadded base64url of at least one name's array, so a client generator or
// a fuzzer knows what the broker takes.
func TestTheSpecsListAfterAdmitsEveryKeyAndRefusesWhatIsNoBase64URL(t *testing.T) {
	spec, err := gen.GetSpec()
	if err != nil {
		t.Fatal(err)
	}
	schema := listAfterParameter(spec).Schema.Value
	keys := []string{
		listKey(""), listKey("a"), listKey("wide", "p00000"), listKey("g1", "wide", "p00000"),
		listKey("ÿ"), listKey("名前", "🙂"), listKey("<&>", "\u2028", `"\`), listKey(strings.Repeat("x", 300)),
		listKey("1765000000000000", "0b0c2c4e-5f77-4c1e-9a52-2a3b5c6d7e8f", "42"),
	}
	for _, key := range keys {
		if err := schema.VisitJSON(key); err != nil {
			t.Errorf("the key %q: %v", key, err)
		}
	}
	notKeys := []string{
		"", "WyJ", "WyJhIl0=", base64.StdEncoding.EncodeToString([]byte(`["a?>"]`)),
		"WyJh\nIl0", "WyJhIl0 ", "!!!!!!", "WyJhIl0%",
	}
	for _, notKey := range notKeys {
		if err := schema.VisitJSON(notKey); err == nil {
			t.Errorf("%q: the spec admits it", notKey)
		}
	}
}

// An after the spec refuses answers the body the handler answers an after that
// is no key (or one sent with an offset): one fault, one answer, on every
// listing paged by a key.
func TestAnAfterTheSpecRefusesAnswersAsOneThatIsNoKey(t *testing.T) {
	b := newTestBroker(t)
	queue := uniqueQueue(t)
	b.call(t, "POST", "/api/v1/push", map[string]any{"items": []map[string]any{{"queue": queue, "payload": 1}}}, nil)
	b.pop(t, "/api/v1/pop/queue/"+queue+"?consumerGroup=g1&subscriptionMode=all&wait=false&batch=1")
	paths := map[string]string{
		"listQueues":                "/api/v1/resources/queues?",
		"listNamespaces":            "/api/v1/resources/namespaces?",
		"listTasks":                 "/api/v1/resources/tasks?",
		"getQueue":                  "/api/v1/resources/queues/" + queue + "?",
		"getQueueDepth":             "/api/v1/resources/queues/" + queue + "/depth?",
		"listMessages":              "/api/v1/messages?",
		"listDlq":                   "/api/v1/dlq?",
		"listConsumerGroups":        "/api/v1/consumer-groups?",
		"listLaggingConsumerGroups": "/api/v1/consumer-groups/lagging?",
		"getConsumerGroup":          "/api/v1/consumer-groups/g1?",
		"listKvNamespaces":          "/api/v1/resources/kv/namespaces?",
		"listQueueStatus":           "/api/v1/status/queues?",
		"getQueueStatus":            "/api/v1/status/queues/" + queue + "?includePartitions=true&",
	}
	wantOperationsNamingListAfter(t, paths)

	// Well-formed base64url of a JSON object: the handler finds it is no key.
	notAKey := base64.RawURLEncoding.EncodeToString([]byte(`{"not":"a key"}`))
	refused := []string{"", "abc", "%21%21%21%21%21%21", url.QueryEscape(base64.StdEncoding.EncodeToString([]byte(`["a?>"]`))), "WyJhIl0%3D", "WyJh%0AIl0"}
	for op, path := range paths {
		noKey := answerOf(t, b, path+"after="+notAKey)
		withOffset := answerOf(t, b, path+"offset=0&after="+notAKey)
		if !strings.Contains(noKey, `"code":"bad_request"`) || !strings.Contains(withOffset, `"code":"bad_request"`) {
			t.Fatalf("%s: the handler's answers %s and %s", op, noKey, withOffset)
		}
		for _, after := range refused {
			if got := answerOf(t, b, path+"after="+after); got != noKey {
				t.Errorf("%s after=%s: %s, want %s", op, after, got, noKey)
			}
			if got := answerOf(t, b, path+"offset=0&after="+after); got != withOffset {
				t.Errorf("%s offset=0&after=%s: %s, want %s", op, after, got, withOffset)
			}
		}
	}
}

// wantOperationsNamingListAfter fails the test unless paths names every
// operation of the spec that takes ListAfter.
func wantOperationsNamingListAfter(t *testing.T, paths map[string]string) {
	t.Helper()
	spec, err := gen.GetSpec()
	if err != nil {
		t.Fatal(err)
	}
	listAfter := listAfterParameter(spec)
	var named []string
	for _, item := range spec.Paths.Map() {
		for _, op := range item.Operations() {
			for _, p := range op.Parameters {
				if p.Value == listAfter {
					named = append(named, op.OperationID)
				}
			}
		}
	}
	for _, op := range named {
		if _, ok := paths[strings.ToLower(op[:1])+op[1:]]; !ok {
			t.Errorf("the operation %s takes ListAfter: test it here", op)
		}
	}
	if len(named) != len(paths) {
		slices.Sort(named)
		t.Errorf("the spec's operations with ListAfter: %v; the test's: %d", named, len(paths))
	}
}

// answerOf is the Content-Type and body of a GET that must answer 400.
func answerOf(t *testing.T, b *testBroker, path string) string {
	t.Helper()
	var raw json.RawMessage
	status, header := b.call(t, http.MethodGet, path, nil, &raw)
	if status != http.StatusBadRequest {
		t.Fatalf("GET %s: %d %s, want 400", path, status, raw)
	}
	return header.Get("Content-Type") + " " + string(raw)
}
