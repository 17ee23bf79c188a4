package api

import (
	"strings"
	"testing"

	"github.com/google/uuid"
)

// appendUUIDText writes what uuid.UUID.String does, and ids appended later
// (the builder growing under them) leave the earlier ones as they were.
func TestAppendUUIDTextIsTheCanonicalText(t *testing.T) {
	var text strings.Builder // not grown first: it reallocates under the ids
	ids := make([]uuid.UUID, 200)
	texts := make([]string, len(ids))
	for i := range ids {
		ids[i] = uuid.New()
		texts[i] = appendUUIDText(&text, ids[i])
	}
	for i, id := range ids {
		if texts[i] != id.String() {
			t.Fatalf("id %d: %q, want %q", i, texts[i], id.String())
		}
	}
	// A batch's ids cost one allocation when the builder is sized for them.
	allocs := testing.AllocsPerRun(20, func() {
		var batch strings.Builder
		batch.Grow(len(ids) * uuidTextLen)
		for _, id := range ids {
			appendUUIDText(&batch, id)
		}
	})
	if allocs != 1 {
		t.Fatalf("200 ids allocated %.0f times, want once", allocs)
	}
}
