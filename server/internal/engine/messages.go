package engine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
)

// MessageStatus is derived, never stored: from the dead-letter table, the
// partition's reference cursor and its lease.
type MessageStatus string

const (
	StatusPending    MessageStatus = "pending"
	StatusProcessing MessageStatus = "processing"
	StatusCompleted  MessageStatus = "completed"
	StatusDeadLetter MessageStatus = "dead_letter"
)

// MessageFilter selects messages for ListMessages; empty strings do not filter.
type MessageFilter struct {
	Queue, Partition, Namespace, Task string
	Status                            MessageStatus
	From, To                          time.Time // createdAt in [From, To)
	Limit, Offset                     int
}

// MessageWindow is the createdAt window [from, to) of a message listing, as
// the reference reads its filters (http-api-v1.md §1.10): from defaults to an
// hour before now, whatever to is; to defaults to now, and is truncated to the
// minute and extended by one, so to=12:00:30 lists everything created before
// 12:01:00. A zero time takes the default.
func MessageWindow(from, to, now time.Time) (time.Time, time.Time) {
	if from.IsZero() {
		from = now.Add(-time.Hour)
	}
	if to.IsZero() {
		to = now
	}
	return from, to.Truncate(time.Minute).Add(time.Minute)
}

// MessageRecord is one retained message with its derived status.
type MessageRecord struct {
	ID             uuid.UUID
	TransactionID  string
	TraceID        string
	ProducerSub    string
	Payload        json.RawMessage
	CreatedAt      time.Time
	PartitionID    uuid.UUID
	Partition      string
	Queue          string
	Namespace      string
	Task           string
	Offset         int64
	SegmentBase    int64
	FrameIndex     int
	Status         MessageStatus
	LeaseExpiresAt *time.Time
	ConsumedBy     int // bus groups whose cursor passed the message
	TotalGroups    int // bus groups on the partition
}

// MessageListMode summarizes how the listed partitions are consumed.
type MessageListMode struct {
	HasQueueMode bool
	BusGroups    int
	Type         string // queue, bus, hybrid or none
}

// partitionView is one partition's watermarks and its reference cursor: the
// queue-mode cursor when there is one, else the slowest group's.
type partitionView struct {
	id                     uuid.UUID
	name, queue, ns, task  string
	lastOffset, logStart   int64
	hasRef                 bool
	refCommitted, refBatch int64
	refLease               *time.Time // live lease expiry of the reference cursor
	hasQueueMode           bool
	busCommitted           []int64
}

func (v *partitionView) status(offset int64, dead bool) (MessageStatus, *time.Time) {
	switch {
	case dead:
		return StatusDeadLetter, nil
	case v.hasRef && offset <= v.refCommitted:
		return StatusCompleted, nil
	case v.refLease != nil && offset <= v.refBatch:
		return StatusProcessing, v.refLease
	}
	return StatusPending, nil
}

// offsetRange is where messages of a status can sit; lo > hi means nowhere.
func (v *partitionView) offsetRange(s MessageStatus) (lo, hi int64) {
	lo, hi = v.logStart, v.lastOffset
	switch s {
	case StatusDeadLetter:
		// A dead letter is dead wherever it sits: a bus group files it past the
		// queue-mode cursor, and a deleted group leaves its dead letters behind.
		return lo, hi
	case StatusCompleted:
		if !v.hasRef {
			return 1, 0
		}
		hi = min(hi, v.refCommitted)
	case StatusProcessing:
		if v.refLease == nil {
			return 1, 0
		}
		lo, hi = max(lo, v.refCommitted+1), min(hi, v.refBatch)
	case StatusPending:
		if v.hasRef {
			lo = max(lo, v.refCommitted+1)
		}
		if v.refLease != nil {
			lo = max(lo, v.refBatch+1)
		}
	}
	return lo, hi
}

