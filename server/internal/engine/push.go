package engine

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// PushItem is one message to store.
type PushItem struct {
	Queue         string
	Partition     string
	TransactionID string
	TraceID       string
	ProducerSub   string
	Payload       json.RawMessage
	// MessageID is the id the stored message gets; zero mints one when it is
	// written. An item without a transaction id gets it at normalization, as
	// its transaction id too. A writer that answered with an id before storing
	// the message (the disk spool) sets it so the message keeps that id.
	MessageID uuid.UUID
}

// PushStatus is the verdict for one pushed item.
type PushStatus string

const (
	PushQueued    PushStatus = "queued"
	PushDuplicate PushStatus = "duplicate"
	PushBuffered  PushStatus = "buffered"
	PushFailed    PushStatus = "failed"
)

// PushResult is the verdict for one item, in request order.
type PushResult struct {
	Index         int
	MessageID     uuid.UUID
	TransactionID string
	Queue         string
	Status        PushStatus
	Error         string
}

// Push stores items. Concurrent calls are coalesced into one PostgreSQL
// transaction (group commit); a returned error means nothing was stored.
func (e *Engine) Push(ctx context.Context, items []PushItem) ([]PushResult, error) {
	return e.push(ctx, items, false)
}

// ReplayPush is Push for items that were answered before they were stored,
// under the MessageID each carries (the disk spool's drain). An item whose
// partition already maps its transaction id to that same message id, or whose
// write stores that message already, is answered duplicate whatever the
// queue's dedup window: its first attempt committed (after its deadline, or
// before a crash cut the drain short) or is in the same write, and storing it
// again would deliver it twice. Items without a MessageID are plain pushes.
func (e *Engine) ReplayPush(ctx context.Context, items []PushItem) ([]PushResult, error) {
	return e.push(ctx, items, true)
}

func (e *Engine) push(ctx context.Context, items []PushItem, replay bool) ([]PushResult, error) {
	if len(items) == 0 {
		return []PushResult{}, nil
	}
	for i := range items {
		if err := normalizePushItem(&items[i], i); err != nil {
			return nil, err
		}
	}
	req := newPushRequest(ctx, items, replay)
	if err := e.pusher.submit(ctx, req); err != nil {
		return nil, err
	}
	select {
	case err := <-req.done:
		if err != nil {
			return nil, err
		}
		return req.results, nil
	case <-ctx.Done():
		// A request still queued is dropped by its committer; one already in a
		// write may still land. The caller learns nothing more than it would
		// from a lost response, and dedup makes a retry safe.
		return nil, ctx.Err()
	}
}

// normalizePushItem rejects an item the database could not store and fills
// its defaults. A bad item fails the whole request with a 400 before any
// database work: the reference answers bad input on push as a 400 for the
// request, and per-item "failed" would tell the client to retry what can never
// succeed. Checking here, not in the commit, also keeps a bad item from
// failing the other requests coalesced into its group commit (and from
// reaching the spool, whose drain would fail on it forever).
func normalizePushItem(it *PushItem, i int) error {
	if it.Partition == "" {
		it.Partition = DefaultPartition
	}
	if len(it.Payload) == 0 {
		return invalid(fmt.Sprintf("items[%d].payload", i), "items[%d].payload is required", i)
	}
	if err := checkPushText(it, "items", i); err != nil {
		return err
	}
	if it.TransactionID == "" {
		if it.MessageID == uuid.Nil {
			it.MessageID = NewMessageID()
		}
		it.TransactionID = it.MessageID.String()
	}
	return nil
}

// checkPushText checks the fields of a push item PostgreSQL stores as text
// (the queue's namespace and task are parts of its name). The trace id
// travels in the frames, but a dead letter copies it into lanes.dlq.trace_id,
// so it must be storable text too; it is not checked as a UUID (the SDKs pass
// any string), but bounded as a transaction id is, since every pop and
// listing of the message carries it. The item's field names
// (list[index].field) are built only for an error: building them for every
// item (six allocations) was 7% of the broker's CPU under batch pushes.
func checkPushText(it *PushItem, list string, index int) error {
	if strings.TrimSpace(it.Queue) == "" || nameProblem(it.Queue) != "" {
		return checkRequiredName(pushFieldName(list, index, "queue"), it.Queue)
	}
	if optionalNameProblem(it.Partition) != "" {
		return checkOptionalName(pushFieldName(list, index, "partition"), it.Partition)
	}
	if storedTextProblem(it.TransactionID, MaxTransactionIDBytes) != "" {
		return checkTransactionID(pushFieldName(list, index, "transactionId"), it.TransactionID)
	}
	if storedTextProblem(it.TraceID, MaxTransactionIDBytes) != "" {
		return CheckStoredText(pushFieldName(list, index, "traceId"), it.TraceID, MaxTransactionIDBytes)
	}
	return nil
}

// pushFieldName names field of the index-th push item of list, as errors quote it.
func pushFieldName(list string, index int, field string) string {
	return fmt.Sprintf("%s[%d].%s", list, index, field)
}

// NamespaceTask derives the discovery labels of a queue from its dotted name:
// "a.b.c" → ("a", "b"); a name without a dot has neither.
func NamespaceTask(queue string) (string, string) {
	parts := strings.SplitN(queue, ".", 3)
	if len(parts) < 2 {
		return "", ""
	}
	return parts[0], parts[1]
}

type pushRequest struct {
	// ctx is the caller's: once it is done the caller has its answer (the API
	// then spools the items), so a committer leaves the request out of its
	// writes rather than store what the spool will store again.
	ctx     context.Context
	items   []PushItem
	results []PushResult
	// replay marks a ReplayPush: its items are probed by identity.
	replay bool
	done   chan error
	// queued is when the request was handed to its committer.
	queued time.Time
}

