package engine

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
)

// PopRequest claims a batch for one consumer group.
type PopRequest struct {
	Queue     string // empty on a discovery pop
	Partition string // empty: the broker picks partitions of Queue
	Namespace string // discovery filters
	Task      string
	Group     string // empty: queue mode
	// Batch is the total message budget shared by every claimed partition.
	Batch int
	// Partitions caps how many partitions one call claims; <= 0 means no cap.
	Partitions       int
	LeaseSeconds     int // <= 0: the queue's leaseTime; capped at MaxLeaseSeconds
	AutoAck          bool
	SubscriptionMode string // "new", "all" or empty for the broker default
	SubscriptionFrom string // "now" or an RFC 3339 timestamp
	Wait             bool
	Timeout          time.Duration
	// AutoBatch and AutoWidth ask the pop autopilot to size the knob the
	// caller left out; an explicit knob is never touched.
	AutoBatch bool
	AutoWidth bool
	// claimsAhead is how many claims of the group were running on this
	// broker when this pop's claim started: they take the partitions served
	// least recently, so this claim starts past them (see claimQuery).
	claimsAhead int
}

// Message is one delivered message.
type Message struct {
	ID            uuid.UUID
	TransactionID string
	TraceID       string
	ProducerSub   string
	Data          json.RawMessage
	CreatedAt     time.Time
	PartitionID   uuid.UUID
	Partition     string
	Queue         string
	LeaseID       string
	ConsumerGroup string
	Offset        int64
}

// PopResult is a claimed batch. Messages is empty when nothing was available.
type PopResult struct {
	LeaseID           string
	ConsumerGroup     string
	Messages          []Message
	PartitionsClaimed int
	Partition         string    // first claimed partition
	PartitionID       uuid.UUID // first claimed partition
	// ReadyPartitions counts the group's claimable partitions seen by the claim,
	// including those beyond the width asked.
	ReadyPartitions int
	// OldestWait is how long the oldest delivered message waited before this pop.
	OldestWait time.Duration
	// LeaseSeconds is the length of the lease the claim wrote (the shortest of
	// its partitions'), and LeaseExpiresAt its end on the database's clock;
	// zero for an autoAck pop or an empty one.
	LeaseSeconds   int
	LeaseExpiresAt time.Time
	// Autopilot is the sizing the autopilot applied; nil when it was not engaged.
	Autopilot *AutopilotEcho
}

// DefaultPopTimeout is how long a waiting pop parks when it names no timeout.
const DefaultPopTimeout = 30 * time.Second

const (
	popInitialRecheck = 100 * time.Millisecond
	popMaxRecheck     = time.Second
	popBackoffAfter   = 3
)

// Pop claims a batch; with Wait it parks until a push wakes it or Timeout passes.
// A parked pop holds no database connection.
func (e *Engine) Pop(ctx context.Context, req PopRequest) (*PopResult, error) {
	if err := normalizePop(&req, e.cfg.DefaultSubscriptionMode); err != nil {
		return nil, err
	}
	lane := e.autopilot.plan(&req)
	res, err := e.popWaiting(ctx, req)
	if lane != nil {
		res = e.autopilot.observe(lane, &req, res, err)
	}
	return res, err
}

func (e *Engine) popWaiting(ctx context.Context, req PopRequest) (*PopResult, error) {
	deadline := time.Now().Add(req.Timeout)
	interval := popInitialRecheck
	empties := 0
	handedNothing, timedOut := false, false
	hold := e.popHoldFor(ctx, &req)
	holdOver := hold <= 0
	for check := 0; ; check++ {
		var wt *waiter
		switch {
		case handedNothing:
			// A push's claim for this pop just found nothing: so would its own.
			wt = e.waiters.registerFirst(req.Queue, req.Group, req.Partition)
		case check == 0 && req.Wait && req.Timeout > popInitialRecheck && !e.stopParking.Load():
			// Parked peers of the group go first; this pop's first claim is
			// its re-check or a wake (see registerBehindPeers).
			wt = e.waiters.registerBehindPeers(req.Queue, req.Group, req.Partition)
		case timedOut && !e.stopParking.Load():
			// A peer's claim running now, or one in the last half interval
			// that found nothing, re-checks for this pop too (see
			// registerBehindPeerCheck).
			wt = e.waiters.registerBehindPeerCheck(req.Queue, req.Group, req.Partition, time.Now().Add(-interval/2))
		}
		res := &PopResult{}
		if wt == nil {
			if !holdOver {
				until := time.Now().Add(hold)
				if deadline.Before(until) {
					until = deadline
				}
				holdOver = e.holdForFullerBatch(ctx, &req, until)
			}
			if req.Wait {
				// Registered before the check so a push between check and park is not missed.
				wt = e.waiters.register(req.Queue, req.Group, req.Partition)
			}
			var err error
			if req.Queue == "" {
				res, err = e.admittedPopOnce(ctx, &req, check == 0)
			} else {
				var others int
				res, others, err = e.countedClaim(ctx, &req, check == 0)
				if n := res.leftBehind(others); err == nil && n > 0 {
					e.waiters.wakeGroup(req.Queue, req.Group, n)
				}
			}
			if err != nil && check > 0 && req.Wait && IsUnreachable(err) {
				// A pop that has parked rides out an outage as an empty
				// re-check, so its consumer waits instead of spinning on
				// 500s; a pop arriving during one reports it at once.
				res, err = &PopResult{}, nil
			}
			if err != nil || len(res.Messages) > 0 || !req.Wait || e.stopParking.Load() {
				if wt != nil {
					e.waiters.unregister(wt)
				}
				return res, err
			}
		}
		remaining := time.Until(deadline)
		if remaining <= 0 {
			e.waiters.unregister(wt)
			return res, nil
		}
		if holdOver {
			// Until then a push must not claim for this pop: it would hand
			// over the under-full batch the hold is for.
			e.waiters.waitIdle(ctx, wt, &req)
		}
		timer := time.NewTimer(min(max(interval, e.recheckSpacing()), remaining))
		woken, leaving := false, false
		var leaveErr error
		select {
		case <-wt.ch:
			woken = true
		case <-timer.C:
		case <-ctx.Done():
			leaving, leaveErr = true, ctx.Err()
		case <-e.stop:
			leaving = true
		}
		timer.Stop()
		// A push or an ack may have claimed for this pop in its own round
		// trip (handOff); that batch is this pop's answer, even when its caller
		// has left (the API layer then gives the lease back).
		handed := e.waiters.leaveHandedOff(wt)
		if handed != nil && len(handed.Messages) > 0 {
			return handed, nil
		}
		handedNothing = handed != nil
		timedOut = !woken && !handedNothing
		if woken && !handedNothing {
			interval, empties = popInitialRecheck, 0
		} else {
			// A re-check, or a push's claim for this pop, found nothing.
			empties++
			if empties >= popBackoffAfter {
				interval = min(interval*2, popMaxRecheck)
			}
		}
		if leaving {
			if !handedNothing { // a hand-off that found nothing is no wake to pass on
				e.leaveParked(wt, &req)
			}
			return res, leaveErr
		}
	}
}

// recheckSpacing is the least time a parked pop waits between re-checks,
// whatever its backoff says: the keys parked (groups and partition pins of
// queues, and discovery pops, see parkedKeys) ÷ ParkedRecheckRate, so the
// parked pops' re-checks together stay within the rate. Before, a thousand
// pops parked in distinct groups ran over a thousand claims a second that
// found nothing (their backoff starts at 100 ms), and the traffic beside
// them waited on those.
func (e *Engine) recheckSpacing() time.Duration {
	if e.cfg.ParkedRecheckRate <= 0 {
		return 0
	}
	return time.Duration(float64(e.waiters.parkedKeys()) / e.cfg.ParkedRecheckRate * float64(time.Second))
}

// countedClaim runs one claim of a queue pop counted among the group's running
// claims, and reports how many others were still running when it ended.
func (e *Engine) countedClaim(ctx context.Context, req *PopRequest, first bool) (res *PopResult, othersRunning int, err error) {
	req.claimsAhead = e.waiters.claimStarted(req.Queue, req.Group)
	defer func() { othersRunning = e.waiters.claimEnded(req.Queue, req.Group) }()
	res, err = e.admittedPopOnce(ctx, req, first)
	return res, 0, err
}