const partitionViewSelect = `SELECT p.id, p.name, q.name, q.namespace, q.task, p.last_offset, p.log_start,
		ref.committed IS NOT NULL, coalesce(ref.committed, -1), coalesce(ref.batch_end, -1),
		CASE WHEN ref.lease_expires_at > now() THEN ref.lease_expires_at END,
		coalesce(ref.consumer_group = '` + QueueModeGroup + `', false),
		coalesce((SELECT array_agg(b.committed) FROM lanes.consumers b
			WHERE b.partition_id = p.id AND b.consumer_group <> '` + QueueModeGroup + `'), '{}')
	FROM lanes.partitions p
	JOIN lanes.queues q ON q.id = p.queue_id
	LEFT JOIN LATERAL (SELECT c.consumer_group, c.committed, c.batch_end, c.lease_expires_at FROM lanes.consumers c
		WHERE c.partition_id = p.id
		ORDER BY c.consumer_group = '` + QueueModeGroup + `' DESC, c.committed, c.consumer_group LIMIT 1) ref ON true `

func scanPartitionView(r pgx.CollectableRow) (*partitionView, error) {
	v := &partitionView{}
	err := r.Scan(&v.id, &v.name, &v.queue, &v.ns, &v.task, &v.lastOffset, &v.logStart, &v.hasRef,
		&v.refCommitted, &v.refBatch, &v.refLease, &v.hasQueueMode, &v.busCommitted)
	return v, err
}

// maxListRows bounds a message listing's offset and page size.
const maxListRows = 1 << 30

// ListMessages lists retained messages newest first. Work is bounded by the page:
// each partition contributes at most Offset+Limit segments, read newest first from
// the primary key and restricted to the offsets the status filter allows, plus
// one segment per dead letter in those offsets when the filter leaves dead
// letters out (see segmentBudget).
func (e *Engine) ListMessages(ctx context.Context, f MessageFilter) (MessageList, error) {
	var mode MessageListMode
	if f.Limit <= 0 {
		f.Limit = 200
	}
	// Bounded so Offset+Limit cannot wrap (a huge offset answered 500 "LIMIT
	// must not be negative"); no retained window holds that many rows, so the
	// page past them is empty, as on the other listings.
	f.Offset, f.Limit = min(max(f.Offset, 0), maxListRows), min(f.Limit, maxListRows)
	f.From, f.To = MessageWindow(f.From, f.To, time.Now())
	rows, err := e.pool.Query(ctx, partitionViewSelect+`
		WHERE ($1 = '' OR q.name = $1) AND ($2 = '' OR p.name = $2)
		  AND ($3 = '' OR q.namespace = $3) AND ($4 = '' OR q.task = $4)
		  AND p.last_offset >= p.log_start AND p.last_write_at >= $5`,
		f.Queue, f.Partition, f.Namespace, f.Task, f.From)
	if err != nil {
		return MessageList{}, err
	}
	views, err := pgx.CollectRows(rows, scanPartitionView)
	if err != nil {
		return MessageList{}, err
	}
	busGroups := 0
	for _, v := range views {
		mode.HasQueueMode = mode.HasQueueMode || v.hasQueueMode
		busGroups = max(busGroups, len(v.busCommitted))
	}
	mode = consumptionMode(mode.HasQueueMode, busGroups)
	byID := map[uuid.UUID]*partitionView{}
	var pids []uuid.UUID
	var los, his []int64
	for _, v := range views {
		lo, hi := v.offsetRange(f.Status)
		if lo > hi {
			continue
		}
		byID[v.id] = v
		pids, los, his = append(pids, v.id), append(los, lo), append(his, hi)
	}
	if len(pids) == 0 {
		return MessageList{Records: []MessageRecord{}, Mode: mode}, nil
	}
	dead, err := deadOffsets(ctx, e.pool, pids)
	if err != nil {
		return MessageList{}, err
	}
	budgets := make([]int64, len(pids))
	for i, pid := range pids {
		budgets[i] = segmentBudget(f, dead[pid], los[i], his[i])
	}
	segRows, err := e.pool.Query(ctx, `SELECT x.pid, x.lo, x.hi, s.base_offset, s.end_offset, s.created_at, s.frames
		FROM unnest($1::uuid[], $2::int8[], $3::int8[], $6::int8[]) AS x(pid, lo, hi, budget)
		CROSS JOIN LATERAL (SELECT * FROM lanes.segments s
			WHERE s.partition_id = x.pid AND s.base_offset <= x.hi AND s.end_offset >= x.lo AND s.created_at < $5
			  AND ($7 = false OR EXISTS (SELECT 1 FROM lanes.dlq d WHERE d.partition_id = x.pid
				AND d.message_offset BETWEEN s.base_offset AND s.end_offset))
			ORDER BY s.base_offset DESC LIMIT x.budget) s
		WHERE s.created_at >= $4`, pids, los, his, f.From, f.To, budgets, f.Status == StatusDeadLetter)
	if err != nil {
		return MessageList{}, err
	}
	defer segRows.Close()
	var out []MessageRecord
	var unreadable []UnreadableMessages
	for segRows.Next() {
		var pid uuid.UUID
		var lo, hi, base, end int64
		var created time.Time
		var blob []byte
		if err := segRows.Scan(&pid, &lo, &hi, &base, &end, &created, &blob); err != nil {
			return MessageList{}, err
		}
		v := byID[pid]
		frames, err := decodeFrames(blob, int(end-base+1))
		if err != nil {
			unreadable = e.skipCorruptSegment(unreadable, v, &f, dead[pid], base, end, lo, hi, err)
			continue
		}
		for i := range frames {
			off := base + int64(i)
			if off < lo || off > hi {
				continue
			}
			st, lease := v.status(off, dead[pid][off])
			if f.Status != "" && st != f.Status {
				continue
			}
			out = append(out, v.record(&frames[i], off, base, i, created, st, lease))
		}
	}
	if err := segRows.Err(); err != nil {
		return MessageList{}, err
	}
	sort.Slice(out, func(i, j int) bool {
		a, b := &out[i], &out[j]
		if !a.CreatedAt.Equal(b.CreatedAt) {
			return a.CreatedAt.After(b.CreatedAt)
		}
		if a.PartitionID != b.PartitionID {
			return compareUUID(a.PartitionID, b.PartitionID) < 0
		}
		return a.Offset > b.Offset
	})
	if f.Offset >= len(out) {
		return MessageList{Records: []MessageRecord{}, Mode: mode, Unreadable: unreadable}, nil
	}
	out = out[f.Offset:]
	if len(out) > f.Limit {
		out = out[:f.Limit]
	}
	return MessageList{Records: out, Mode: mode, Unreadable: unreadable}, nil
}

