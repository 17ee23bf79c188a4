package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"regexp"
	"sync"
	"time"

	lanes "github.com/lanesmq/lanes/sdk-go"
)

// The queues of the load, each written by lanes of one kind.
const (
	queueSingle = "soak-single" // single pushes: with transaction ids and retried; without, not
	queueBatch  = "soak-batch"  // batches of 2-30 items with transaction ids, retried whole
	queueTx     = "soak-tx"     // transaction bundles over two partitions, retried whole
	// queueBurst gets bursts of 1-10 items, each to a new partition never written again: a
	// partition whose last ack a crash undoes has no later write to wake it.
	queueBurst = "soak-burst"
)

var soakQueues = []string{queueSingle, queueBatch, queueTx, queueBurst}

// pushRecord is one message a producer sent: its key (payload "k", unique over the run), where
// it went, its place in its partition's push order, and what the broker answered.
type pushRecord struct {
	Key       string    `json:"key"`
	Queue     string    `json:"queue"`
	Partition string    `json:"partition"`
	Seq       int       `json:"seq"`
	Status    string    `json:"status,omitempty"` // queued, duplicate or buffered once acknowledged; "" never
	AckedAt   time.Time `json:"ackedAt,omitzero"`
	Attempts  int       `json:"attempts"`
	// Overtaken is set when a later message of its request was acknowledged by an earlier
	// attempt: the resend stores it after that one, so its order is the producer's doing.
	Overtaken bool `json:"overtaken,omitempty"`
}

// delivery is one handling of a message by a consume loop.
type delivery struct {
	Key       string    `json:"key"`
	Queue     string    `json:"queue"`
	Group     string    `json:"group"`
	Partition string    `json:"partition"`
	Loop      int       `json:"loop"`
	At        time.Time `json:"at"`
}

// ledger holds what was pushed and what was handled.
type ledger struct {
	mu         sync.Mutex
	pushes     map[string]*pushRecord
	deliveries []delivery
	pushErrors map[string]int // "op: error text" (shortened) → count
	undecoded  int
	// groupsSeen has a bit per group (soakGroups' order) that handled the key; complete counts
	// the acknowledged keys every group handled, and ackedCount the acknowledged keys.
	groupsSeen map[string]uint8
	complete   int
	ackedCount int
}

func newLedger() *ledger {
	return &ledger{pushes: map[string]*pushRecord{}, pushErrors: map[string]int{}, groupsSeen: map[string]uint8{}}
}

var allGroups = uint8(1)<<len(soakGroups) - 1

// caughtUp reports whether every group handled every acknowledged message.
func (l *ledger) caughtUp() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.complete == l.ackedCount
}

func (l *ledger) sent(r *pushRecord) {
	l.mu.Lock()
	defer l.mu.Unlock()
	r.Attempts++
	l.pushes[r.Key] = r
}

func (l *ledger) acked(r *pushRecord, status string, overtaken bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if r.Status == "" {
		r.Status, r.AckedAt, r.Overtaken = status, time.Now(), overtaken
		l.ackedCount++
		if l.groupsSeen[r.Key] == allGroups {
			l.complete++
		}
	}
}

// addrs are the host:port pairs of an error text, which would make every connection's error a
// kind of its own.
var addrs = regexp.MustCompile(`\d+\.\d+\.\d+\.\d+:\d+`)

func (l *ledger) pushFailed(op string, err error) {
	msg := op + ": " + addrs.ReplaceAllString(err.Error(), "ADDR")
	if len(msg) > 120 {
		msg = msg[:120]
	}
	l.mu.Lock()
	l.pushErrors[msg]++
	l.mu.Unlock()
}

func (l *ledger) delivered(d delivery) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.deliveries = append(l.deliveries, d)
	for i, g := range soakGroups {
		if g.label == d.Group {
			seen := l.groupsSeen[d.Key] | 1<<i
			if seen == allGroups && l.groupsSeen[d.Key] != allGroups {
				if r, ok := l.pushes[d.Key]; ok && r.Status != "" {
					l.complete++
				}
			}
			l.groupsSeen[d.Key] = seen
		}
	}
}