// leftBehind is how many parked peers of the group a pop hands claimable
// partitions to: those it saw and did not take, less one for each other claim
// of the group still running on this broker, which takes what it saw too
// (the claims of pops woken together, or of a pop that just arrived, see the
// same released partitions). A pop that claimed nothing passes nothing on:
// what it saw as claimable was locked by pops in flight, whose leases will
// hold it. Waking peers for partitions others take sets off a cascade of
// empty claims; claims per handoff in the pipeline-handoff benchmark: five
// when a pop passed on everything it saw, 1.9 without counting the running
// claims, 1.27 with.
func (r *PopResult) leftBehind(othersClaiming int) int {
	if r == nil || r.PartitionsClaimed == 0 {
		return 0
	}
	return max(r.ReadyPartitions-r.PartitionsClaimed-othersClaiming, 0)
}

// leaveParked unregisters a pop that gives up without checking again. If a
// wake had already picked it, the wake goes to another parked pop of the
// group: a push wakes only one pop per partition, and the caller that left
// (a client gone, a broker stopping) would otherwise take it along.
func (e *Engine) leaveParked(wt *waiter, req *PopRequest) {
	e.waiters.unregister(wt)
	select {
	case <-wt.ch:
		if req.Queue != "" {
			e.waiters.wakeGroup(req.Queue, req.Group, 1)
		}
	default:
	}
}

func normalizePop(req *PopRequest, defaultMode string) error {
	if req.Group == "" {
		req.Group = QueueModeGroup
	}
	if req.Batch <= 0 && !req.AutoBatch {
		req.Batch = 200
	}
	if req.Partition != "" {
		req.Partitions = 1
		req.AutoWidth = false
	}
	if req.Queue == "" && req.Namespace == "" && req.Task == "" {
		return invalid("namespace", "namespace or task is required")
	}
	// A pop creates the queue, partition and cursor rows it names.
	for _, f := range [...]struct{ name, value string }{{"namespace", req.Namespace}, {"task", req.Task}} {
		if err := checkName(f.name, f.value); err != nil {
			return err
		}
	}
	for _, f := range [...]struct{ name, value string }{{"queue", req.Queue}, {"partition", req.Partition}, {"consumerGroup", req.Group}} {
		if err := checkOptionalName(f.name, f.value); err != nil {
			return err
		}
	}
	if req.SubscriptionMode == "" {
		req.SubscriptionMode = defaultMode
	} else if mode, ok := NormalizeSubscriptionMode(req.SubscriptionMode); ok {
		req.SubscriptionMode = mode
	} else {
		return invalid("subscriptionMode", "subscriptionMode must be \"new\" (or new-only, new_only, newonly) or \"all\", got %q", req.SubscriptionMode)
	}
	// A subscriptionFrom that does not parse is ignored, as the reference
	// does; one that parses is stored as the group's start, and echoed by the
	// group listing.
	if from, err := time.Parse(time.RFC3339Nano, req.SubscriptionFrom); err == nil {
		if err := checkJSONYears("subscriptionFrom", from); err != nil {
			return err
		}
	}
	if req.Timeout <= 0 {
		req.Timeout = DefaultPopTimeout
	}
	// The reference reads leaseSeconds <= 0 as absent; past the cap it
	// overflowed the lease column.
	req.LeaseSeconds = min(max(req.LeaseSeconds, 0), MaxLeaseSeconds)
	return nil
}

// NormalizeSubscriptionMode maps a subscription mode to "new" or "all", in any
// letter case. The reference clients spell "new" also new-only (the Go SDK's
// SubscriptionModeNewOnly), new_only and newonly. Unlike the reference broker,
// which reads any other word as "all", other words are refused (ok false): a
// typo that silently replays a whole backlog to a new group cannot be undone
// but by a seek, while a 400 on the first pop is seen at once.
func NormalizeSubscriptionMode(mode string) (normalized string, ok bool) {
	switch strings.ToLower(mode) {
	case "new", "new-only", "new_only", "newonly":
		return "new", true
	case "all":
		return "all", true
	}
	return "", false
}

// subscriptionStart is where a named group starts on its first contact.
func subscriptionStart(req *PopRequest, now time.Time) (mode string, ts time.Time) {
	if req.Group == QueueModeGroup {
		return "all", now
	}
	if req.SubscriptionFrom != "" && req.SubscriptionFrom != "now" {
		if t, err := time.Parse(time.RFC3339Nano, req.SubscriptionFrom); err == nil {
			return "timestamp", t
		}
	}
	if req.SubscriptionFrom == "now" {
		return "new", now
	}
	return req.SubscriptionMode, now
}

// subscription is where a group starts: a mode and its instant.
type subscription struct {
	mode      string
	timestamp time.Time
}

// subscribesToScope says whether a pop is a named group's discovery pop, whose
// start on the queues of its scope is the scope's stored subscription. Queue
// mode always reads everything, so it stores none.
func subscribesToScope(req *PopRequest) bool {
	return req.Queue == "" && req.Group != QueueModeGroup
}

// queueScopeSubscription adds to b the group's subscription to the pop's
// discovery scope, unless the group has one. It starts at this pop, or at the
// group's earliest registration on a queue of the scope (mode all first), with
// that registration's mode: a broker older than schema 120 registered the
// queues its discovery pops met but stored no scope row, and starting the
// scope at the first pop after the upgrade would skip what was pushed
// meanwhile to a queue created in the scope after the group subscribed. It
// keeps the pop's snapshot, which tells the queues there at first contact
// from those created since (newToScopeSQL).
func queueScopeSubscription(b *pgx.Batch, req *PopRequest, c *popContact) {
	mode, ts := subscriptionStart(req, c.now)
	b.Queue(`INSERT INTO lanes.discovery_subscriptions (consumer_group, namespace, task, subscription_mode, subscription_timestamp,
			first_contact_snapshot)
		SELECT $1, $2, $3, s.mode, s.ts, $6::text::pg_snapshot FROM (
			SELECT $4::text AS mode, $5::timestamptz AS ts
			UNION ALL
			SELECT cg.subscription_mode, cg.subscription_timestamp
			FROM lanes.consumer_groups cg JOIN lanes.queues q ON q.id = cg.queue_id
			WHERE cg.consumer_group = $1 AND ($2 = '' OR q.namespace = $2) AND ($3 = '' OR q.task = $3)
		) s
		WHERE NOT EXISTS (SELECT 1 FROM lanes.discovery_subscriptions
			WHERE consumer_group = $1 AND namespace = $2 AND task = $3)
		ORDER BY CASE WHEN s.mode = 'all' THEN '-infinity' ELSE s.ts END
		LIMIT 1
		ON CONFLICT DO NOTHING`, req.Group, req.Namespace, req.Task, mode, ts, c.snapshot)
}

// subscribeScope returns the group's subscription to the pop's discovery
// scope, stored first if this is the group's first discovery pop of it. A queue
// the group meets in the scope starts there, not at the pop that meets it: a
// queue created after the group subscribed then delivers all it was pushed.
func subscribeScope(ctx context.Context, tx *connTx, req *PopRequest, c *popContact) (*subscription, error) {
	var s subscription
	b := &pgx.Batch{}
	queueScopeSubscription(b, req, c)
	b.Queue(`SELECT subscription_mode, subscription_timestamp FROM lanes.discovery_subscriptions
		WHERE consumer_group = $1 AND namespace = $2 AND task = $3`, req.Group, req.Namespace, req.Task).
		QueryRow(func(row pgx.Row) error { return row.Scan(&s.mode, &s.timestamp) })
	if err := tx.SendBatch(ctx, b).Close(); err != nil {
		return nil, err
	}
	return &s, nil
}

// subscribeEmptyScope stores the group's subscription to a discovery scope
// holding no queue yet and commits. The commit waits for the WAL flush only
// when the subscription was written: a transaction that wrote nothing has
// nothing to flush, so a parked pop's re-checks of an empty scope stay cheap.
func subscribeEmptyScope(ctx context.Context, tx *connTx, req *PopRequest, c *popContact) error {
	b := &pgx.Batch{}
	queueScopeSubscription(b, req, c)
	b.Queue(syncCommitOn)
	b.Queue("COMMIT")
	if err := tx.SendBatch(ctx, b).Close(); err != nil {
		return err
	}
	tx.open = false
	return nil
}

// popContact is when a pop began: its transaction's instant and, for a
// discovery pop, the database snapshot taken just before its queue lookup, so
// every queue created by a transaction visible in it was there to be met.
type popContact struct {
	now      time.Time
	snapshot string // pg_snapshot as text; "" when not a discovery pop
}

