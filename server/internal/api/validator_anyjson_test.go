package api

import (
	"slices"
	"sort"
	"testing"

	"github.com/lanesmq/lanes/server/anyjson"
	"github.com/lanesmq/lanes/server/internal/api/gen"
)

// The validator leaves unread exactly the request fields that take any JSON
// value, and keeps the schema of every other field.
func TestOnlyAnyJSONValueFieldsAreLeftUnread(t *testing.T) {
	spec, err := gen.GetSpec()
	if err != nil {
		t.Fatal(err)
	}
	anyjson.LeaveUnreadInRequests(spec)
	var unread []string
	for name, schema := range spec.Components.Schemas {
		for field, prop := range schema.Value.Properties {
			if prop.Value.Always != nil {
				unread = append(unread, name+"."+field)
			}
		}
	}
	sort.Strings(unread)
	want := []string{"KvOperation.value", "KvPutRequest.value", "PushItem.payload", "TransactionOperation.data",
		"TransactionOperation.payload", "TransactionPushItem.data", "TransactionPushItem.payload"}
	if !slices.Equal(unread, want) {
		t.Fatalf("fields left unread: %v, want %v", unread, want)
	}
}