func acknowledged(status string) bool {
	return status == lanes.StatusQueued || status == lanes.StatusDuplicate || status == lanes.StatusBuffered
}

// producer is one lane of pushes: it owns its partitions, so their push order is its send order.
type producer struct {
	name   string
	client *lanes.Client
	led    *ledger
	rng    *rand.Rand
	retry  bool // resend until acknowledged, with the same transaction ids
	// quiet makes the producer fall silent now and then for 2-15 s, so faults also meet
	// partitions whose consumers caught up and that no new write wakes.
	quiet bool
	lull  *lullGate
	seq   map[string]int
}

func (p *producer) next(queue, partition string) *pushRecord {
	p.seq[partition]++
	return &pushRecord{Key: fmt.Sprintf("%s/%s/%d", queue, partition, p.seq[partition]), Queue: queue, Partition: partition, Seq: p.seq[partition]}
}

func item(r *pushRecord, withID bool) lanes.Item {
	it := lanes.Item{Data: map[string]string{"k": r.Key}}
	if withID {
		it.TransactionID = "soak-" + r.Key
	}
	return it
}

// pause sleeps a moment between sends (or after a failure), or returns false once ctx ends.
func pause(ctx context.Context, d time.Duration) bool {
	select {
	case <-ctx.Done():
		return false
	case <-time.After(d):
		return true
	}
}

// runPushes pushes to queue, to the partition partition() names, n items a request (n()
// picks), until ctx ends.
func (p *producer) runPushes(ctx context.Context, queue string, partition func() string, n func() int) {
	for ctx.Err() == nil {
		part := partition()
		q := p.client.Queue(queue).Partition(part)
		recs := make([]*pushRecord, n())
		items := make([]lanes.Item, len(recs))
		for i := range recs {
			recs[i] = p.next(queue, part)
			items[i] = item(recs[i], p.retry)
		}
		for ctx.Err() == nil {
			for _, r := range recs {
				p.led.sent(r)
			}
			res, err := q.Push(ctx, items...)
			if err != nil {
				p.led.pushFailed("push", err)
			}
			done := err == nil && len(res) == len(recs)
			if err == nil {
				laterAcked := false
				for i := len(recs) - 1; i >= 0; i-- {
					wasAcked := recs[i].Status != ""
					if i < len(res) && acknowledged(res[i].Status) {
						p.led.acked(recs[i], res[i].Status, !wasAcked && laterAcked)
					} else {
						done = false
						if i < len(res) {
							p.led.pushFailed("push", fmt.Errorf("item status %s", res[i].Status))
						}
					}
					laterAcked = laterAcked || wasAcked
				}
			}
			if done || !p.retry {
				break
			}
			if !pause(ctx, time.Duration(100+p.rng.IntN(400))*time.Millisecond) {
				return
			}
		}
		p.rest(ctx)
	}
}

// rest pauses between sends: a few milliseconds, or for a quiet producer now and then seconds;
// and while the producers lull.
func (p *producer) rest(ctx context.Context) {
	if p.quiet && p.rng.IntN(300) == 0 {
		pause(ctx, time.Duration(2000+p.rng.IntN(13000))*time.Millisecond)
	} else {
		pause(ctx, time.Duration(2+p.rng.IntN(20))*time.Millisecond)
	}
	p.lull.wait(ctx)
}

// lullGate holds every producer back while a fault needs the database quiet: with no push
// committing, the acks of the last moments wait for the WAL writer, and a crash then undoes
// them.
type lullGate struct {
	mu   sync.Mutex
	open chan struct{} // nil when no lull is on; closed when it ends
}

func (g *lullGate) begin() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.open == nil {
		g.open = make(chan struct{})
	}
}

func (g *lullGate) end() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.open != nil {
		close(g.open)
		g.open = nil
	}
}

func (g *lullGate) wait(ctx context.Context) {
	g.mu.Lock()
	ch := g.open
	g.mu.Unlock()
	if ch != nil {
		select {
		case <-ch:
		case <-ctx.Done():
		}
	}
}