// queuePopContact adds to b the read of the pop's contact, ahead of its queue
// lookup.
func queuePopContact(b *pgx.Batch, req *PopRequest, c *popContact) {
	if !subscribesToScope(req) {
		b.Queue("SELECT now()").QueryRow(func(row pgx.Row) error { return row.Scan(&c.now) })
		return
	}
	b.Queue("SELECT now(), pg_current_snapshot()::text").
		QueryRow(func(row pgx.Row) error { return row.Scan(&c.now, &c.snapshot) })
}

type popQueue struct {
	id               uuid.UUID
	partitionVersion int64
	registered       bool
	mode             string
	subscriptionTS   time.Time
	seededVersion    int64
	claimFloor       int64 // xid8 as int8; see schema/040_groups.sql
	// storedFloor is the claim floor last known stored in the database. A
	// claim stores the floor it computes only while claimFloor (the highest
	// computed) is ahead of it: see claimStoresFloor.
	storedFloor int64
	claimEpoch  int64
	// generation is the plan cache's when the pop that cached this plan began.
	generation uint64
}

// popPlanCache keeps, per (queue, group) of single-queue pops, the queue row
// and group state the last pop read, for the next pop's one-trip claim.
type popPlanCache struct {
	mu    sync.Mutex
	plans map[popPlanKey]popQueue
	// generation counts forgetAll calls: what a pop begun before one saw is not
	// cached after it.
	generation uint64
}

type popPlanKey struct{ queue, group string }

const popPlanCacheMax = 1 << 14

func (c *popPlanCache) get(queue, group string) (popQueue, bool) {
	if queue == "" {
		return popQueue{}, false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	q, ok := c.plans[popPlanKey{queue, group}]
	return q, ok
}

// currentGeneration is the generation a pop starting now caches its plan under.
func (c *popPlanCache) currentGeneration() uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.generation
}

// forgetAll drops every plan; the notification listener calls it whenever its
// connection drops, which every PostgreSQL restart or crash does. A crash
// undoes the last commits that did not wait for the flush (leased pops, plain
// acks), so a cursor moves back and its partition has work again below the
// claim floor a plan computed before the crash: every one-trip claim would walk
// from that floor and skip the partition until its next write. A plan read
// afterwards starts from the stored floor, which recovery restores from the
// same WAL as the cursors.
func (c *popPlanCache) forgetAll() {
	c.mu.Lock()
	defer c.mu.Unlock()
	clear(c.plans)
	c.generation++
}

// remember stores the queue row and group state a general pop committed on
// (the group registered and seeded by then), unless the pop covered several
// queues: a one-trip claim runs on one queue's. A pop begun before the last
// forgetAll (generation) stores nothing.
func (c *popPlanCache) remember(req *PopRequest, committed []*popQueue, generation uint64) {
	if req.Queue == "" {
		return
	}
	key := popPlanKey{req.Queue, req.Group}
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(committed) != 1 || generation != c.generation {
		delete(c.plans, key)
		return
	}
	if c.plans == nil || len(c.plans) >= popPlanCacheMax {
		c.plans = map[popPlanKey]popQueue{}
	}
	plan := *committed[0]
	plan.generation = generation
	c.plans[key] = plan
}

// advanceFloor keeps a cached plan's claim floor up with what the last claim
// computed and the database holds, so the next claim walks partition_writes
// from there (a lower floor is correct, only slower). A plan of another claim
// epoch or generation is left alone.
func (c *popPlanCache) advanceFloor(queue, group string, epoch int64, generation uint64, d *delivery) {
	if d.floor == nil && d.computedFloor == nil {
		return
	}
	key := popPlanKey{queue, group}
	c.mu.Lock()
	defer c.mu.Unlock()
	q, ok := c.plans[key]
	if !ok || q.claimEpoch != epoch || q.generation != generation {
		return
	}
	for _, f := range []*int64{d.floor, d.computedFloor} {
		if f != nil && *f > q.claimFloor {
			q.claimFloor = *f
		}
	}
	if d.floor != nil && *d.floor > q.storedFloor {
		q.storedFloor = *d.floor
	}
	c.plans[key] = q
}

// claim is one partition a pop's claim statement took: its span and lease.
type claim struct {
	partitionID uuid.UUID
	partition   string
	queue       string
	from, to    int64
	lease       int32 // seconds; 0 for an autoAck pop
}

// errStalePopPlan ends a one-trip pop whose cached plan the database no longer
// confirms (lanes.expect in the claim statement, SQLSTATE stalePopPlanCode).
var errStalePopPlan = errors.New("cached pop plan is stale")

// beginPop is beginHot for a pop. A leased pop also commits without waiting
// for the WAL flush, set in the same statement: if the database crashes before
// the flush, the lease is lost and the batch redelivers sooner, which
// at-least-once allows. An autoAck pop moves the cursor, so it keeps the
// durable commit.
func beginPop(tx *connTx, b *pgx.Batch, req *PopRequest) {
	if req.AutoAck {
		tx.beginHot(b)
		return
	}
	tx.beginHotNoFlushWait(b)
}

// popOnce runs one pop transaction: in one round trip on the plan the last pop
// of this (queue, group) cached, else the general way. A stale plan is rolled
// back before the general pop starts: its claim took cursor and claim-floor
// locks before any registration or seeding, and keeping them while seeding
// would invert the lock order other pops follow (seed cursors, then the claim
// floor), which deadlocks.
func (e *Engine) popOnce(ctx context.Context, req *PopRequest) (*PopResult, error) {
	if plan, ok := e.popPlans.get(req.Queue, req.Group); ok {
		res, err := e.popInOneTrip(ctx, req, plan)
		if !errors.Is(err, errStalePopPlan) {
			if err == nil {
				e.hot.popsOneTrip.Add(1)
			}
			return res, err
		}
	}
	res, err := e.popGeneral(ctx, req)
	if err == nil {
		e.hot.popsGeneral.Add(1)
	}
	return res, err
}

// popInOneTrip claims, leases (autoAck: consumes) and reads a batch with one
// statement on the queue row and group state the last pop cached, and commits,
// in one round trip. The statement first checks in the database that the plan
// still holds (the group registered, seeded to the queue's partition version,
// no seek or group delete since); otherwise it fails with errStalePopPlan.
func (e *Engine) popInOneTrip(ctx context.Context, req *PopRequest, plan popQueue) (*PopResult, error) {
	tx, done, err := e.acquireHotTx(ctx)
	if err != nil {
		return nil, err
	}
	defer done()
	if plan.generation != e.popPlans.currentGeneration() {
		// The connection is a new one that met a restarted server, and the
		// plans were forgotten (noticeServerRestart) after this one was read.
		return nil, errStalePopPlan
	}
	tx.open = true // begun by the batch below, which commits it too
	leaseID := newLeaseID(req)
	var d delivery
	b := &pgx.Batch{}
	beginPop(tx, b, req)
	e.queueClaimAndCommit(b, req, []*popQueue{&plan}, leaseID, true, &d)
	if err := tx.SendBatch(ctx, b).Close(); err != nil {
		if hasSQLState(err, stalePopPlanCode) {
			return nil, errStalePopPlan // rolled back by the deferred rollbackUnlessDone
		}
		return nil, err
	}
	tx.open = false
	e.popPlans.advanceFloor(req.Queue, req.Group, plan.claimEpoch, plan.generation, &d)
	return e.deliverClaim(ctx, req, leaseID, &d)
}