// MessageList is a page of ListMessages.
type MessageList struct {
	Records []MessageRecord
	Mode    MessageListMode
	// Unreadable counts, per partition, the messages the page left out because
	// their stored segment does not decode.
	Unreadable []UnreadableMessages
}

// UnreadableMessages is how many messages of one partition a listing left out.
type UnreadableMessages struct {
	Queue, Partition string
	PartitionID      uuid.UUID
	Messages         int
}

// skipCorruptSegment logs a segment of v a listing cannot decode and adds the
// messages in it the filter f would have listed to unreadable: the rest of the
// page is still answered, where failing it would hide every other message
// (the unfiltered listing spans every queue).
func (e *Engine) skipCorruptSegment(unreadable []UnreadableMessages, v *partitionView, f *MessageFilter, dead map[int64]bool,
	base, end, lo, hi int64, err error,
) []UnreadableMessages {
	e.reportCorruptSegment(v.corruptSegment(base, end, err))
	n := 0
	for off := max(base, lo); off <= min(end, hi); off++ {
		if st, _ := v.status(off, dead[off]); f.Status == "" || st == f.Status {
			n++
		}
	}
	if n == 0 {
		return unreadable
	}
	for i := range unreadable {
		if unreadable[i].PartitionID == v.id {
			unreadable[i].Messages += n
			return unreadable
		}
	}
	return append(unreadable, UnreadableMessages{Queue: v.queue, Partition: v.name, PartitionID: v.id, Messages: n})
}