// newPushRequest wraps normalized items for a committer, each result holding
// what is known before the write.
func newPushRequest(ctx context.Context, items []PushItem, replay bool) *pushRequest {
	req := &pushRequest{ctx: ctx, items: items, replay: replay, done: make(chan error, 1), queued: time.Now()}
	req.results = make([]PushResult, len(items))
	for i := range items {
		req.results[i] = PushResult{Index: i, TransactionID: items[i].TransactionID, Queue: items[i].Queue}
	}
	return req
}

// pusher coalesces concurrent push requests: each committer takes whatever is
// queued for it (up to a message cap) and commits it as one transaction. A
// request goes to the committer its first partition hashes to, so writes to one
// partition gather in one commit instead of queueing on its row lock across
// committers.
type pusher struct {
	e      *Engine
	queues []chan *pushRequest
	mu     sync.RWMutex
	closed bool
	wg     sync.WaitGroup
	// committing counts the group commits running, for the shutdown log.
	committing atomic.Int64
}

func newPusher(e *Engine) *pusher {
	p := &pusher{e: e}
	for i := 0; i < e.cfg.PushCommitters; i++ {
		q := make(chan *pushRequest, 1024)
		p.queues = append(p.queues, q)
		p.wg.Add(1)
		go func() { defer p.wg.Done(); p.run(q) }()
	}
	return p
}

// committerFor picks the committer of a request by its first item's partition.
func (p *pusher) committerFor(req *pushRequest) chan *pushRequest {
	h := fnv.New32a()
	_, _ = h.Write([]byte(req.items[0].Queue))
	_, _ = h.Write([]byte{0})
	_, _ = h.Write([]byte(req.items[0].Partition))
	return p.queues[h.Sum32()%uint32(len(p.queues))]
}

var errEngineClosed = errors.New("engine is shutting down")