// popGeneral runs a pop in two round trips: (begin, look up the queues in
// scope with the group's subscription), then, after registering the group or
// seeding cursors if it must, the claim statement and the commit.
func (e *Engine) popGeneral(ctx context.Context, req *PopRequest) (*PopResult, error) {
	generation := e.popPlans.currentGeneration()
	tx, done, err := e.acquireHotTx(ctx)
	if err != nil {
		return nil, err
	}
	defer done()

	var queues []*popQueue
	var contact popContact
	b := &pgx.Batch{}
	beginPop(tx, b, req)
	queuePopContact(b, req, &contact)
	queuePopQueues(b, req, &queues)
	if err := tx.SendBatch(ctx, b).Close(); err != nil {
		return nil, err
	}
	tx.open = true
	if len(queues) == 0 {
		if req.Queue != "" {
			// A pop names a queue into existence so a group can subscribe before the first push.
			ns, task := NamespaceTask(req.Queue)
			// The group registers now, so "new" means new from this first contact.
			if _, err := tx.Exec(ctx, `INSERT INTO lanes.queues (name, namespace, task) VALUES ($1, $2, $3)
				ON CONFLICT (name) DO NOTHING`, req.Queue, ns, task); err != nil {
				return nil, err
			}
			if queues, err = loadPopQueues(ctx, tx, req); err != nil {
				return nil, err
			}
		}
		if len(queues) == 0 {
			if subscribesToScope(req) {
				// The group subscribes to the scope before any queue is in it,
				// as a queue pop names its queue into existence.
				return &PopResult{ConsumerGroup: req.Group}, subscribeEmptyScope(ctx, tx, req, &contact)
			}
			return &PopResult{ConsumerGroup: req.Group}, tx.Commit(ctx)
		}
	}
	durable := req.AutoAck
	var scope *subscription // the discovery scope's, read when a queue first needs it
	for _, q := range queues {
		if !durable && (!q.registered || q.seededVersion < q.partitionVersion) {
			// A group's registration and its seeded cursors decide where it
			// starts; they must survive a database crash, so this commit waits
			// for the flush after all.
			if _, err := tx.Exec(ctx, syncCommitOn); err != nil {
				return nil, err
			}
			durable = true
		}
		if !q.registered {
			mode, ts := subscriptionStart(req, contact.now)
			if subscribesToScope(req) {
				if scope == nil {
					if scope, err = subscribeScope(ctx, tx, req, &contact); err != nil {
						return nil, err
					}
				}
				mode, ts = scope.mode, scope.timestamp
			}
			if _, err := tx.Exec(ctx, `INSERT INTO lanes.consumer_groups (consumer_group, queue_id, subscription_mode, subscription_timestamp)
				VALUES ($1, $2, $3, $4) ON CONFLICT DO NOTHING`, req.Group, q.id, mode, ts); err != nil {
				return nil, err
			}
			if err := tx.QueryRow(ctx, `SELECT subscription_mode, subscription_timestamp, seeded_version,
					claim_floor::text::int8, claim_epoch
				FROM lanes.consumer_groups WHERE consumer_group = $1 AND queue_id = $2`, req.Group, q.id).
				Scan(&q.mode, &q.subscriptionTS, &q.seededVersion, &q.claimFloor, &q.claimEpoch); err != nil {
				return nil, err
			}
			q.storedFloor = q.claimFloor
		}
		if q.seededVersion < q.partitionVersion {
			if err := seedCursors(ctx, tx, req, q); err != nil {
				return nil, err
			}
		}
	}

	leaseID := newLeaseID(req)
	var d delivery
	b = &pgx.Batch{}
	e.queueClaimAndCommit(b, req, queues, leaseID, false, &d)
	if err := tx.SendBatch(ctx, b).Close(); err != nil {
		return nil, err
	}
	tx.open = false
	// The next pop of this queue and group runs in one round trip on what this one saw.
	e.popPlans.remember(req, queues, generation)
	if len(queues) == 1 {
		e.popPlans.advanceFloor(req.Queue, req.Group, queues[0].claimEpoch, generation, &d)
	}
	return e.deliverClaim(ctx, req, leaseID, &d)
}

// queueClaimAndCommit adds the claim statement (claimQuery) and the commit to
// b; d receives the statement's rows.
func (e *Engine) queueClaimAndCommit(b *pgx.Batch, req *PopRequest, queues []*popQueue, leaseID string, guarded bool, d *delivery) {
	sql, args := e.claimQuery(req, queues, leaseID, guarded)
	b.Queue(sql, args...).Query(d.scan)
	b.Queue("COMMIT")
}

// newLeaseID mints the lease a pop writes; an autoAck pop leases nothing.
func newLeaseID(req *PopRequest) string {
	if req.AutoAck {
		return ""
	}
	return uuid.NewString()
}

// delivery is what the claim statement returned: the counts, and each claimed
// partition's span and lease with the segments covering it.
type delivery struct {
	ready int
	floor *int64 // the group's claim floor stored on a single queue after the claim
	// computedFloor is the floor the claim found (stored or not); nil for a
	// pinned pop, whose candidates say nothing of the group's other partitions.
	computedFloor *int64
	now           time.Time
	taken         []claim
	segs          map[uuid.UUID][]segment
	// expiredLeases counts the partitions, sealed ones included, whose
	// expired lease the claim took over.
	expiredLeases int
}

// scan reads the claim statement's rows: one per segment delivered, one per
// partition sealed or delivered nothing, or a single row carrying the counts.
func (d *delivery) scan(rows pgx.Rows) error {
	d.segs = map[uuid.UUID][]segment{}
	var lastPID uuid.UUID // a partition's rows are consecutive
	for rows.Next() {
		var pid *uuid.UUID
		var partition, queue *string
		var from, to, base, end *int64
		var lease *int32
		var sealed, leaseExpired *bool
		var createdAt *time.Time
		var frames []byte
		if err := rows.Scan(&d.ready, &d.floor, &d.computedFloor, &d.now, &pid, &partition, &queue, &from, &to, &lease, &sealed,
			&leaseExpired, &base, &end, &createdAt, &frames); err != nil {
			return err
		}
		if pid != nil && *pid != lastPID {
			lastPID = *pid
			if *leaseExpired {
				d.expiredLeases++
			}
		}
		if pid == nil || *sealed {
			continue // the counts only, or a cursor sealed at its tail (retention removed its span)
		}
		if n := len(d.taken); n == 0 || d.taken[n-1].partitionID != *pid {
			d.taken = append(d.taken, claim{partitionID: *pid, partition: *partition, queue: *queue,
				from: *from, to: *to, lease: *lease})
		}
		if base != nil {
			d.segs[*pid] = append(d.segs[*pid], segment{base: *base, end: *end, createdAt: *createdAt, frames: frames})
		}
	}
	return rows.Err()
}

// deliver turns a committed claim into the pop's answer and indexes its lease.
// A claimed partition whose segments do not decode delivers nothing and is
// returned in corrupt, its claim still to be given back (deliverClaim).
func (e *Engine) deliver(req *PopRequest, leaseID string, d *delivery) (res *PopResult, corrupt []corruptClaim) {
	res = &PopResult{ConsumerGroup: req.Group, ReadyPartitions: d.ready}
	// Sized once: growing it by appends allocated each answer about twice over.
	spans := int64(0)
	for _, c := range d.taken {
		if len(d.segs[c.partitionID]) > 0 && c.to >= c.from {
			spans += c.to - c.from + 1
		}
	}
	res.Messages = make([]Message, 0, spans)
	shortestLease := int32(0)
	framesBytes := int64(0)
	var frames []Frame // one buffer for every segment's frames
	for _, c := range d.taken {
		kept := len(res.Messages)
		var bad *CorruptSegmentError
		for _, s := range d.segs[c.partitionID] {
			var err error
			frames, err = appendSpan(frames[:0], s.frames, s.base, s.end, c.from, c.to)
			if err != nil {
				bad = &CorruptSegmentError{Queue: c.queue, Partition: c.partition, PartitionID: c.partitionID,
					SegmentBase: s.base, SegmentEnd: s.end, Err: err}
				break
			}
			first := max(s.base, c.from)
			for i := range frames {
				off := first + int64(i)
				f := &frames[i]
				res.Messages = append(res.Messages, Message{
					ID: f.MessageID, TransactionID: f.TransactionID, TraceID: f.TraceID, ProducerSub: f.ProducerSub,
					Data: f.Payload, CreatedAt: s.createdAt, PartitionID: c.partitionID, Partition: c.partition,
					Queue: c.queue, LeaseID: leaseID, ConsumerGroup: req.Group, Offset: off,
				})
			}
		}
		if bad != nil {
			res.Messages = res.Messages[:kept]
			corrupt = append(corrupt, corruptClaim{claim: c, err: bad})
			continue
		}
		if held := d.segs[c.partitionID]; len(held) > 0 {
			res.OldestWait = max(res.OldestWait, d.now.Sub(held[0].createdAt))
			for _, s := range held {
				framesBytes += int64(len(s.frames))
			}
		}
		if c.lease > 0 && (shortestLease == 0 || c.lease < shortestLease) {
			shortestLease = c.lease
		}
		res.PartitionsClaimed++
		if res.PartitionsClaimed == 1 {
			res.Partition = c.partition
			res.PartitionID = c.partitionID
		}
	}
	if len(res.Messages) > 0 {
		res.LeaseID = leaseID
		if shortestLease > 0 {
			// now() is the statement's time, from which it wrote every expiry.
			res.LeaseSeconds = int(shortestLease)
			res.LeaseExpiresAt = d.now.Add(time.Duration(shortestLease) * time.Second)
		}
		// Indexed for as long as the lease runs: what it delivered is what its
		// acks resolve against, whatever the queue's dedup window. A batch the
		// byte budget cut is full too: more is waiting behind it.
		full := req.Batch > 0 && len(res.Messages) >= req.Batch ||
			e.cfg.PopMaxBytes > 0 && framesBytes >= e.cfg.PopMaxBytes
		e.leases.remember(leaseID, time.Duration(shortestLease)*time.Second, res.Messages, full, d.ready <= 1)
	}
	return res, corrupt
}