// corruptSegment is the error of v's segment base..end, whose frames do not decode (err).
func (v *partitionView) corruptSegment(base, end int64, err error) *CorruptSegmentError {
	return &CorruptSegmentError{Queue: v.queue, Partition: v.name, PartitionID: v.id, SegmentBase: base, SegmentEnd: end, Err: err}
}

// segmentBudget is how many segments of one partition, newest first, a page
// reads to hold every match among the partition's newest Offset+Limit. Each
// segment in [lo, hi] holds at least one offset there, which matches unless
// it is a dead letter and the filter is a status other than dead_letter: such
// a segment may match nothing, but holds at least one of the partition's dead
// letters in [lo, hi], so reading that many more segments is enough.
func segmentBudget(f MessageFilter, dead map[int64]bool, lo, hi int64) int64 {
	switch f.Status {
	case StatusDeadLetter:
		// Dead letters may sit anywhere in the committed range: only their segments are read.
		return maxListRows
	case "":
		return int64(f.Offset + f.Limit)
	}
	deadInRange := 0
	for off := range dead {
		if off >= lo && off <= hi {
			deadInRange++
		}
	}
	return int64(f.Offset + f.Limit + deadInRange)
}

func (v *partitionView) record(f *Frame, off, base int64, idx int, created time.Time, st MessageStatus, lease *time.Time) MessageRecord {
	r := MessageRecord{
		ID: f.MessageID, TransactionID: f.TransactionID, TraceID: f.TraceID, ProducerSub: f.ProducerSub,
		Payload: append(json.RawMessage(nil), f.Payload...), CreatedAt: created, PartitionID: v.id,
		Partition: v.name, Queue: v.queue, Namespace: v.ns, Task: v.task, Offset: off, SegmentBase: base,
		FrameIndex: idx, Status: st, LeaseExpiresAt: lease, TotalGroups: len(v.busCommitted),
	}
	for _, c := range v.busCommitted {
		if c >= off {
			r.ConsumedBy++
		}
	}
	return r
}

type querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

// deadOffsets returns the dead-lettered offsets of each partition.
func deadOffsets(ctx context.Context, q querier, pids []uuid.UUID) (map[uuid.UUID]map[int64]bool, error) {
	rows, err := q.Query(ctx, `SELECT DISTINCT partition_id, message_offset FROM lanes.dlq WHERE partition_id = ANY($1)`, pids)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[uuid.UUID]map[int64]bool{}
	for rows.Next() {
		var pid uuid.UUID
		var off int64
		if err := rows.Scan(&pid, &off); err != nil {
			return nil, err
		}
		if out[pid] == nil {
			out[pid] = map[int64]bool{}
		}
		out[pid][off] = true
	}
	return out, rows.Err()
}

// GroupConsumption is one group's view of one message.
type GroupConsumption struct {
	Group          string
	Consumed       bool
	LeaseExpiresAt *time.Time
}

// MessageDetail is one message with its per-group consumption.
type MessageDetail struct {
	MessageRecord
	ErrorMessage string
	RetryCount   int
	Groups       []GroupConsumption
	Mode         MessageListMode // how the message's partition is consumed
	LeaseTime    int
	RetryLimit   int
}

// consumptionMode names how a queue or partition is consumed: by the queue-mode
// group, by named (bus) groups, by both, or by none yet.
func consumptionMode(hasQueueMode bool, busGroups int) MessageListMode {
	m := MessageListMode{HasQueueMode: hasQueueMode, BusGroups: busGroups}
	switch {
	case hasQueueMode && busGroups > 0:
		m.Type = "hybrid"
	case hasQueueMode:
		m.Type = "queue"
	case busGroups > 0:
		m.Type = "bus"
	default:
		m.Type = "none"
	}
	return m
}

