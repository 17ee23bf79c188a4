package engine

import (
	"sync"
	"time"

	"github.com/google/uuid"
)

// leaseIndex remembers, for every lease this broker granted, the offsets of
// each transaction id the lease delivered, so an ack under that lease resolves
// its items in memory instead of probing lanes.txns: one statement and one
// index probe per acked message fewer on the consume path.
//
// A leased ack names a message the lease delivered, and an id may repeat in a
// partition (deduplication off, or a producer re-sending it after the window),
// so an id resolves to its lowest copy above the cursor within the leased span
// (see ackspan.go). The index holds exactly what the lease delivered,
// every copy lowest first, so it answers for every queue while the lease runs.
//
// The database stays the authority on the lease itself: the ack still locks
// the cursor row and checks the lease id and expiry there. An ack on another
// broker, after a restart or past the lease's first expiry finds nothing here
// and resolves through lanes.txns and, when that cannot tell, the span's
// segments.
type leaseIndex struct {
	mu      sync.Mutex
	byLease map[string]*leasedBatch
	size    int // transaction ids held
}

type leasedBatch struct {
	until      time.Time
	partitions map[uuid.UUID]*leasedPartition
	size       int
}

// leasedPartition is what one lease delivered from one partition.
type leasedPartition struct {
	queue   string
	name    string
	offsets map[string][]int64 // by transaction id, every copy lowest first; never changed once stored
	end     int64              // the highest offset delivered
	size    int                // offsets held
	// backlog is set when the pop took a full batch from this partition alone:
	// more is likely waiting, so the ack that ends the lease claims the next
	// batch for a parked pop of the group (queueAckCommit).
	backlog bool
	// only is set when the claim that granted the lease saw no other partition
	// of the group claimable: the next batch may then continue this lease's
	// partition without the serving order's walk (continueLeaseSQL).
	only bool
}

// leaseIndexMax bounds the transaction ids held (about 100 bytes each); past
// it, new leases are not indexed and their acks resolve in the database.
const leaseIndexMax = 1 << 17

// leaseIndexMargin ends an entry this long before its lease expires, so
// clock differences between broker and database never stretch it.
const leaseIndexMargin = 2 * time.Second

func newLeaseIndex() *leaseIndex {
	return &leaseIndex{byLease: map[string]*leasedBatch{}}
}