// runBundles commits transaction bundles that push 1-5 items to each of two partitions.
func (p *producer) runBundles(ctx context.Context, parts [2]string) {
	for ctx.Err() == nil {
		var recs []*pushRecord
		tx := p.client.Transaction()
		for _, part := range parts {
			k := 1 + p.rng.IntN(5)
			items := make([]lanes.Item, k)
			for i := range items {
				r := p.next(queueTx, part)
				recs = append(recs, r)
				items[i] = item(r, true)
			}
			tx = tx.Queue(queueTx).Partition(part).Push(items...)
		}
		for ctx.Err() == nil {
			for _, r := range recs {
				p.led.sent(r)
			}
			_, err := tx.Commit(ctx)
			var txErr *lanes.TransactionError
			status := ""
			switch {
			case err == nil:
				status = lanes.StatusQueued
			case errors.As(err, &txErr) && txErr.Reason == lanes.ReasonDuplicate:
				status = lanes.StatusDuplicate // an earlier attempt committed the bundle whole
			default:
				p.led.pushFailed("transaction", err)
			}
			if status != "" {
				for _, r := range recs {
					p.led.acked(r, status, false)
				}
				break
			}
			if !pause(ctx, time.Duration(100+p.rng.IntN(400))*time.Millisecond) {
				return
			}
		}
		p.rest(ctx)
	}
}

// warnLog keeps the times a consume loop logged an ack failure (its warning with op=ack), to
// tell a redelivery after a failed ack from one nothing explains.
type warnLog struct {
	mu      sync.Mutex
	ackFail []time.Time
	counts  map[string]int
}

func (w *warnLog) Enabled(_ context.Context, l slog.Level) bool { return l >= slog.LevelWarn }
func (w *warnLog) WithAttrs([]slog.Attr) slog.Handler           { return w }
func (w *warnLog) WithGroup(string) slog.Handler                { return w }
func (w *warnLog) Handle(_ context.Context, r slog.Record) error {
	op := ""
	r.Attrs(func(a slog.Attr) bool {
		if a.Key == "op" {
			op = a.Value.String()
		}
		return true
	})
	w.mu.Lock()
	defer w.mu.Unlock()
	w.counts[op]++
	if op == "ack" {
		w.ackFail = append(w.ackFail, time.Now())
	}
	return nil
}

func (w *warnLog) ackFailedBetween(from, to time.Time) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, t := range w.ackFail {
		if !t.Before(from) && !t.After(to) {
			return true
		}
	}
	return false
}

// consumerGroup is one way of reading every queue: queue mode, a group, a group with a batch
// handler.
type consumerGroup struct {
	label string
	group string
	batch bool
}

var soakGroups = []consumerGroup{
	{label: "queue-mode"},
	{label: "group-each", group: "soak-each"},
	{label: "group-batch", group: "soak-batch", batch: true},
}

// consumeLoop is one SDK consume loop of a group on a queue.
type consumeLoop struct {
	id     int
	queue  string
	group  consumerGroup
	client *lanes.Client
	warns  *warnLog
	loop   *lanes.Consumer
}

func (cl *consumeLoop) start(ctx context.Context, led *ledger, lease int) error {
	record := func(m *lanes.Message) {
		var body struct {
			K string `json:"k"`
		}
		if err := json.Unmarshal(m.Data, &body); err != nil || body.K == "" {
			led.mu.Lock()
			led.undecoded++
			led.mu.Unlock()
			return
		}
		led.delivered(delivery{Key: body.K, Queue: cl.queue, Group: cl.group.label, Partition: m.Partition, Loop: cl.id, At: time.Now()})
	}
	q := cl.client.Queue(cl.queue).Concurrency(2).Batch(20).LeaseSeconds(lease)
	if cl.group.group != "" {
		q = q.Group(cl.group.group).SubscriptionMode(lanes.SubscriptionModeAll)
	}
	var err error
	if cl.group.batch {
		cl.loop, err = q.ConsumeBatch(ctx, func(_ context.Context, ms []*lanes.Message) error {
			for _, m := range ms {
				record(m)
			}
			return nil
		})
	} else {
		cl.loop, err = q.Consume(ctx, func(_ context.Context, m *lanes.Message) error {
			record(m)
			return nil
		})
	}
	return err
}