// GetMessage resolves a message address: transaction index → offset → segment →
// frame. A message whose segment retention deleted is answered from its dead
// letter when there is one; otherwise ErrNotFound.
func (e *Engine) GetMessage(ctx context.Context, partitionID uuid.UUID, transactionID string) (*MessageDetail, error) {
	rows, err := e.pool.Query(ctx, partitionViewSelect+`WHERE p.id = $1`, partitionID)
	if err != nil {
		return nil, err
	}
	v, err := pgx.CollectExactlyOneRow(rows, scanPartitionView)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, ErrNotFound
	}
	if err != nil {
		return nil, err
	}
	d := &MessageDetail{}
	if err := e.pool.QueryRow(ctx, `SELECT q.lease_time, q.retry_limit FROM lanes.partitions p
		JOIN lanes.queues q ON q.id = p.queue_id WHERE p.id = $1`, partitionID).Scan(&d.LeaseTime, &d.RetryLimit); err != nil {
		return nil, err
	}
	var dl *DeadLetter
	row, err := scanDeadLetter(e.pool.QueryRow(ctx, `SELECT `+deadLetterColumns+deadLetterFrom+`
		WHERE d.partition_id = $1 AND d.transaction_id = $2 ORDER BY d.failed_at DESC LIMIT 1`, partitionID, transactionID))
	switch {
	case err == nil:
		dl = &row
		d.ErrorMessage, d.RetryCount = row.Error, row.RetryCount
	case !errors.Is(err, pgx.ErrNoRows):
		return nil, err
	}
	var base, end int64
	var created time.Time
	var blob []byte
	var offset int64
	err = e.pool.QueryRow(ctx, `SELECT t.message_offset, s.base_offset, s.end_offset, s.created_at, s.frames
		FROM lanes.txns t
		JOIN LATERAL (SELECT * FROM lanes.segments s WHERE s.partition_id = t.partition_id
			AND s.base_offset <= t.message_offset ORDER BY s.base_offset DESC LIMIT 1) s ON s.end_offset >= t.message_offset
		WHERE t.partition_id = $1 AND t.transaction_id = $2`, partitionID, transactionID).
		Scan(&offset, &base, &end, &created, &blob)
	switch {
	case err == nil:
		frames, err := decodeFrames(blob, int(end-base+1))
		if err != nil {
			bad := v.corruptSegment(base, end, err)
			e.reportCorruptSegment(bad)
			return nil, bad
		}
		if int(offset-base) >= len(frames) {
			return nil, fmt.Errorf("segment %d-%d holds %d frames, not offset %d", base, end, len(frames), offset)
		}
		idx := int(offset - base)
		st, lease := v.status(offset, dl != nil && dl.Offset == offset)
		d.MessageRecord = v.record(&frames[idx], offset, base, idx, created, st, lease)
	case errors.Is(err, pgx.ErrNoRows) && dl != nil:
		d.MessageRecord = MessageRecord{
			ID: dl.MessageID, TransactionID: dl.TransactionID, TraceID: dl.TraceID, ProducerSub: dl.ProducerSub, Payload: dl.Payload,
			CreatedAt: dl.CreatedAt, PartitionID: v.id, Partition: v.name, Queue: v.queue, Namespace: v.ns,
			Task: v.task, Offset: dl.Offset, Status: StatusDeadLetter, TotalGroups: len(v.busCommitted),
		}
	case errors.Is(err, pgx.ErrNoRows):
		return nil, ErrNotFound
	default:
		return nil, err
	}
	groups, err := e.pool.Query(ctx, `SELECT consumer_group, committed >= $2,
			CASE WHEN lease_expires_at > now() AND batch_end >= $2 AND committed < $2 THEN lease_expires_at END
		FROM lanes.consumers WHERE partition_id = $1 ORDER BY consumer_group`, partitionID, d.Offset)
	if err != nil {
		return nil, err
	}
	d.Groups, err = pgx.CollectRows(groups, func(r pgx.CollectableRow) (GroupConsumption, error) {
		var g GroupConsumption
		err := r.Scan(&g.Group, &g.Consumed, &g.LeaseExpiresAt)
		return g, err
	})
	d.Mode = consumptionMode(v.hasQueueMode, len(v.busCommitted))
	return d, err
}