func nullableUUID(s string) any {
	if s == "" {
		return nil
	}
	return s
}

// popQueuesQuery selects the queues a pop covers with the group's stored subscription.
func popQueuesQuery(req *PopRequest) (string, []any) {
	const cols = `SELECT q.id, q.partition_version,
			cg.queue_id IS NOT NULL, coalesce(cg.subscription_mode, ''), coalesce(cg.subscription_timestamp, now()), coalesce(cg.seeded_version, -1),
			coalesce(cg.claim_floor::text::int8, 0), coalesce(cg.claim_epoch, 0)
		FROM lanes.queues q
		LEFT JOIN lanes.consumer_groups cg ON cg.queue_id = q.id AND cg.consumer_group = $1 `
	if req.Queue != "" {
		return cols + `WHERE q.name = $2`, []any{req.Group, req.Queue}
	}
	return cols + `WHERE ($2 = '' OR q.namespace = $2) AND ($3 = '' OR q.task = $3) ORDER BY q.name`,
		[]any{req.Group, req.Namespace, req.Task}
}

func scanPopQueues(rows pgx.Rows) ([]*popQueue, error) {
	var out []*popQueue
	for rows.Next() {
		q := &popQueue{}
		if err := rows.Scan(&q.id, &q.partitionVersion, &q.registered, &q.mode, &q.subscriptionTS, &q.seededVersion,
			&q.claimFloor, &q.claimEpoch); err != nil {
			return nil, err
		}
		q.storedFloor = q.claimFloor
		out = append(out, q)
	}
	return out, rows.Err()
}

// queuePopQueues adds the queue lookup to a batch; the result lands in out.
func queuePopQueues(b *pgx.Batch, req *PopRequest, out *[]*popQueue) {
	sql, args := popQueuesQuery(req)
	b.Queue(sql, args...).Query(func(rows pgx.Rows) error {
		qs, err := scanPopQueues(rows)
		*out = qs
		return err
	})
}