func (p *pusher) submit(ctx context.Context, req *pushRequest) error {
	p.mu.RLock()
	defer p.mu.RUnlock()
	if p.closed {
		return errEngineClosed
	}
	select {
	case p.committerFor(req) <- req:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// close stops taking requests and waits for the committers to commit what was
// submitted. Once ctx is done the engine's halt cancels their commits, and
// close waits only for them to answer their requests with the error.
func (p *pusher) close(ctx context.Context) {
	p.mu.Lock()
	p.closed = true
	for _, q := range p.queues {
		close(q)
	}
	p.mu.Unlock()
	finished := make(chan struct{})
	go func() { p.wg.Wait(); close(finished) }()
	select {
	case <-finished:
		return
	case <-time.After(100 * time.Millisecond):
	}
	p.e.log.Info("waiting for group commits", "commits", p.pending())
	select {
	case <-finished:
	case <-ctx.Done():
		p.e.log.Warn("shutdown budget spent: canceling group commits; their clients get no answer, and each either committed or did not", "commits", p.pending())
		<-finished
	}
}

// pending counts the group commits running and the requests queued for one.
func (p *pusher) pending() int64 {
	n := p.committing.Load()
	for _, q := range p.queues {
		n += int64(len(q))
	}
	return n
}

func (p *pusher) run(queue chan *pushRequest) {
	maxMsgs := p.e.cfg.PushMaxBatchMessages
	var waits []time.Duration // reused: the observer reads it during its call only
	for first := range queue {
		batch := []*pushRequest{first}
		n := len(first.items)
	gather:
		for n < maxMsgs {
			select {
			case r, ok := <-queue:
				if !ok {
					break gather
				}
				batch = append(batch, r)
				n += len(r.items)
			default:
				break gather
			}
		}
		observe := p.e.pushCommitObserver.Load()
		if observe == nil {
			p.commitBatch(batch)
			continue
		}
		// The waits are read first: the commit drops abandoned requests in
		// batch's array.
		started := time.Now()
		waits = waits[:0]
		for _, r := range batch {
			waits = append(waits, started.Sub(r.queued))
		}
		p.commitBatch(batch)
		(*observe)(PushCommit{Messages: n, Took: time.Since(started), Waits: waits})
	}
}

// PushCommit is one push group commit, as ObservePushCommits reports it.
type PushCommit struct {
	// Messages counts the items of the push requests the commit took.
	Messages int
	// Took runs from the commit's start to its answer, retries included.
	Took time.Duration
	// Waits holds each request's time from reaching its committer to the
	// commit's start; the committer reuses it after the observer returns.
	Waits []time.Duration
}

// ObservePushCommits has f told about every push group commit (pushes and
// the spool's drain), after it answered its requests. f runs on the
// committer, which takes no more requests until it returns.
func (e *Engine) ObservePushCommits(f func(PushCommit)) { e.pushCommitObserver.Store(&f) }

// PushCommitters is how many push group commits may run at once.
func (e *Engine) PushCommitters() int { return e.cfg.PushCommitters }

// commitBatch commits a group of coalesced requests and answers each. Input
// checks keep values the database rejects out of the commit; should one get
// through anyway (a data error, SQLSTATE class 22 or 54, is caused by a value,
// so by one member), each request is committed alone, so only the one that
// carries it fails. Nothing of the failed commit was stored, so running the
// members again is a plain retry for each.
func (p *pusher) commitBatch(batch []*pushRequest) {
	p.committing.Add(1)
	defer p.committing.Add(-1)
	batch, err := p.commitWithRetry(batch)
	if err != nil && len(batch) > 1 && isDataError(err) {
		for _, r := range batch {
			if alone, err := p.commitWithRetry([]*pushRequest{r}); len(alone) == 1 {
				r.finish(p.e, err)
			}
		}
		return
	}
	for _, r := range batch {
		r.finish(p.e, err)
	}
}

// finish counts what a committed request stored, here and not in its caller,
// which may have left before the answer, and answers it.
func (r *pushRequest) finish(e *Engine, err error) {
	if err == nil {
		source := StoredByPush
		if r.replay {
			source = StoredBySpool
		}
		e.countStoredResults(source, r.results)
	}
	r.done <- err
}

// commitWithRetry commits batch, running it again after a failure that
// stored nothing and may pass next time. Before each attempt it answers and
// leaves out the requests whose caller gave up (dropAbandoned); it returns the
// requests its last attempt wrote, for the caller to answer.
func (p *pusher) commitWithRetry(batch []*pushRequest) ([]*pushRequest, error) {
	var err error
	for attempt := 0; attempt < 3; attempt++ {
		if batch = dropAbandoned(batch); len(batch) == 0 {
			return nil, nil
		}
		ctx, cancel := context.WithTimeout(p.e.halt, 30*time.Second)
		err = p.e.commitPushes(ctx, batch)
		cancel()
		if err == nil {
			return batch, nil
		}
		if p.e.halt.Err() != nil {
			return batch, fmt.Errorf("%w: group commit canceled: %w", errEngineClosed, err)
		}
		if !IsRetryable(err) && !p.e.forgetStalePartitions(err) && !p.e.pauseUnprobedWrites(err) {
			return batch, err
		}
	}
	return batch, err
}

// dropAbandoned answers each request whose caller is gone with its context's
// error, storing nothing, and returns the others (in batch's array). A caller
// whose push deadline passed while the request waited (a stalled database)
// has spooled the items under the same message ids; writing the request too
// would store them twice on a queue without dedup: in the same write as the
// drain's replay, which then cannot see it, or after the replay committed.
func dropAbandoned(batch []*pushRequest) []*pushRequest {
	live := batch[:0]
	for _, r := range batch {
		if err := r.ctx.Err(); err != nil {
			r.done <- err
			continue
		}
		live = append(live, r)
	}
	return live
}

type partitionKey struct{ queue, partition string }

// commitPushes writes every request of a group commit in one transaction:
// in one round trip when the write fits pushOneTripSQL, otherwise in two:
// (begin, ensure queues and partitions, lock partition rows in id order, probe
// dedup under the lock), then (insert segments and txns, advance allocators,
// commit).
func (e *Engine) commitPushes(ctx context.Context, batch []*pushRequest) error {
	var slots []pushSlot
	for _, r := range batch {
		for i := range r.items {
			slots = append(slots, pushSlot{item: &r.items[i], result: &r.results[i], messageID: r.items[i].MessageID,
				replay: r.replay && r.items[i].MessageID != uuid.Nil})
		}
	}
	w := e.newCachedPushWrite(slots, false)
	// A replay needs the identity probe, so it never bets its ids are new.
	w.unprobed = w.knownIDs != nil && !w.replays && time.Now().UnixNano() > e.unprobedPausedUntil.Load()

	tx, done, err := e.acquireHotTx(ctx)
	if err != nil {
		return err
	}
	defer done()

	b := &pgx.Batch{}
	begun := tx.beginHot(b)
	if w.unprobed && w.fitsOneTrip() {
		// One round trip: nothing in the write depends on what the lock reads.
		w.queueOneTrip(b)
		ho := e.queueCommit(tx, b, w)
		if err := ho.send(ctx, e, tx, b); err != nil {
			var pgErr *pgconn.PgError
			if errors.As(err, &pgErr) && pgErr.Code == partitionGoneCode {
				return fmt.Errorf("push: %s: %w", pgErr.Message, errPartitionGone)
			}
			return err
		}
		e.hot.pushOneTrip.Add(1)
		w.wake(e, ho)
		return nil
	}
	w.queueLock(b)
	br := tx.SendBatch(ctx, b)
	err = func() error {
		defer br.Close()
		for range begun {
			if _, err := br.Exec(); err != nil {
				return err
			}
		}
		return w.readLock(br)
	}()
	if err != nil {
		return err
	}
	tx.open = true
	b = &pgx.Batch{}
	w.queueWrites(b)
	ho := e.queueCommit(tx, b, w)
	if err := ho.send(ctx, e, tx, b); err != nil {
		return err
	}
	tx.open = false
	e.hot.pushGeneral.Add(1)
	e.knownPartitions.add(w.parts)
	w.wake(e, ho)
	return nil
}

// newCachedPushWrite is newPushWrite for partitions the broker may know: when
// the cache has every partition's id, the write skips provisioning and locks
// and probes by primary key.
func (e *Engine) newCachedPushWrite(slots []pushSlot, firstWins bool) *pushWrite {
	w := newPushWrite(slots, firstWins)
	w.knownIDs = e.knownPartitions.lookup(w.keys)
	w.skipProvision = w.knownIDs != nil
	return w
}

// unprobedPause is how long pushes probe lanes.txns again after an unprobed
// write met a stored transaction id.
const unprobedPause = time.Second

// pauseUnprobedWrites reports whether err is an unprobed push write meeting a
// transaction id lanes.txns already holds (a duplicate, an id outside its dedup
// window, or a queue with dedup off reusing one). Pushes then probe first for
// unprobedPause, so running the write again gives the verdicts, and a workload
// that repeats ids pays one wasted transaction per pause, not one per push.
func (e *Engine) pauseUnprobedWrites(err error) bool {
	if !IsUniqueViolation(err, "txns_pkey") {
		return false
	}
	e.unprobedPausedUntil.Store(time.Now().Add(unprobedPause).UnixNano())
	e.hot.unprobedConflicts.Add(1)
	return true
}

// forgetStalePartitions reports whether err is a cached partition found gone;
// it then empties the cache, so running the write again provisions.
func (e *Engine) forgetStalePartitions(err error) bool {
	if !errors.Is(err, errPartitionGone) {
		return false
	}
	e.knownPartitions.clear()
	return true
}

// pushSlot is one item of a push write and where its verdict goes.
type pushSlot struct {
	item   *PushItem
	result *PushResult
	// messageID is preset by writers that promised an id in advance (timers,
	// the spool); zero mints one.
	messageID uuid.UUID
	// replay (ReplayPush, with a messageID) makes the item a duplicate when
	// lanes.txns maps its transaction id to messageID already.
	replay bool
}

type pushPartition struct {
	id         uuid.UUID
	lastOffset int64
	dedup      bool
	window     int // dedup window in seconds
}

// pushWrite writes pushes inside a caller's transaction, split in phases so
// callers can fold its statements into their own round trips:
//
//	queueLock  → provision queue and partition rows, lock the partition rows
//	             ascending by id (FOR UPDATE), probe lanes.txns under that lock
//	readLock   → read those answers
//	queueWrites → one segment per partition, txns rows, last_offset, pg_notify
//	wake       → after commit, wake this broker's parked pops
//
// Lock order: a caller that also locks consumer rows (transaction bundles)
// does so after queueLock, never before it.
type pushWrite struct {
	slots []pushSlot
	// firstWins makes a repeated transaction id within the write a duplicate
	// even when the queue's dedup window is off (transaction bundles).
	firstWins bool
	groups    map[partitionKey][]int
	keys      []partitionKey
	parts     map[partitionKey]*pushPartition
	seen      map[partitionKey]map[string]uuid.UUID
	// stored holds every transaction id the by-id probe found in lanes.txns,
	// inside the dedup window or not: those rows are overwritten, every other
	// id is a plain insert (probed under the partition lock, so no conflict).
	stored  map[uuid.UUID]map[string]bool
	touched map[string][]string // queue → partitions that received messages
	// skipProvision leaves out the create-if-missing statements: every
	// partition of the write is known to exist (the plain push path's cache).
	skipProvision bool
	// knownIDs, when set, holds every partition's id, so the lock and the
	// dedup probe use primary keys (implies skipProvision).
	knownIDs map[partitionKey]uuid.UUID
	// queued is what queueWrites queued, for a bundle's acks to resolve
	// against (ackPlan.includePushes).
	queued queuedWrites
	// unprobed (plain pushes with knownIDs only) leaves the lanes.txns probe
	// out and bets that every transaction id is new: the rows go in by plain
	// INSERT, and an id already stored fails the transaction on txns_pkey, to
	// be run again probed (pauseUnprobedWrites). Nothing is written before the
	// commit, so losing the bet costs time, never a verdict.
	unprobed bool
	// replays says some slot is a replay; replayed holds, per partition, the
	// transaction ids whose txns row carries the replayed slot's message id.
	replays  bool
	replayed map[partitionKey]map[string]uuid.UUID
}

// errPartitionGone reports a partition that vanished (its queue was deleted)
// between the cache saying it exists and the lock; the push retries with
// provisioning.
var errPartitionGone = errors.New("partition no longer exists")

func newPushWrite(slots []pushSlot, firstWins bool) *pushWrite {
	w := &pushWrite{slots: slots, firstWins: firstWins, groups: map[partitionKey][]int{},
		parts: map[partitionKey]*pushPartition{}, seen: map[partitionKey]map[string]uuid.UUID{}, touched: map[string][]string{}}
	for i := range slots {
		k := partitionKey{slots[i].item.Queue, slots[i].item.Partition}
		w.groups[k] = append(w.groups[k], i)
		w.replays = w.replays || slots[i].replay
	}
	w.keys = make([]partitionKey, 0, len(w.groups))
	for k := range w.groups {
		w.keys = append(w.keys, k)
	}
	sort.Slice(w.keys, func(i, j int) bool {
		if w.keys[i].queue != w.keys[j].queue {
			return w.keys[i].queue < w.keys[j].queue
		}
		return w.keys[i].partition < w.keys[j].partition
	})
	return w
}

// queueLock queues four statements: two provisioning execs (left out when
// w.skipProvision says every partition is known to exist) and two queries,
// then the replay probe when the write holds replays.
func (w *pushWrite) queueLock(b *pgx.Batch) {
	queueNames := []string{}
	namespaces := []string{}
	tasks := []string{}
	pQueues := make([]string, len(w.keys))
	pNames := make([]string, len(w.keys))
	for i, k := range w.keys {
		if i == 0 || k.queue != w.keys[i-1].queue {
			ns, task := NamespaceTask(k.queue)
			queueNames = append(queueNames, k.queue)
			namespaces = append(namespaces, ns)
			tasks = append(tasks, task)
		}
		pQueues[i] = k.queue
		pNames[i] = k.partition
	}
	var probeQ, probeP, probeT []string
	for _, k := range w.keys {
		for _, si := range w.groups[k] {
			probeQ = append(probeQ, k.queue)
			probeP = append(probeP, k.partition)
			probeT = append(probeT, w.slots[si].item.TransactionID)
		}
	}
	if w.knownIDs != nil {
		w.queueLockByID(b)
		w.queueReplayProbe(b)
		return
	}
	if !w.skipProvision {
		w.queueProvision(b, queueNames, namespaces, tasks, pQueues, pNames)
	}
	// Ids are resolved name by name first (an InitPlan of per-row probes), then
	// locked by primary key in id order.
	b.Queue(`SELECT p.id, p.last_offset, q.name, p.name, q.dedup_window_seconds
		FROM lanes.partitions p JOIN lanes.queues q ON q.id = p.queue_id
		WHERE p.id = ANY(ARRAY(SELECT r.id FROM unnest($1::text[], $2::text[]) AS x(q, p)
			CROSS JOIN LATERAL (SELECT p.id FROM lanes.queues q JOIN lanes.partitions p ON p.queue_id = q.id
				WHERE q.name = x.q AND p.name = x.p OFFSET 0) r))
		ORDER BY p.id FOR UPDATE OF p`, pQueues, pNames)
	// The txns lookup is a LATERAL probe on the full primary key so every plan,
	// generic ones included, reads one index entry per item instead of the
	// partition's whole transaction index.
	b.Queue(`SELECT q.name, p.name, t.transaction_id, t.message_id
		FROM unnest($1::text[], $2::text[], $3::text[]) AS x(q, p, txn)
		CROSS JOIN LATERAL (SELECT q.id, q.name, q.dedup_window_seconds FROM lanes.queues q WHERE q.name = x.q OFFSET 0) q
		CROSS JOIN LATERAL (SELECT p.id, p.name FROM lanes.partitions p
			WHERE p.queue_id = q.id AND p.name = x.p OFFSET 0) p
		CROSS JOIN LATERAL (SELECT t.transaction_id, t.message_id, t.created_at FROM lanes.txns t
			WHERE t.partition_id = p.id AND t.transaction_id = x.txn OFFSET 0) t
		WHERE q.dedup_window_seconds > 0
		  AND t.created_at > now() - make_interval(secs => q.dedup_window_seconds)`, probeQ, probeP, probeT)
	w.queueReplayProbe(b)
}

// queueReplayProbe queues, for a write holding replays, the lookup of each
// replayed item's (partition, transaction id) in lanes.txns by primary key,
// kept when the row carries the item's message id. It runs after the lock, so
// it sees a first attempt that committed while this write waited.
func (w *pushWrite) queueReplayProbe(b *pgx.Batch) {
	if !w.replays {
		return
	}
	var probeQ, probeP, probeT []string
	var probeM []uuid.UUID
	for _, s := range w.slots {
		if s.replay {
			probeQ, probeP = append(probeQ, s.item.Queue), append(probeP, s.item.Partition)
			probeT, probeM = append(probeT, s.item.TransactionID), append(probeM, s.messageID)
		}
	}
	b.Queue(`SELECT x.q, x.p, x.txn, x.mid
		FROM unnest($1::text[], $2::text[], $3::text[], $4::uuid[]) AS x(q, p, txn, mid)
		CROSS JOIN LATERAL (SELECT q.id FROM lanes.queues q WHERE q.name = x.q OFFSET 0) q
		CROSS JOIN LATERAL (SELECT p.id FROM lanes.partitions p WHERE p.queue_id = q.id AND p.name = x.p OFFSET 0) p
		CROSS JOIN LATERAL (SELECT 1 FROM lanes.txns t
			WHERE t.partition_id = p.id AND t.transaction_id = x.txn AND t.message_id = x.mid OFFSET 0) t`,
		textArray(probeQ), textArray(probeP), textArray(probeT), uuidArray(probeM))
}

// readTxnHits reads a probe's (queue, partition, transaction id, message id)
// rows into hits, creating its maps as needed.
func readTxnHits(hits *map[partitionKey]map[string]uuid.UUID) func(pgx.Rows) error {
	return func(rows pgx.Rows) error {
		if *hits == nil {
			*hits = map[partitionKey]map[string]uuid.UUID{}
		}
		for rows.Next() {
			var k partitionKey
			var txn string
			var mid uuid.UUID
			if err := rows.Scan(&k.queue, &k.partition, &txn, &mid); err != nil {
				return err
			}
			if (*hits)[k] == nil {
				(*hits)[k] = map[string]uuid.UUID{}
			}
			(*hits)[k][txn] = mid
		}
		return rows.Err()
	}
}

// queueLockByID is queueLock for partitions whose ids the broker already
// knows: the lock and the dedup probe go straight to primary keys instead of
// resolving names per item.
func (w *pushWrite) queueLockByID(b *pgx.Batch) {
	ids := make([]uuid.UUID, len(w.keys))
	for i, k := range w.keys {
		ids[i] = w.knownIDs[k]
	}
	var probePID []uuid.UUID
	var probeT []string
	for _, k := range w.keys {
		for _, si := range w.groups[k] {
			probePID = append(probePID, w.knownIDs[k])
			probeT = append(probeT, w.slots[si].item.TransactionID)
		}
	}
	b.Queue(`SELECT p.id, p.last_offset, q.name, p.name, q.dedup_window_seconds
		FROM lanes.partitions p JOIN lanes.queues q ON q.id = p.queue_id
		WHERE p.id = ANY($1::uuid[])
		ORDER BY p.id FOR UPDATE OF p`, uuidArray(ids))
	if w.unprobed {
		return
	}
	// Runs after the lock in the same batch, so the probe sees every commit
	// that held the lock before us. The window is applied in readLock.
	b.Queue(`SELECT t.partition_id, t.transaction_id, t.message_id,
			extract(epoch FROM now() - t.created_at)::float8
		FROM unnest($1::uuid[], $2::text[]) AS x(pid, txn)
		CROSS JOIN LATERAL (SELECT t.partition_id, t.transaction_id, t.message_id, t.created_at FROM lanes.txns t
			WHERE t.partition_id = x.pid AND t.transaction_id = x.txn OFFSET 0) t`, uuidArray(probePID), textArray(probeT))
}

// readProbeByID reads queueLockByID's probe, keeping hits inside each
// partition's dedup window.
func (w *pushWrite) readProbeByID(rows pgx.Rows) error {
	keyOf := make(map[uuid.UUID]partitionKey, len(w.parts))
	for k, ps := range w.parts {
		keyOf[ps.id] = k
	}
	for rows.Next() {
		var pid, mid uuid.UUID
		var txn string
		var age float64
		if err := rows.Scan(&pid, &txn, &mid, &age); err != nil {
			return err
		}
		if w.stored == nil {
			w.stored = map[uuid.UUID]map[string]bool{}
		}
		if w.stored[pid] == nil {
			w.stored[pid] = map[string]bool{}
		}
		w.stored[pid][txn] = true
		k, ok := keyOf[pid]
		if !ok || !w.parts[k].dedup || age >= float64(w.parts[k].window) {
			continue
		}
		if w.seen[k] == nil {
			w.seen[k] = map[string]uuid.UUID{}
		}
		w.seen[k][txn] = mid
	}
	return rows.Err()
}

// queueProvision creates missing queue and partition rows (a new partition
// bumps its queue's partition_version, so pops seed cursors for it).
func (w *pushWrite) queueProvision(b *pgx.Batch, queueNames, namespaces, tasks, pQueues, pNames []string) {
	b.Queue(`INSERT INTO lanes.queues (name, namespace, task)
		SELECT n, ns, t FROM unnest($1::text[], $2::text[], $3::text[]) AS x(n, ns, t)
		ON CONFLICT (name) DO NOTHING`, queueNames, namespaces, tasks)
	b.Queue(`WITH created AS (
			INSERT INTO lanes.partitions (queue_id, name)
			SELECT q.id, x.p FROM unnest($1::text[], $2::text[]) WITH ORDINALITY AS x(q, p, ord)
			JOIN lanes.queues q ON q.name = x.q ORDER BY x.ord
			ON CONFLICT (queue_id, name) DO NOTHING
			RETURNING queue_id)
		UPDATE lanes.queues SET partition_version = partition_version + 1
		WHERE id IN (SELECT queue_id FROM created)`, pQueues, pNames)
}

// readLock reads the answers of the statements queueLock queued.
func (w *pushWrite) readLock(br pgx.BatchResults) error {
	for i := 0; i < 2 && !w.skipProvision; i++ {
		if _, err := br.Exec(); err != nil {
			return err
		}
	}
	if err := readRows(br, w.readLockedPartitions); err != nil {
		return err
	}
	switch {
	case w.unprobed: // no probe was queued
	case w.knownIDs != nil:
		if err := readRows(br, w.readProbeByID); err != nil {
			return err
		}
	default:
		if err := readRows(br, readTxnHits(&w.seen)); err != nil {
			return err
		}
	}
	if w.replays {
		w.replayed = nil // this attempt's answer only
		if err := readRows(br, readTxnHits(&w.replayed)); err != nil {
			return err
		}
	}
	if len(w.parts) != len(w.keys) {
		return fmt.Errorf("push: %d of %d partitions resolved: %w", len(w.parts), len(w.keys), errPartitionGone)
	}
	return nil
}

// readRows hands the next result of br to read and closes it.
func readRows(br pgx.BatchResults, read func(pgx.Rows) error) error {
	rows, err := br.Query()
	if err != nil {
		return err
	}
	defer rows.Close()
	return read(rows)
}

// readLockedPartitions reads the lock statement: each partition's id, allocator
// and dedup window.
func (w *pushWrite) readLockedPartitions(rows pgx.Rows) error {
	for rows.Next() {
		var ps pushPartition
		var k partitionKey
		if err := rows.Scan(&ps.id, &ps.lastOffset, &k.queue, &k.partition, &ps.window); err != nil {
			return err
		}
		ps.dedup = ps.window > 0
		w.parts[k] = &ps
	}
	return rows.Err()
}

// duplicateInLog reports the first slot whose transaction id the log already holds.
func (w *pushWrite) duplicateInLog() (int, bool) {
	for _, k := range w.keys {
		if !w.parts[k].dedup {
			continue
		}
		for _, si := range w.groups[k] {
			if _, dup := w.seen[k][w.slots[si].item.TransactionID]; dup {
				return si, true
			}
		}
	}
	return 0, false
}

// queueWrites assigns offsets and verdicts and queues the inserts, the
// allocator advance and the notification; nothing is queued when every item
// is a duplicate.
func (w *pushWrite) queueWrites(b *pgx.Batch) {
	var segPID []uuid.UUID
	var segBase, segEnd []int64
	var segFrames [][]byte
	var txPID []uuid.UUID
	var txID []string
	var txOff []int64
	var txMsg []uuid.UUID
	var updPID []uuid.UUID
	var updLast []int64
	for _, k := range w.keys {
		ps := w.parts[k]
		inLog := w.seen[k] // ids the probe found inside the dedup window
		checkDups := ps.dedup || w.firstWins
		group := w.groups[k]
		// written maps each id this write stores to its txns row, for repeats within the write
		written := make(map[string]int, len(group))
		next := ps.lastOffset + 1
		seg := newSegmenter(framesSize(w.slots, group))
		for _, si := range group {
			slot := &w.slots[si]
			it, res := slot.item, slot.result
			if slot.replay && w.replayed[k][it.TransactionID] == slot.messageID {
				// stored by an earlier attempt of this very item
				res.Status, res.MessageID = PushDuplicate, slot.messageID
				continue
			}
			row, repeat := written[it.TransactionID]
			if slot.replay && repeat && txMsg[row] == slot.messageID {
				// this write stores the same message already (its first attempt,
				// gathered with its replay): one copy whatever the window
				res.Status, res.MessageID = PushDuplicate, slot.messageID
				continue
			}
			if checkDups {
				if orig, dup := inLog[it.TransactionID]; dup {
					res.Status, res.MessageID = PushDuplicate, orig
					continue
				}
				if repeat {
					res.Status, res.MessageID = PushDuplicate, txMsg[row]
					continue
				}
			}
			id := appendQueued(seg, slot)
			if repeat {
				// dedup off and the id repeats: the index points at the newest offset
				txOff[row], txMsg[row] = next, id
			} else {
				written[it.TransactionID] = len(txID)
				txPID = append(txPID, ps.id)
				txID = append(txID, it.TransactionID)
				txOff = append(txOff, next)
				txMsg = append(txMsg, id)
			}
			next++
		}
		if next == ps.lastOffset+1 {
			continue
		}
		for _, c := range seg.segments() {
			segPID = append(segPID, ps.id)
			segBase = append(segBase, ps.lastOffset+1+int64(c.first))
			segEnd = append(segEnd, ps.lastOffset+int64(c.first+c.count))
			segFrames = append(segFrames, c.frames)
		}
		updPID = append(updPID, ps.id)
		updLast = append(updLast, next-1)
		w.touched[k.queue] = append(w.touched[k.queue], k.partition)
	}
	w.queued = queuedWrites{txPartitions: txPID, txIDs: txID, txOffsets: txOff, partitions: updPID, lastOffsets: updLast}
	if len(segPID) == 0 {
		return
	}
	b.Queue(`INSERT INTO lanes.segments (partition_id, base_offset, end_offset, created_at, frames)
		SELECT x.pid, x.b, x.e, clock_timestamp(), x.f
		FROM unnest($1::uuid[], $2::int8[], $3::int8[], $4::bytea[]) AS x(pid, b, e, f)`,
		uuidArray(segPID), int8Array(segBase), int8Array(segEnd), segFrames)
	w.queueTxns(b, txPID, txID, txOff, txMsg)
	queueAdvance(b, updPID, updLast)
}

// queuedWrites is what a push write queued: each stored transaction id's
// partition and offset, and each written partition's new last offset.
type queuedWrites struct {
	txPartitions []uuid.UUID
	txIDs        []string
	txOffsets    []int64
	partitions   []uuid.UUID
	lastOffsets  []int64
}

// oneTripMaxPartitions bounds the partitions of a one-trip write: its
// statement finds each message's partition row by scanning the rows it
// advanced (hash and merge joins are off on hot paths), so a write that fans
// out wider takes the two-trip path.
const oneTripMaxPartitions = 64

// fitsOneTrip reports whether the write can go as one statement: an unprobed
// write (every partition id known, every transaction id bet new) whose ids
// each appear once per partition, so every item is queued whatever the
// queue's dedup window, and no verdict waits for a database answer.
func (w *pushWrite) fitsOneTrip() bool {
	if len(w.keys) > oneTripMaxPartitions {
		return false
	}
	for _, k := range w.keys {
		group := w.groups[k]
		if len(group) == 1 {
			continue
		}
		ids := make(map[string]struct{}, len(group))
		for _, si := range group {
			ids[w.slots[si].item.TransactionID] = struct{}{}
		}
		if len(ids) != len(group) {
			return false
		}
	}
	return true
}

// pushOneTripSQL is a whole unprobed write in one statement. The UPDATE locks
// each partition row (in the order of $1, ascending ids as the two-trip lock
// takes them) and moves last_offset by the partition's message count under
// that lock, so the segments and txns rows take their offsets from what it
// returns: a segment ($3..$6) carries the position (from 1) of its first
// message among the partition's, a txns row ($7..$10) that of its message. A
// partition that is gone (its queue deleted after the broker cached its id)
// fails the statement in lanes.expect, before COMMIT. A txns row is stamped
// as it is produced, after the lock (see queueTxns): the UPDATE's
// clock_timestamp() is taken before it waits for the row.
const pushOneTripSQL = `WITH adv AS (
		UPDATE lanes.partitions p SET last_offset = p.last_offset + x.n, last_write_at = clock_timestamp()
		FROM unnest($1::uuid[], $2::int8[]) AS x(pid, n)
		WHERE p.id = x.pid
		RETURNING p.id, p.last_offset, x.n, p.last_write_at),
	seg AS (
		INSERT INTO lanes.segments (partition_id, base_offset, end_offset, created_at, frames)
		SELECT a.id, a.last_offset - a.n + s.k, a.last_offset - a.n + s.k + s.c - 1, a.last_write_at, s.f
		FROM unnest($3::uuid[], $4::int8[], $5::int8[], $6::bytea[]) AS s(pid, k, c, f)
		JOIN adv a ON a.id = s.pid),
	txn AS (
		INSERT INTO lanes.txns (partition_id, transaction_id, message_offset, message_id, created_at)
		SELECT a.id, t.txn, a.last_offset - a.n + t.k, t.mid, clock_timestamp()
		FROM unnest($7::uuid[], $8::text[], $9::int8[], $10::uuid[]) AS t(pid, txn, k, mid)
		JOIN adv a ON a.id = t.pid),
	tracked AS (
		UPDATE lanes.partition_writes w SET last_write_xid = pg_current_xact_id(),
			last_offset = a.last_offset, last_write_at = a.last_write_at
		FROM adv a WHERE w.partition_id = a.id)
	SELECT lanes.expect((SELECT count(*) FROM adv) = cardinality($1::uuid[]), '` + partitionGoneCode + `',
		'the push advanced fewer partitions than it names: a partition no longer exists')`

// queueOneTrip queues the write as pushOneTripSQL (see fitsOneTrip) and gives
// every item its verdict: queued, under the id it was given or a new one.
func (w *pushWrite) queueOneTrip(b *pgx.Batch) {
	keys := append([]partitionKey(nil), w.keys...)
	sort.Slice(keys, func(i, j int) bool {
		a, b := w.knownIDs[keys[i]], w.knownIDs[keys[j]]
		return bytes.Compare(a[:], b[:]) < 0
	})
	pids := make([]uuid.UUID, len(keys))
	counts := make([]int64, len(keys))
	var segPID []uuid.UUID
	var segFirst, segCount []int64
	var segFrames [][]byte
	var txPID, txMsg []uuid.UUID
	var txID []string
	var txPos []int64
	for i, k := range keys {
		id := w.knownIDs[k]
		group := w.groups[k]
		pids[i], counts[i] = id, int64(len(group))
		seg := newSegmenter(framesSize(w.slots, group))
		for pos, si := range group {
			mid := appendQueued(seg, &w.slots[si])
			txPID, txID, txPos, txMsg = append(txPID, id), append(txID, w.slots[si].item.TransactionID), append(txPos, int64(pos+1)), append(txMsg, mid)
		}
		for _, c := range seg.segments() {
			segPID, segFirst = append(segPID, id), append(segFirst, int64(c.first+1))
			segCount, segFrames = append(segCount, int64(c.count)), append(segFrames, c.frames)
		}
		w.touched[k.queue] = append(w.touched[k.queue], k.partition)
	}
	b.Queue(pushOneTripSQL, uuidArray(pids), int8Array(counts), uuidArray(segPID), int8Array(segFirst), int8Array(segCount), segFrames,
		uuidArray(txPID), textArray(txID), int8Array(txPos), uuidArray(txMsg))
}

// appendQueued appends slot's message to a write's segments under the id it
// was given (or a new one) and gives the slot its verdict: queued.
func appendQueued(seg *segmenter, slot *pushSlot) uuid.UUID {
	id := slot.messageID
	if id == uuid.Nil {
		id = NewMessageID()
	}
	it := slot.item
	seg.add(&Frame{MessageID: id, TransactionID: it.TransactionID, TraceID: it.TraceID, ProducerSub: it.ProducerSub, Payload: it.Payload})
	slot.result.Status, slot.result.MessageID = PushQueued, id
	return id
}

// queueAdvance moves each partition's last_offset to its new value, with the
// copy and last-write xid in lanes.partition_writes that pops find written
// partitions by (040_groups.sql), in one statement. Every writer that appends
// to a partition advances it through here, but for pushOneTripSQL, which moves
// the same columns of both rows in its own statement.
func queueAdvance(b *pgx.Batch, pids []uuid.UUID, lastOffsets []int64) {
	b.Queue(`WITH at AS (SELECT clock_timestamp() AS t),
		tracked AS (UPDATE lanes.partition_writes w SET last_write_xid = pg_current_xact_id(),
				last_offset = ($2::int8[])[array_position($1::uuid[], w.partition_id)], last_write_at = at.t
			FROM at WHERE w.partition_id = ANY($1::uuid[]))
		UPDATE lanes.partitions p SET last_offset = ($2::int8[])[array_position($1::uuid[], p.id)], last_write_at = at.t
		FROM at WHERE p.id = ANY($1::uuid[])`, uuidArray(pids), int8Array(lastOffsets))
}

// queueTxns writes the transaction-id index rows, stamped when they are
// written, after the partition lock, as the segment is: the dedup window
// counts from when a message was stored, and a stamp from the transaction's
// start (now()) would open it early by the time the write waited for the lock.
// With the by-id probe every id already stored is known, so new ids take a
// plain INSERT (cheaper than INSERT … ON CONFLICT, which pays a speculative
// insertion per row) and only stored ones are overwritten; without it every
// row is an upsert.
func (w *pushWrite) queueTxns(b *pgx.Batch, pids []uuid.UUID, txns []string, offsets []int64, msgs []uuid.UUID) {
	const upsert = `INSERT INTO lanes.txns (partition_id, transaction_id, message_offset, message_id, created_at)
		SELECT x.pid, x.t, x.o, x.m, c.at
		FROM unnest($1::uuid[], $2::text[], $3::int8[], $4::uuid[]) AS x(pid, t, o, m), (SELECT clock_timestamp() AS at) c
		ON CONFLICT (partition_id, transaction_id) DO UPDATE
		SET message_offset = EXCLUDED.message_offset, message_id = EXCLUDED.message_id, created_at = EXCLUDED.created_at`
	if w.knownIDs == nil {
		b.Queue(upsert, uuidArray(pids), textArray(txns), int8Array(offsets), uuidArray(msgs))
		return
	}
	var newP, oldP, newM, oldM []uuid.UUID
	var newT, oldT []string
	var newO, oldO []int64
	for i := range txns {
		if w.stored[pids[i]][txns[i]] {
			oldP, oldT, oldO, oldM = append(oldP, pids[i]), append(oldT, txns[i]), append(oldO, offsets[i]), append(oldM, msgs[i])
			continue
		}
		newP, newT, newO, newM = append(newP, pids[i]), append(newT, txns[i]), append(newO, offsets[i]), append(newM, msgs[i])
	}
	if len(newT) > 0 {
		b.Queue(`INSERT INTO lanes.txns (partition_id, transaction_id, message_offset, message_id, created_at)
			SELECT x.pid, x.t, x.o, x.m, c.at
			FROM unnest($1::uuid[], $2::text[], $3::int8[], $4::uuid[]) AS x(pid, t, o, m), (SELECT clock_timestamp() AS at) c`,
			uuidArray(newP), textArray(newT), int8Array(newO), uuidArray(newM))
	}
	if len(oldT) > 0 {
		b.Queue(upsert, uuidArray(oldP), textArray(oldT), int8Array(oldO), uuidArray(oldM))
	}
}

// wake tells parked pops about the queues the committed write touched; ho
// (when not nil) claimed for one of them in the write's round trip.
func (w *pushWrite) wake(e *Engine, ho *handOff) {
	e.announce(w.touched, ho)
}

// announce tells this broker's parked pops about committed changes that may
// have made messages claimable (touched: queue → partitions, nil partitions
// for any), and other brokers through the notifier. A claim the commit ran
// for a parked pop (ho, nil for none) saw what the commit made claimable for
// that pop's group, so the group is woken only for what the claim left.
// NOTIFY is sent after the commit, not inside it: a notifying commit takes a
// database-wide lock, which would serialize every push commit behind the
// others.
func (e *Engine) announce(touched map[string][]string, ho *handOff) {
	for q, parts := range touched {
		if group, n, ok := ho.wakes(q); ok {
			e.waiters.wakeServed(q, parts, group, n)
		} else {
			e.waiters.wake(q, parts)
		}
	}
	e.notifier.publish(touched)
}

// NormalizePushItems applies the push defaults (partition, transaction id) and
// checks what the push path checks, for callers that store items elsewhere first.
func NormalizePushItems(items []PushItem) error {
	for i := range items {
		if err := normalizePushItem(&items[i], i); err != nil {
			return err
		}
	}
	return nil
}
