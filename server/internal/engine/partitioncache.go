package engine

import (
	"hash/maphash"
	"sync"

	"github.com/google/uuid"
)

// partitionCache remembers the ids of partitions known to exist, so a group
// commit can skip the create-if-missing statements and lock and probe by
// primary key. A queue delete makes an entry stale; the lock then finds fewer
// partitions, the transaction rolls back and the write runs again with
// provisioning (forgetStalePartitions).
//
// It holds no pointers: entries are keyed by a hash of the names, and the
// names themselves sit back to back in one byte slice, where a lookup checks
// them. A broker that knows 100,000 partitions kept 200,000 strings in a map
// here, which every GC cycle marked (a fifth of the broker's CPU in the
// benchmark's 100,000-partition window); a pointer-free map and byte slice
// are never scanned. Two keys with the same hash share a slot: the later one
// takes it, and the other misses until it is written again, which only costs
// it the provisioning statements.
type partitionCache struct {
	mu    sync.RWMutex
	seed  maphash.Seed
	slots map[uint64]cachedPartition
	names []byte
	// hash is keyHash; tests replace it to force collisions.
	hash func(seed maphash.Seed, k partitionKey) uint64
}

// cachedPartition is a partition's id and where its queue and partition
// names are in partitionCache.names.
type cachedPartition struct {
	id                  uuid.UUID
	at, queueLen, total uint32
}

const (
	partitionCacheMax = 1 << 20
	// partitionCacheMaxNames bounds the names' bytes (offsets are uint32).
	partitionCacheMaxNames = 256 << 20
)

func keyHash(seed maphash.Seed, k partitionKey) uint64 {
	var h maphash.Hash
	h.SetSeed(seed)
	h.WriteString(k.queue)
	h.WriteByte(0) // PostgreSQL text holds no NUL, so the pair is unambiguous
	h.WriteString(k.partition)
	return h.Sum64()
}

func (c *partitionCache) slotOf(k partitionKey) uint64 {
	if c.hash == nil {
		return keyHash(c.seed, k)
	}
	return c.hash(c.seed, k)
}

// get returns k's id when the cache holds it; the caller holds mu.
func (c *partitionCache) get(k partitionKey) (uuid.UUID, bool) {
	if c.slots == nil {
		return uuid.UUID{}, false
	}
	e, ok := c.slots[c.slotOf(k)]
	if !ok {
		return uuid.UUID{}, false
	}
	name := c.names[e.at : e.at+e.total]
	if int(e.queueLen) != len(k.queue) || len(name) != len(k.queue)+len(k.partition) ||
		string(name[:e.queueLen]) != k.queue || string(name[e.queueLen:]) != k.partition {
		return uuid.UUID{}, false
	}
	return e.id, true
}

// lookup returns the ids of all keys, or nil when any is unknown.
func (c *partitionCache) lookup(keys []partitionKey) map[partitionKey]uuid.UUID {
	c.mu.RLock()
	defer c.mu.RUnlock()
	out := make(map[partitionKey]uuid.UUID, len(keys))
	for _, k := range keys {
		id, ok := c.get(k)
		if !ok {
			return nil
		}
		out[k] = id
	}
	return out
}

func (c *partitionCache) add(parts map[partitionKey]*pushPartition) {
	c.mu.Lock()
	defer c.mu.Unlock()
	var size int
	for k := range parts {
		size += len(k.queue) + len(k.partition)
	}
	if c.slots == nil || len(c.slots)+len(parts) > partitionCacheMax || len(c.names)+size > partitionCacheMaxNames {
		if c.slots == nil {
			c.seed = maphash.MakeSeed()
		}
		c.slots = make(map[uint64]cachedPartition, len(parts))
		c.names = make([]byte, 0, size)
	}
	for k, ps := range parts {
		if id, ok := c.get(k); ok && id == ps.id {
			continue
		}
		at := uint32(len(c.names))
		c.names = append(append(c.names, k.queue...), k.partition...)
		c.slots[c.slotOf(k)] = cachedPartition{id: ps.id, at: at,
			queueLen: uint32(len(k.queue)), total: uint32(len(k.queue) + len(k.partition))}
	}
}

func (c *partitionCache) clear() {
	c.mu.Lock()
	c.slots, c.names = nil, nil
	c.mu.Unlock()
}