func loadPopQueues(ctx context.Context, tx dbtx, req *PopRequest) ([]*popQueue, error) {
	sql, args := popQueuesQuery(req)
	rows, err := tx.Query(ctx, sql, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	return scanPopQueues(rows)
}

// seedCursors creates the cursor rows the pop's group lacks on q, each placed
// where the group's stored subscription says: everything retained, or the
// first segment written at or after the subscription instant. On a discovery
// pop, a queue or partition new to the scope starts at everything retained
// whatever the instant (newToScopeSQL).
func seedCursors(ctx context.Context, tx dbtx, req *PopRequest, q *popQueue) error {
	// The inserts' foreign-key checks lock the new cursors' partition rows; take
	// those locks first, in id order, the order pushes lock partitions in, so a
	// seeding pop and a push into the same new partitions cannot deadlock.
	if _, err := tx.Exec(ctx, `SELECT p.id FROM lanes.partitions p
		WHERE p.queue_id = $1 AND NOT EXISTS (SELECT 1 FROM lanes.consumers c
			WHERE c.partition_id = p.id AND c.consumer_group = $2)
		ORDER BY p.id FOR KEY SHARE OF p`, q.id, req.Group); err != nil {
		return err
	}
	// A new queue's partitions are new too; its check still covers partitions
	// from before schema 160, which record no creator.
	mode := `(CASE WHEN ` + newToScopeSQL("q.created_xid") + ` OR ` + newToScopeSQL("p.created_xid") +
		` THEN 'all' ELSE ` + seedModeSQL("g") + ` END)`
	if _, err := tx.Exec(ctx, `INSERT INTO lanes.consumers (partition_id, consumer_group, queue_id, committed, batch_end)
		SELECT p.id, $2, p.queue_id, s.seed, s.seed FROM lanes.partitions p
		JOIN lanes.queues q ON q.id = p.queue_id
		JOIN lanes.consumer_groups g ON g.consumer_group = $2 AND g.queue_id = p.queue_id
		LEFT JOIN lanes.discovery_subscriptions ds ON $3 AND ds.consumer_group = g.consumer_group
			AND ds.namespace = $4 AND ds.task = $5
		CROSS JOIN LATERAL (SELECT `+seedCursorSQL(mode, "g.subscription_timestamp")+` AS seed) s
		WHERE p.queue_id = $1
		ON CONFLICT DO NOTHING`, q.id, req.Group, subscribesToScope(req), req.Namespace, req.Task); err != nil {
		return err
	}
	_, err := tx.Exec(ctx, `UPDATE lanes.consumer_groups SET seeded_version = $3
		WHERE consumer_group = $1 AND queue_id = $2 AND seeded_version < $3`, req.Group, q.id, q.partitionVersion)
	return err
}

// newToScopeSQL says, on a discovery pop's seeding of group g's cursors for
// scope ds (NULL for other pops), that the queue or partition whose creating
// transaction is createdXID was not there at the group's first contact with
// the scope: that transaction is not visible in the snapshot taken just before
// that contact's queue lookup (popContact), so it had not committed when the
// pop looked. Nothing in it is then backlog, so under a `new` subscription it
// starts at everything retained; the scope's instant alone would skip a
// message whose push began before that contact, creating the queue or the
// partition, and committed after it. A queue or partition that existed then (a
// queue relabelled into the scope since, or registered again after a group
// delete on it), a row from before schema 150 (queues) or 160 (partitions)
// (NULL), a registration with its own instant (a queue pop's), and a scope
// instant the subscription route moved (no longer its created_at) keep
// deciding by time.
func newToScopeSQL(createdXID string) string {
	return `coalesce(g.subscription_mode = 'new' AND ds.subscription_mode = 'new'
		AND g.subscription_timestamp = ds.subscription_timestamp AND ds.subscription_timestamp = ds.created_at
		AND NOT pg_visible_in_snapshot(` + createdXID + `, ds.first_contact_snapshot), false)`
}

// seedModeSQL is the mode a group's new cursor is seeded by, from its
// lanes.consumer_groups row g. A partition the group meets after it was seeded
// (seeded_version is -1 only before that, or after a group delete) was not
// there at its first contact, so nothing in it is backlog: under a `new`
// subscription whose instant is still that contact's, it starts at everything
// retained. The instant alone would skip a message stamped before the contact
// whose push committed after it. A subscription instant moved by the
// subscription route keeps deciding by time.
func seedModeSQL(g string) string {
	return `(CASE WHEN ` + g + `.seeded_version >= 0 AND ` + g + `.subscription_mode = 'new'
			AND ` + g + `.subscription_timestamp = ` + g + `.created_at THEN 'all' ELSE ` + g + `.subscription_mode END)`
}

// seedCursorSQL is where a group's new cursor on partition p starts, given its
// subscription's mode and instant (SQL expressions): before everything retained
// for mode all, else before the first segment written at or after the instant.
// Seeding and the lag gauge share it, so the gauge counts what pops deliver.
func seedCursorSQL(mode, since string) string {
	return `CASE
			WHEN ` + mode + ` = 'all' THEN p.log_start - 1
			WHEN p.last_write_at IS NULL OR p.last_write_at < ` + since + ` THEN p.last_offset
			ELSE coalesce((SELECT min(sg.base_offset) - 1 FROM lanes.segments sg
				WHERE sg.partition_id = p.id AND sg.created_at >= ` + since + `), p.last_offset)
			END`
}

// claimQuery is the statement that claims, leases and reads a pop's batch.
//
// It locks up to the requested width of claimable cursor rows, skipping rows
// another pop holds, least recently served first (a windowed claim takes the
// oldest-written candidate first when it drains it: see picked), starting
// past the partitions the group's claims already running on this broker take
// (PopRequest.claimsAhead times the width); splits the
// batch budget over them in that order; writes the lease (autoAck: moves the cursor) on each; and
// returns the segments covering each span. It also reports how many of the
// group's partitions were claimable (beyond the width), and the claim floor
// it computed, which it also stores when the broker knows the database's to
// trail (claimStoresFloor).
//
// Only partitions written at or after the group's claim floor are looked at
// (lanes.partition_writes by (queue_id, last_write_xid)), so a queue with 100,000 idle
// partitions costs what its busy ones cost. The new floor is the smallest
// last_write_xid still holding work (or lacking a cursor), capped at the
// snapshot's xmin so a write not yet visible can never fall below it. A claim
// that stores it does so only if no seek or delete bumped claim_epoch
// meanwhile, and takes the row SKIP LOCKED so pops never queue behind each
// other for it.
//
// guarded (a cached plan) makes the statement first check that the group is
// still registered, seeded to the queue's partition version and at the plan's
// claim epoch, and fail with stalePopPlanCode otherwise.
func (e *Engine) claimQuery(req *PopRequest, queues []*popQueue, leaseID string, guarded bool) (string, []any) {
	ids := make([]uuid.UUID, len(queues))
	floors := make([]int64, len(queues))
	epochs := make([]int64, len(queues))
	for i, q := range queues {
		ids[i] = q.id
		floors[i] = q.claimFloor
		epochs[i] = q.claimEpoch
	}
	// Every claimed partition yields at least one message, so a pop never
	// needs more partitions than its batch: an uncapped width stops there.
	width := req.Partitions
	if req.Batch > 0 && (width <= 0 || width > req.Batch) {
		width = req.Batch
	}
	var limit any
	if width > 0 {
		limit = width
	}
	// $9: -1 leases nothing (autoAck), 0 the queue's lease time (60 s if unset).
	lease := int32(0)
	if req.AutoAck {
		lease = -1
	} else if req.LeaseSeconds > 0 {
		lease = int32(req.LeaseSeconds)
	}
	return claimSQLs[b2i(guarded)][b2i(req.Partition != "")][b2i(claimStoresFloor(req, queues))],
		[]any{uuidArray(ids), req.Group, req.Partition, limit, int8Array(floors), int8Array(epochs), e.claimWindow(req), int64(req.Batch), lease, nullableUUID(leaseID),
			int64(req.claimsAhead) * int64(max(width, 1)), e.popByteBudget()}
}

// popByteBudget is the claim statement's byte budget parameter: nil when
// PopMaxBytes is 0, so no segment is sized.
func (e *Engine) popByteBudget() any {
	if e.cfg.PopMaxBytes <= 0 {
		return nil
	}
	return e.cfg.PopMaxBytes
}

// claimStoresFloor says whether a claim stores the claim floor it computes.
// Storing takes a grouped floor per queue, a locking subquery and an UPDATE,
// about a tenth of PostgreSQL's CPU in consume-queue when every claim ran
// them, though while a backlog drains the floor does not move. So a single-queue claim stores only
// while its plan knows a computed floor the database lacks: the floor trails
// in the database by at most one claim, and this broker's own claims walk from
// the computed one. A pinned pop never moves the floor; a pop over several
// queues (no plan to remember floors in) always stores.
func claimStoresFloor(req *PopRequest, queues []*popQueue) bool {
	if req.Partition != "" {
		return false
	}
	return len(queues) != 1 || queues[0].claimFloor > queues[0].storedFloor
}

// claimSQLs holds the claim statement's texts, by guarded, pinned (a pop of
// one named partition) and storing the floor: built once, not on every pop
// (the text is several kilobytes).
var claimSQLs = func() (out [2][2][2]string) {
	for _, guarded := range []bool{false, true} {
		for _, pinned := range []bool{false, true} {
			for _, storesFloor := range []bool{false, true} {
				out[b2i(guarded)][b2i(pinned)][b2i(storesFloor)] = buildClaimSQL(guarded, pinned, storesFloor)
			}
		}
	}
	return out
}()

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// buildClaimSQL writes the claim statement; a pinned pop never stores the
// floor, whatever storesFloor says.
func buildClaimSQL(guarded, pinned, storesFloor bool) string {
	// The floor columns: the floor stored after the claim and the one it computed.
	storedFloor := `(SELECT max(g.floor) FROM scope s
					CROSS JOIN LATERAL (SELECT g.claim_floor::text::int8 AS floor FROM lanes.consumer_groups g
						WHERE g.consumer_group = $2 AND g.queue_id = s.qid LIMIT 1) g)`
	var floorCTEs, floorColumns string
	switch {
	case pinned:
		floorColumns = storedFloor + `, NULL::int8`
	case !storesFloor:
		// One queue (claimStoresFloor): floors' formula below without its
		// grouping, whose execution cost most of what leaving out the UPDATE
		// saves. "$3 = ''" holds for every wildcard pop; it types $3, which
		// this text does not otherwise use.
		floorColumns = storedFloor + `,
			(SELECT least(min(o.last_write_xid), pg_snapshot_xmin(pg_current_snapshot()))::text::int8 FROM oldest o WHERE $3 = '')`
	default:
		floorCTEs = `		floors AS (
			SELECT s.qid, s.epoch, least(coalesce(o.last_write_xid, snap.xmin), snap.xmin) AS floor
			FROM scope s
			CROSS JOIN (SELECT pg_snapshot_xmin(pg_current_snapshot()) AS xmin) snap
			LEFT JOIN oldest o ON o.qid = s.qid),
		advanced AS (
			UPDATE lanes.consumer_groups g SET claim_floor = f.floor
			FROM floors f
			WHERE $3 = '' AND g.consumer_group = $2 AND g.queue_id = f.qid
			  AND g.claim_floor < f.floor AND g.claim_epoch = f.epoch
			  -- a probe per queue: "queue_id = ANY($1)" is planned as a filter
			  -- over every queue of the group. Only a floor that moves is
			  -- locked: a row lock takes a transaction id and writes WAL, so a
			  -- claim that finds nothing to take stays read-only.
			  AND g.queue_id IN (SELECT l.queue_id FROM floors u
				CROSS JOIN LATERAL (SELECT l.queue_id FROM lanes.consumer_groups l
					WHERE $3 = '' AND l.consumer_group = $2 AND l.queue_id = u.qid
					  AND l.claim_floor < u.floor AND l.claim_epoch = u.epoch FOR UPDATE SKIP LOCKED) l)
			RETURNING g.claim_floor::text::int8 AS floor),
`
		// the floor this claim stored, else the one another claim did (this
		// statement's snapshot does not see its own update)
		floorColumns = `coalesce((SELECT max(a.floor) FROM advanced a),
				` + storedFloor + `),
			(SELECT max(f.floor::text::int8) FROM floors f)`
	}
	guard := ""
	if guarded {
		// A LATERAL probe per queue: an EXISTS here is planned as a hashed
		// subplan over every queue of the group.
		guard = `
			LEFT JOIN LATERAL (SELECT true AS holds FROM lanes.consumer_groups g
				JOIN lanes.queues q ON q.id = g.queue_id
				WHERE g.consumer_group = $2 AND g.queue_id = s.qid
				  AND g.seeded_version >= q.partition_version AND g.claim_epoch = s.epoch LIMIT 1) plan ON true
			WHERE lanes.expect(plan.holds IS NOT NULL, '` + stalePopPlanCode + `', 'the cached pop plan is stale')`
	}
	// A wildcard scan walks partition_writes in write order from the floor; it
	// carries the partition's last_offset and last_write_at, so a candidate
	// costs one cursor probe and only the picked partitions are read from
	// lanes.partitions. A pinned partition is found by name and the floor plays
	// no part.
	scan := `lanes.partition_writes w`
	filter := `w.queue_id = s.qid AND w.last_write_xid >= s.floor`
	if pinned {
		scan = `lanes.partitions pn
				JOIN lanes.partition_writes w ON w.partition_id = pn.id`
		filter = `pn.queue_id = s.qid AND pn.name = $3`
	}
	oldestCTE := ""
	if !pinned {
		oldestCTE = oldestWithWorkCTE
	}
	return `WITH scope AS (
			SELECT s.qid, s.floor::text::xid8 AS floor, s.epoch
			FROM unnest($1::uuid[], $5::int8[], $6::int8[]) AS s(qid, floor, epoch)` + guard + `),
` + oldestCTE + `		cand AS MATERIALIZED (
			SELECT p.id AS pid, p.queue_id AS qid, q.name AS qname, q.lease_time,
				p.last_offset, p.last_write_xid, p.c_last_consumed_at AS last_consumed_at, v.visible_end, p.c_ctid, p.c_committed,
				p.c_pid IS NOT NULL
					AND (p.c_lease_expires_at IS NULL OR p.c_lease_expires_at <= now())
					AND v.visible_end > p.c_committed
					AND (q.window_buffer = 0 OR p.last_write_at <= now() - make_interval(secs => q.window_buffer)) AS claimable
			FROM scope s
			JOIN lanes.queues q ON q.id = s.qid
			-- The partitions holding work for the group and under no live
			-- lease, oldest write first, at most $7 of them (NULL: all).
			-- Leased ones are skipped before the LIMIT, or 16 leased
			-- partitions fill the window and hide the free ones behind them.
			-- LATERAL with LIMIT keeps both lookups per-row index probes in
			-- write order: the planner cannot see how selective the floor is
			-- and would scan.
			CROSS JOIN LATERAL (SELECT w.partition_id AS id, w.queue_id, w.last_offset, w.last_write_at, w.last_write_xid,
					c.partition_id AS c_pid, c.committed AS c_committed, c.version AS c_ctid,
					c.lease_expires_at AS c_lease_expires_at, c.last_consumed_at AS c_last_consumed_at
				FROM ` + scan + `
				LEFT JOIN LATERAL (SELECT *, c.ctid AS version FROM lanes.consumers c
					WHERE c.partition_id = w.partition_id AND c.consumer_group = $2 LIMIT 1) c ON true
				WHERE ` + filter + `
				  AND (c.partition_id IS NULL OR w.last_offset > c.committed)
				  AND (c.lease_expires_at IS NULL OR c.lease_expires_at <= now())
				ORDER BY w.last_write_xid
				LIMIT $7) p
			CROSS JOIN LATERAL (SELECT CASE WHEN q.delayed_processing > 0 THEN
					coalesce((SELECT sg.end_offset FROM lanes.segments sg
						WHERE sg.partition_id = p.id AND sg.created_at <= now() - make_interval(secs => q.delayed_processing)
						ORDER BY sg.base_offset DESC LIMIT 1), -1)
				ELSE p.last_offset END AS visible_end) v),
		picked AS (
			-- Candidates in serving order, each cursor locked by its own probe, so
			-- the LIMIT stops locking at the width (a join here may scan the group);
			-- the name and retention start are read for the locked ones only.
			-- A cursor another transaction changed after this statement's
			-- snapshot is locked at its newest version (another ctid) and left
			-- for the next pop: the lease write below probes the snapshot's
			-- version by ctid, so every cursor it writes must be that version.
			SELECT o.pid, pp.name AS pname, o.qname, o.lease_time, o.last_offset,
				greatest(l.committed + 1, pp.log_start) AS lo, o.visible_end, o.serve_key, l.ctid AS row_ctid, l.lease_expired
			FROM (SELECT r.*,
					-- Serving order starts $11 places in (wrapping round):
					-- past the partitions the group's claims already running
					-- take. Starting where they start, this claim would lock
					-- their partitions after they commit, and each such lock
					-- re-checks the row by starting the whole statement's plan
					-- again (EvalPlanQual), to skip it.
					((r.serve_rank - 1 - $11::int8) % r.ready + r.ready) % r.ready AS serve_key
				FROM (SELECT w.*, row_number() OVER (ORDER BY w.serve_at NULLS FIRST, w.pid) AS serve_rank
					FROM (
						-- Least recently served first, except that a windowed
						-- claim first takes the oldest-written claimable candidate
						-- when this claim drains it: that partition holds the
						-- claim floor (unless a leased one is older), and while
						-- it waits each claim walks again
						-- every partition drained behind it. Drained in one claim,
						-- it cannot crowd the others out.
						SELECT c.*, CASE WHEN $7::int8 IS NOT NULL AND c.last_write_xid = min(c.last_write_xid) OVER ()
								AND c.visible_end - c.c_committed <= $8
							THEN NULL ELSE c.last_consumed_at END AS serve_at,
							count(*) OVER () AS ready
						FROM cand c WHERE c.claimable) w) r
				ORDER BY serve_key) o
			-- lease_expired: the cursor still holds a lease that ran out (an
			-- ack, a nack, a give-back and a seek clear it), which this claim
			-- takes over (lanes_leases_expired_total).
			CROSS JOIN LATERAL (SELECT c.partition_id, c.committed, c.ctid, c.lease_expires_at IS NOT NULL AS lease_expired
				FROM lanes.consumers c
				WHERE c.partition_id = o.pid AND c.consumer_group = $2 AND c.committed < o.last_offset
				  AND (c.lease_expires_at IS NULL OR c.lease_expires_at <= now())
				FOR UPDATE SKIP LOCKED) l
			CROSS JOIN LATERAL (SELECT p.name, p.log_start FROM lanes.partitions p WHERE p.id = o.pid OFFSET 0) pp
			WHERE l.ctid = o.c_ctid
			LIMIT $4),
` + floorCTEs + `		counted AS MATERIALIZED (
			-- The batch budget ($8) split over the picked partitions in serving
			-- order; a partition whose whole span retention removed is sealed at
			-- its tail and takes none of it.
			SELECT t.pid, t.pname, t.qname, t.lo, t.serve_key, t.sealed, t.row_ctid, t.lease_expired,
				CASE WHEN t.sealed THEN t.last_offset
					ELSE t.lo + least(t.visible_end - t.lo + 1, $8 - t.before) - 1 END AS hi,
				CASE WHEN t.sealed OR $9::int4 < 0 THEN 0
					WHEN $9::int4 > 0 THEN $9::int4
					WHEN t.lease_time > 0 THEN t.lease_time ELSE 60 END AS lease
			FROM (SELECT p.*, p.lo > p.visible_end AS sealed,
					coalesce(sum(CASE WHEN p.lo > p.visible_end THEN 0 ELSE p.visible_end - p.lo + 1 END)
						OVER (ORDER BY p.serve_key ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING), 0)::int8 AS before
				FROM picked p) t
			WHERE t.before < $8),
		spans AS MATERIALIZED (
			-- Each counted partition with the segments covering its span,
			-- read once (a sealed one: a row without), and the frames before
			-- each segment in serving order. octet_length reads a stored
			-- value's header, not its bytes; frames stay as stored (a TOAST
			-- pointer a pointer) until sent.
			SELECT s.*, coalesce(sum(s.bytes) OVER (ORDER BY s.serve_key, s.base_offset
					ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING), 0) AS before
			FROM (SELECT t.pid, t.pname, t.qname, t.lo, t.hi, t.serve_key, t.sealed, t.row_ctid, t.lease, t.lease_expired,
					sg.base_offset, sg.end_offset, sg.created_at, sg.frames, octet_length(sg.frames)::int8 AS bytes
				FROM counted t
				LEFT JOIN LATERAL (` + segmentsCoveringSpan + `
					WHERE NOT t.sealed) sg ON true) s),
		served AS NOT MATERIALIZED (
			-- The answer's byte budget ($12, NULL: none), shared by the
			-- partitions in serving order: segments are taken whole while the
			-- frames taken before them are under it, so the first always goes.
			SELECT s.* FROM spans s
			WHERE $12::int8 IS NULL OR s.base_offset IS NULL OR s.before < $12),
		taken AS MATERIALIZED (
			-- Each partition the budget left something of (a partition left
			-- nothing is not taken: its cursor stays as it was, for the next
			-- pop), its span ending at the last segment served. No join: a
			-- join of CTEs is a nested loop over both, quadratic in the width.
			SELECT s.pid, s.pname, s.qname, s.lo, s.serve_key, s.sealed, s.row_ctid,
				CASE WHEN $12::int8 IS NULL OR count(s.base_offset) = 0 THEN s.hi
					ELSE least(s.hi, max(s.end_offset)) END AS hi, s.lease
			FROM served s
			GROUP BY s.pid, s.pname, s.qname, s.lo, s.hi, s.serve_key, s.sealed, s.row_ctid, s.lease),
		leased AS (
			-- A TID probe each, whatever the statistics say (a key join may
			-- scan the group's cursors under a plan cached while the table was small).
			UPDATE lanes.consumers c SET
				batch_end = t.hi,
				-- A cursor below the log start moves up to it: what retention
				-- deleted before delivery was never consumed, and the ack counts
				-- total_consumed from here.
				committed = CASE WHEN t.lease > 0 THEN t.lo - 1 ELSE t.hi END,
				lease_id = CASE WHEN t.lease > 0 THEN $10::uuid ELSE NULL END,
				lease_expires_at = CASE WHEN t.lease > 0 THEN now() + make_interval(secs => t.lease) ELSE NULL END,
				retry_count = CASE WHEN t.lease > 0 THEN c.retry_count ELSE 0 END,
				total_consumed = c.total_consumed + CASE WHEN t.lease > 0 THEN 0 ELSE greatest(t.hi - t.lo + 1, 0) END,
				last_consumed_at = now()
			FROM taken t
			WHERE c.ctid = t.row_ctid AND c.partition_id = t.pid AND c.consumer_group = $2)
		SELECT (SELECT count(*) FROM cand WHERE claimable)::int,
			` + floorColumns + `,
			now(), t.pid, t.pname, t.qname, t.lo, t.hi, t.lease, t.sealed, t.lease_expired,
			t.base_offset, t.end_offset, t.created_at, t.frames
		FROM (SELECT 1) one
		LEFT JOIN (SELECT s.pid, s.pname, s.qname, s.lo, s.lease, s.sealed, s.lease_expired, s.serve_key,
				s.base_offset, s.end_offset, s.created_at, s.frames,
				-- taken's hi, without joining it
				CASE WHEN $12::int8 IS NULL OR s.base_offset IS NULL THEN s.hi
					ELSE least(s.hi, max(s.end_offset) OVER (PARTITION BY s.serve_key ORDER BY s.base_offset
						ROWS BETWEEN UNBOUNDED PRECEDING AND UNBOUNDED FOLLOWING)) END AS hi
			FROM served s) t ON true
		ORDER BY t.serve_key, t.base_offset`
}

// oldestWithWorkCTE finds, per queue, the oldest write of a partition holding
// work for the group, leased or not: the claim floor. It cannot come from cand,
// which skips leased partitions; a floor past a leased partition would lose
// that partition to the group when its lease expires. One index probe that
// stops at the first partition with work, so it costs a windowed claim far
// less than walking every leased partition in cand would, and a claim that
// took nothing needs no second, unwindowed statement.
const oldestWithWorkCTE = `		oldest AS (
			SELECT s.qid, o.last_write_xid FROM scope s
			LEFT JOIN LATERAL (SELECT w.last_write_xid FROM lanes.partition_writes w
				LEFT JOIN LATERAL (SELECT c.partition_id, c.committed FROM lanes.consumers c
					WHERE c.partition_id = w.partition_id AND c.consumer_group = $2 LIMIT 1) c ON true
				WHERE w.queue_id = s.qid AND w.last_write_xid >= s.floor
				  AND (c.partition_id IS NULL OR w.last_offset > c.committed)
				ORDER BY w.last_write_xid
				LIMIT 1) o ON true),
`

// segmentsCoveringSpan selects the segments covering the span [t.lo, t.hi] of
// partition t.pid, from the one holding lo: both bounds index conditions of
// one probe (nested LATERALs), not a scan from the partition's first segment.
// The claim statement and continueLeaseSQL read a lease's messages with it.
const segmentsCoveringSpan = `SELECT s.base_offset, s.end_offset, s.created_at, s.frames
	FROM (SELECT coalesce(max(f.base_offset), t.lo) AS b FROM lanes.segments f
		WHERE f.partition_id = t.pid AND f.base_offset <= t.lo) f
	CROSS JOIN LATERAL (SELECT * FROM lanes.segments s
		WHERE s.partition_id = t.pid AND s.base_offset >= f.b AND s.base_offset <= t.hi OFFSET 0) s`

// claimWindowMin is the fewest partitions with work a claim looks at; see claimWindow.
const claimWindowMin = 16

// claimFullScanEvery makes every n-th claim look at every partition with work.
const claimFullScanEvery = 32

// claimWindow bounds how many partitions with work and no live lease one
// claim considers (leased ones do not use it up), so a
// claim costs the same on a queue with 1,000 busy partitions as on one with
// 100: the oldest-written claimWindowMin (or four times the partitions it can
// take: its width, at most its batch, which also bounds an uncapped width; the
// autopilot's widest for an autopilot pop),
// served least recently first. Every claimFullScanEvery-th claim considers them
// all, so a partition that is written so often it never ranks among the oldest
// writes is still served in least-recently-served order. nil = no bound.
func (e *Engine) claimWindow(req *PopRequest) *int64 {
	if req.Partition != "" || e.claims.Add(1)%claimFullScanEvery == 0 {
		return nil
	}
	width := req.Partitions
	if width <= 0 {
		width = req.Batch // an uncapped width stops at the batch (see claimQuery)
	}
	window := 4 * width
	if req.AutoWidth {
		// The autopilot widens from the ready count, so it must see as far as
		// it may grow.
		window = autopilotMaxWidth
	}
	if req.Batch > 0 {
		window = min(window, 4*req.Batch) // a pop takes at most batch partitions
	}
	bound := int64(max(claimWindowMin, window))
	return &bound
}

type segment struct {
	base, end int64
	createdAt time.Time
	frames    []byte
}

// ReleaseParkedPops ends every parked long poll now (each answers empty); used
// at shutdown so parked requests do not hold the HTTP server open.
func (e *Engine) ReleaseParkedPops() {
	e.stopParking.Store(true)
	e.waiters.wakeAll()
}

// PausePopsWhen makes every pop check, a parked pop's re-checks and the
// claims a push or an ack runs for a parked pop find nothing while paused
// reports true (pop maintenance). The HTTP layer answers a new non-waiting pop
// 204 itself; this holds the long polls, parked before or during maintenance,
// until their timeout. Call it before the engine serves.
func (e *Engine) PausePopsWhen(paused func() bool) { e.popsPaused = paused }

func (e *Engine) popsArePaused() bool { return e.popsPaused != nil && e.popsPaused() }

// admittedPopOnce runs one pop check inside the admission budget. A
// rejection fails the first check; a re-check of a parked pop that cannot get a
// slot counts as empty and keeps waiting, so parking never answers 429.
func (e *Engine) admittedPopOnce(ctx context.Context, req *PopRequest, first bool) (*PopResult, error) {
	if e.popsArePaused() {
		return &PopResult{}, nil
	}
	release := func() {}
	switch {
	case !first && req.Wait && e.cfg.AdmitPopRecheck != nil:
		r, ok := e.cfg.AdmitPopRecheck()
		if !ok {
			return &PopResult{}, nil
		}
		release = r
	case e.cfg.AdmitPopCheck != nil:
		r, err := e.cfg.AdmitPopCheck(ctx)
		if err != nil {
			if first || !req.Wait {
				return nil, err
			}
			return &PopResult{}, nil
		}
		release = r
	}
	defer release()
	if req.Queue == "" {
		return e.claimOnce(ctx, req)
	}
	began := e.waiters.checkStarted(req.Queue, req.Group, req.Partition)
	res, err := e.claimOnce(ctx, req)
	e.waiters.checkEnded(req.Queue, req.Group, req.Partition, began, err == nil && len(res.Messages) == 0)
	return res, err
}

// claimOnce runs one pop check that its request ending cannot interrupt:
// neither its client leaving nor its deadline passing. Canceling a claim
// makes pgx send PostgreSQL a cancel request and drop the connection; one
// arriving after the claim statement finished (its COMMIT running, or its
// answer on the way) leaves the claim committed, a lease written for nobody
// that held its messages until it expired. So the claim runs to its end, bound
// only by ClaimTimeout, and its result reaches the caller, which delivers it or,
// when the client is gone, gives it back.
func (e *Engine) claimOnce(ctx context.Context, req *PopRequest) (*PopResult, error) {
	if ctx.Err() != nil {
		return nil, ctx.Err()
	}
	claimCtx, cancel := e.claimContext(ctx)
	defer cancel()
	if observe := e.popClaimObserver.Load(); observe != nil {
		defer func(start time.Time) { (*observe)(time.Since(start)) }(time.Now())
	}
	res, err := e.popOnce(claimCtx, req)
	// A claim that took only partitions whose segments do not decode gave them
	// back, and they keep their place in the serving order, first for every
	// claim of the group: it runs again starting past them (as past the
	// partitions of claims running ahead), so the group's other partitions
	// are still served. A pinned pop has no other partition to take.
	var corrupt *CorruptSegmentError
	saved := req.claimsAhead
	for skips := 1; skips <= maxCorruptSkips && req.Partition == "" && errors.As(err, &corrupt) &&
		res != nil && res.ReadyPartitions > skips; skips++ {
		req.claimsAhead++
		res, err = e.popOnce(claimCtx, req)
	}
	req.claimsAhead = saved
	if err != nil {
		return nil, err
	}
	return res, nil
}

// maxCorruptSkips bounds how many times one pop claims again past partitions
// whose segments do not decode.
const maxCorruptSkips = 3

// ObservePopClaims has f told the duration of every claim a pop runs itself
// (first check and parked re-checks, not the parking between them).
func (e *Engine) ObservePopClaims(f func(time.Duration)) { e.popClaimObserver.Store(&f) }

// claimContext is what a claim runs under, a pop's own or one a write runs
// for a parked pop: ctx's values, not its cancellation or deadline, and
// ClaimTimeout from now.
func (e *Engine) claimContext(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), e.cfg.ClaimTimeout)
}