// remember indexes the messages one pop delivered under lease, for validFor;
// full says the pop took the whole batch it asked for, only that its claim saw
// no other partition of the group claimable.
func (x *leaseIndex) remember(lease string, validFor time.Duration, msgs []Message, full, only bool) {
	if lease == "" || len(msgs) == 0 || validFor <= leaseIndexMargin {
		return
	}
	b := &leasedBatch{until: time.Now().Add(validFor - leaseIndexMargin), partitions: map[uuid.UUID]*leasedPartition{}}
	// Every id's first offset is a one-element slice of this one array, so
	// indexing a batch allocates once, not once per message; a repeat
	// appends past the slice's capacity, into an array of its own.
	firsts := make([]int64, len(msgs))
	for i, m := range msgs {
		lp := b.partitions[m.PartitionID]
		if lp == nil {
			lp = &leasedPartition{queue: m.Queue, name: m.Partition, offsets: make(map[string][]int64, len(msgs))}
			b.partitions[m.PartitionID] = lp
		}
		if offs, repeat := lp.offsets[m.TransactionID]; repeat {
			lp.offsets[m.TransactionID] = append(offs, m.Offset) // delivered in offset order
		} else {
			firsts[i] = m.Offset
			lp.offsets[m.TransactionID] = firsts[i : i+1 : i+1]
		}
		lp.end = max(lp.end, m.Offset)
		lp.size++
	}
	for _, lp := range b.partitions {
		b.size += lp.size // what forget and drop subtract
		lp.backlog = full && len(b.partitions) == 1
		lp.only = only
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.size+b.size > leaseIndexMax {
		x.dropExpired(time.Now())
		if x.size+b.size > leaseIndexMax {
			return
		}
	}
	x.byLease[lease] = b
	x.size += b.size
}

// lookup returns the offsets, lowest first, at which lease delivered txn on
// partition.
func (x *leaseIndex) lookup(lease string, partition uuid.UUID, txn string) ([]int64, bool) {
	x.mu.Lock()
	defer x.mu.Unlock()
	lp := x.partition(lease, partition)
	if lp == nil {
		return nil, false
	}
	offs, ok := lp.offsets[txn]
	return offs, ok
}

// delivered returns what lease delivered on partition: the offsets of each
// transaction id, lowest first (read-only: stored once, never changed).
func (x *leaseIndex) delivered(lease string, partition uuid.UUID) (map[string][]int64, bool) {
	x.mu.Lock()
	defer x.mu.Unlock()
	lp := x.partition(lease, partition)
	if lp == nil {
		return nil, false
	}
	return lp.offsets, true
}

// resolvedAck is what the index knows of an ack's items under one lease on
// one partition: the span they cover, and whether acking it ends a lease
// that took a full batch (see leasedPartition.backlog).
type resolvedAck struct {
	queue, partition string // the partition's name
	lo, hi           int64
	endsFullBacklog  bool
	// onlyPartition: the lease's claim saw no other partition claimable.
	onlyPartition bool
}

// resolveAll resolves txns under lease on partition, or reports ok false when
// any of them is not indexed. The k-th mention of an id resolves to the k-th
// copy the lease delivered (a mention past the last copy repeats the last);
// that is the k-th copy above the cursor whenever the cursor is below lo,
// which ackOneTripSQL checks.
func (x *leaseIndex) resolveAll(lease string, partition uuid.UUID, txns []string) (r resolvedAck, ok bool) {
	x.mu.Lock()
	defer x.mu.Unlock()
	lp := x.partition(lease, partition)
	if lp == nil || len(txns) == 0 {
		return resolvedAck{}, false
	}
	r.lo, r.hi = int64(1<<63-1), int64(-1<<63)
	var mentions map[string]int // only for an id delivered more than once
	for _, txn := range txns {
		offs, found := lp.offsets[txn]
		if !found {
			return resolvedAck{}, false
		}
		off := offs[0]
		if len(offs) > 1 {
			if mentions == nil {
				mentions = map[string]int{}
			}
			off = nthCopy(offs, mentions[txn])
			mentions[txn]++
		}
		r.lo, r.hi = min(r.lo, off), max(r.hi, off)
	}
	r.queue, r.partition, r.endsFullBacklog = lp.queue, lp.name, lp.backlog && r.hi == lp.end
	r.onlyPartition = lp.only
	return r, true
}

// partition is lease's entry for partition, dropping the lease once it is past
// its horizon. x.mu is held.
func (x *leaseIndex) partition(lease string, partition uuid.UUID) *leasedPartition {
	b := x.byLease[lease]
	if b == nil {
		return nil
	}
	if time.Now().After(b.until) {
		x.drop(lease, b)
		return nil
	}
	return b.partitions[partition]
}

// forget drops what lease delivered on partition, once an ack released it there.
func (x *leaseIndex) forget(lease string, partition uuid.UUID) {
	x.mu.Lock()
	defer x.mu.Unlock()
	b := x.byLease[lease]
	if b == nil {
		return
	}
	lp := b.partitions[partition]
	if lp == nil {
		return
	}
	delete(b.partitions, partition)
	b.size -= lp.size
	x.size -= lp.size
	if len(b.partitions) == 0 {
		x.drop(lease, b)
	}
}

func (x *leaseIndex) drop(lease string, b *leasedBatch) {
	delete(x.byLease, lease)
	x.size -= b.size
}

func (x *leaseIndex) dropExpired(now time.Time) {
	for lease, b := range x.byLease {
		if now.After(b.until) {
			x.drop(lease, b)
		}
	}
}

// nthCopy is the copy the n-th mention (from 0) of an id names among offs, its
// copies lowest first: a mention past the last copy names the last again (the
// same message mentioned twice).
func nthCopy(offs []int64, n int) int64 {
	return offs[min(n, len(offs)-1)]
}
