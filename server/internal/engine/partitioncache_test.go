package engine

import (
	"hash/maphash"
	"testing"

	"github.com/google/uuid"
)

func cacheParts(ids map[partitionKey]uuid.UUID) map[partitionKey]*pushPartition {
	out := make(map[partitionKey]*pushPartition, len(ids))
	for k, id := range ids {
		out[k] = &pushPartition{id: id}
	}
	return out
}

func TestPartitionCacheAnswersOnlyForTheNamesItHolds(t *testing.T) {
	a, b := partitionKey{"orders", "customer-42"}, partitionKey{"orders", "customer-43"}
	idA, idB := uuid.New(), uuid.New()
	var c partitionCache
	if got := c.lookup([]partitionKey{a}); got != nil {
		t.Fatalf("empty cache answered %v", got)
	}
	c.add(cacheParts(map[partitionKey]uuid.UUID{a: idA, b: idB}))
	got := c.lookup([]partitionKey{a, b})
	if got[a] != idA || got[b] != idB || len(got) != 2 {
		t.Fatalf("lookup = %v, want %v and %v", got, idA, idB)
	}
	if got := c.lookup([]partitionKey{a, {"orders", "customer-4"}}); got != nil {
		t.Fatalf("a lookup with an unknown key answered %v", got)
	}
	// A queue deleted and created again: the new id replaces the old one.
	idA2 := uuid.New()
	c.add(cacheParts(map[partitionKey]uuid.UUID{a: idA2}))
	if got := c.lookup([]partitionKey{a}); got[a] != idA2 {
		t.Fatalf("after re-adding, lookup = %v, want %v", got, idA2)
	}
	c.clear()
	if got := c.lookup([]partitionKey{b}); got != nil {
		t.Fatalf("cleared cache answered %v", got)
	}
}

// Keys whose hashes collide share a slot: the one added last answers and the
// other misses, and no key ever gets another's id, even where the names run
// together into the same bytes.
func TestPartitionCacheCollisionsMissAndNeverMixUpIDs(t *testing.T) {
	c := partitionCache{hash: func(maphash.Seed, partitionKey) uint64 { return 7 }}
	keys := []partitionKey{{"ab", "c"}, {"a", "bc"}, {"abc", ""}, {"x", "y"}}
	ids := make([]uuid.UUID, len(keys))
	for i, k := range keys {
		ids[i] = uuid.New()
		c.add(cacheParts(map[partitionKey]uuid.UUID{k: ids[i]}))
		for j, other := range keys[:i+1] {
			got := c.lookup([]partitionKey{other})
			switch {
			case j == i && got[other] != ids[i]:
				t.Fatalf("after adding %v, lookup = %v, want %v", other, got, ids[i])
			case j < i && got != nil:
				t.Fatalf("after %v took the slot, %v answered %v", k, other, got)
			}
		}
	}
}
