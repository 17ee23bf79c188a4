package engine

import (
	"sync"
	"time"

	"github.com/google/uuid"
)

// leaseIndex remembers, for every lease this broker granted, the offset of
// each transaction id the lease delivered, so an ack under that lease resolves
// its items in memory instead of probing lanes.txns: one statement and one
// index probe per acked message fewer on the consume path.
//
// The database stays the authority on the lease itself: the ack still locks
// the cursor row and checks the lease id and expiry there. The index only
// answers while it must agree with lanes.txns (see indexableFor). An ack on
// another broker, after a restart, past that horizon or for an id the lease
// did not deliver finds nothing here and resolves through lanes.txns.
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
	offsets map[string]int64 // by transaction id
	end     int64            // the highest offset delivered
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
	for _, m := range msgs {
		lp := b.partitions[m.PartitionID]
		if lp == nil {
			lp = &leasedPartition{queue: m.Queue, name: m.Partition, offsets: make(map[string]int64, len(msgs))}
			b.partitions[m.PartitionID] = lp
		}
		lp.offsets[m.TransactionID] = m.Offset
		lp.end = max(lp.end, m.Offset)
	}
	for _, lp := range b.partitions {
		b.size += len(lp.offsets) // what forget and drop subtract
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

// lookup returns the offset lease delivered txn at on partition.
func (x *leaseIndex) lookup(lease string, partition uuid.UUID, txn string) (int64, bool) {
	x.mu.Lock()
	defer x.mu.Unlock()
	lp := x.partition(lease, partition)
	if lp == nil {
		return 0, false
	}
	off, ok := lp.offsets[txn]
	return off, ok
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
// any of them is not indexed.
func (x *leaseIndex) resolveAll(lease string, partition uuid.UUID, txns []string) (r resolvedAck, ok bool) {
	x.mu.Lock()
	defer x.mu.Unlock()
	lp := x.partition(lease, partition)
	if lp == nil || len(txns) == 0 {
		return resolvedAck{}, false
	}
	r.lo, r.hi = int64(1<<63-1), int64(-1<<63)
	for _, txn := range txns {
		off, found := lp.offsets[txn]
		if !found {
			return resolvedAck{}, false
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
	b.size -= len(lp.offsets)
	x.size -= len(lp.offsets)
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
