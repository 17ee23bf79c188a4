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
// A page starts after Offset messages, or, when After is set, strictly after
// the message it names.
type MessageFilter struct {
	Queue, Partition, Namespace, Task string
	Status                            MessageStatus
	From, To                          time.Time // createdAt in [From, To), as MessageWindow resolves them
	Limit, Offset                     int
	After                             *MessageKey
}

// MessageKey is a message's place in the listing's order: its segment's
// createdAt, newest first, then partition id, then offset, highest first.
// Unlike an offset, messages pushed or leaving a status filter before it do
// not move it.
type MessageKey struct {
	CreatedAt   time.Time
	PartitionID uuid.UUID
	Offset      int64
}

// precedes says whether s sorts after k in the listing.
func (k *MessageKey) precedes(s *listSlot) bool {
	if !s.created.Equal(k.CreatedAt) {
		return s.created.Before(k.CreatedAt)
	}
	if c := compareUUID(s.view.id, k.PartitionID); c != 0 {
		return c > 0
	}
	return s.off < k.Offset
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
// each partition contributes at most Offset+Limit+1 segments, read newest first
// from the primary key and restricted to the offsets the status filter allows,
// plus one segment per dead letter in those offsets when the filter leaves dead
// letters out (see segmentBudget). Only the page's segments are read whole, a
// batch at a time, and the page stops once its payloads reach the broker's
// listing byte budget (Config.ListMaxBytes), after at least one message.
func (e *Engine) ListMessages(ctx context.Context, f MessageFilter) (MessageList, error) {
	var mode MessageListMode
	if f.Limit <= 0 {
		f.Limit = 200
	}
	// Bounded so Offset+Limit cannot wrap (a huge offset answered 500 "LIMIT
	// must not be negative"); no retained window holds that many rows, so the
	// page past them is empty, as on the other listings.
	f.Offset, f.Limit = min(max(f.Offset, 0), maxListRows), min(f.Limit, maxListRows)
	if f.After != nil {
		f.Offset = 0
	}
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
	args := []any{pids, los, his, f.From, f.To, budgets, f.Status == StatusDeadLetter}
	// A key keeps, before the LIMIT, the segments holding messages after it
	// (the key's own segment too, when it holds some); the slots below drop
	// the rest of that one.
	after := ""
	if k := f.After; k != nil {
		after = ` AND (s.created_at < $8 OR (s.created_at = $8 AND (x.pid > $9 OR (x.pid = $9 AND s.base_offset < $10))))`
		args = append(args, k.CreatedAt, k.PartitionID, k.Offset)
	}
	// The segments' places and sizes only: which messages make the page is
	// known before any frame is read.
	segRows, err := e.pool.Query(ctx, `SELECT x.pid, x.lo, x.hi, s.base_offset, s.end_offset, s.created_at, octet_length(s.frames)
		FROM unnest($1::uuid[], $2::int8[], $3::int8[], $6::int8[]) AS x(pid, lo, hi, budget)
		CROSS JOIN LATERAL (SELECT * FROM lanes.segments s
			WHERE s.partition_id = x.pid AND s.base_offset <= x.hi AND s.end_offset >= x.lo AND s.created_at < $5`+after+`
			  AND ($7 = false OR EXISTS (SELECT 1 FROM lanes.dlq d WHERE d.partition_id = x.pid
				AND d.message_offset BETWEEN s.base_offset AND s.end_offset))
			ORDER BY s.base_offset DESC LIMIT x.budget) s
		WHERE s.created_at >= $4`, args...)
	if err != nil {
		return MessageList{}, err
	}
	var slots []listSlot
	segBytes := map[segmentKey]int64{}
	for segRows.Next() {
		var pid uuid.UUID
		var lo, hi, base, end, size int64
		var created time.Time
		if err := segRows.Scan(&pid, &lo, &hi, &base, &end, &created, &size); err != nil {
			segRows.Close()
			return MessageList{}, err
		}
		v := byID[pid]
		segBytes[segmentKey{pid, base}] = size
		for off := max(base, lo); off <= min(end, hi); off++ {
			st, lease := v.status(off, dead[pid][off])
			if f.Status != "" && st != f.Status {
				continue
			}
			slot := listSlot{view: v, base: base, end: end, off: off, created: created, status: st, lease: lease}
			if f.After != nil && !f.After.precedes(&slot) {
				continue
			}
			slots = append(slots, slot)
		}
	}
	segRows.Close()
	if err := segRows.Err(); err != nil {
		return MessageList{}, err
	}
	sort.Slice(slots, func(i, j int) bool {
		a, b := &slots[i], &slots[j]
		if !a.created.Equal(b.created) {
			return a.created.After(b.created)
		}
		if a.view.id != b.view.id {
			return compareUUID(a.view.id, b.view.id) < 0
		}
		return a.off > b.off
	})
	if f.Offset >= len(slots) {
		return MessageList{Records: []MessageRecord{}, Mode: mode}, nil
	}
	page := slots[f.Offset:min(len(slots), f.Offset+f.Limit)]
	out, covered, unreadable, err := e.readPage(ctx, page, segBytes)
	if err != nil {
		return MessageList{}, err
	}
	list := MessageList{Records: out, Mode: mode, Unreadable: unreadable}
	if covered < len(page) || f.Offset+f.Limit < len(slots) {
		last := &page[covered-1]
		list.Truncated, list.NextOffset = true, f.Offset+covered
		list.NextAfter = MessageKey{CreatedAt: last.created, PartitionID: last.view.id, Offset: last.off}
	}
	return list, nil
}

// listSlot is one message a listing page may hold, placed before its segment is read.
type listSlot struct {
	view      *partitionView
	base, end int64
	off       int64
	created   time.Time
	status    MessageStatus
	lease     *time.Time
}

type segmentKey struct {
	partition uuid.UUID
	base      int64
}

// messageWireCopies is how many times a message listing's answer carries each
// payload (data and payload), as the byte budget counts it.
const messageWireCopies = 2

// readPage reads the messages of page in order, fetching their segments a
// batch at a time, each batch no larger than what is left of the byte budget
// (and at least one segment), and stops before the first message that would
// take the page past the budget. covered is how many of page's slots it went
// through: the messages it returned, those whose segment does not decode
// (counted in unreadable) and those whose segment retention deleted meanwhile.
func (e *Engine) readPage(ctx context.Context, page []listSlot, segBytes map[segmentKey]int64) (
	out []MessageRecord, covered int, unreadable []UnreadableMessages, err error,
) {
	out = []MessageRecord{}
	budget := pageBudget{left: e.listMaxBytes()}
	frames := map[segmentKey][]Frame{}
	broken := map[segmentKey]bool{}
	for covered < len(page) {
		s := &page[covered]
		key := segmentKey{s.view.id, s.base}
		got, read := frames[key]
		if !read && !broken[key] {
			clear(frames)
			if err := e.readSegments(ctx, nextSegments(page[covered:], segBytes, budget.left), page[covered:], frames, broken); err != nil {
				return nil, 0, nil, err
			}
			got, read = frames[key]
		}
		switch {
		case broken[key]:
			unreadable = countUnreadable(unreadable, s.view)
		case read && int(s.off-s.base) < len(got):
			fr := &got[s.off-s.base]
			if !budget.take(messageWireCopies * int64(len(fr.Payload))) {
				return out, covered, unreadable, nil
			}
			out = append(out, s.view.record(fr, s.off, s.base, int(s.off-s.base), s.created, s.status, s.lease))
		}
		covered++
	}
	return out, covered, unreadable, nil
}

// nextSegments lists the segments of the slots, in their order, until their
// stored bytes reach room (at least one segment).
func nextSegments(slots []listSlot, segBytes map[segmentKey]int64, room int64) []segmentKey {
	var keys []segmentKey
	seen := map[segmentKey]bool{}
	var total int64
	for i := range slots {
		key := segmentKey{slots[i].view.id, slots[i].base}
		if seen[key] {
			continue
		}
		if len(keys) > 0 && total+segBytes[key] > room {
			break
		}
		seen[key] = true
		keys = append(keys, key)
		total += segBytes[key]
	}
	return keys
}

// readSegments reads and decodes the segments keys into frames; a segment that
// does not decode is logged once and marked broken. A segment retention
// deleted since the page was placed is left out of both.
func (e *Engine) readSegments(ctx context.Context, keys []segmentKey, slots []listSlot, frames map[segmentKey][]Frame, broken map[segmentKey]bool) error {
	pids, bases := make([]uuid.UUID, len(keys)), make([]int64, len(keys))
	for i, k := range keys {
		pids[i], bases[i] = k.partition, k.base
	}
	rows, err := e.pool.Query(ctx, `SELECT s.partition_id, s.base_offset, s.end_offset, s.frames
		FROM unnest($1::uuid[], $2::int8[]) AS x(pid, base)
		JOIN lanes.segments s ON s.partition_id = x.pid AND s.base_offset = x.base`, pids, bases)
	if err != nil {
		return err
	}
	defer rows.Close()
	views := map[uuid.UUID]*partitionView{}
	for i := range slots {
		views[slots[i].view.id] = slots[i].view
	}
	for rows.Next() {
		var key segmentKey
		var end int64
		var blob []byte
		if err := rows.Scan(&key.partition, &key.base, &end, &blob); err != nil {
			return err
		}
		decoded, err := decodeFrames(blob, int(end-key.base+1))
		if err != nil {
			e.reportCorruptSegment(views[key.partition].corruptSegment(key.base, end, err))
			broken[key] = true
			continue
		}
		frames[key] = decoded
	}
	return rows.Err()
}

// countUnreadable adds one message of v to unreadable.
func countUnreadable(unreadable []UnreadableMessages, v *partitionView) []UnreadableMessages {
	for i := range unreadable {
		if unreadable[i].PartitionID == v.id {
			unreadable[i].Messages++
			return unreadable
		}
	}
	return append(unreadable, UnreadableMessages{Queue: v.queue, Partition: v.name, PartitionID: v.id, Messages: 1})
}

// MessageList is a page of ListMessages.
type MessageList struct {
	Records []MessageRecord
	Mode    MessageListMode
	// Unreadable counts, per partition, the messages the page left out because
	// their stored segment does not decode.
	Unreadable []UnreadableMessages
	// Truncated: more messages matched past the page, which stopped at its
	// limit or its byte budget; the next page starts at NextOffset, or after
	// NextAfter, the last message the page covered (returned or unreadable).
	Truncated  bool
	NextOffset int
	NextAfter  MessageKey
}

// UnreadableMessages is how many messages of one partition a listing left out.
type UnreadableMessages struct {
	Queue, Partition string
	PartitionID      uuid.UUID
	Messages         int
}

// corruptSegment is the error of v's segment base..end, whose frames do not decode (err).
func (v *partitionView) corruptSegment(base, end int64, err error) *CorruptSegmentError {
	return &CorruptSegmentError{Queue: v.queue, Partition: v.name, PartitionID: v.id, SegmentBase: base, SegmentEnd: end, Err: err}
}

// segmentBudget is how many segments of one partition, newest first, a page
// reads to place every match among the partition's newest Offset+Limit+1 (the
// one past the page says whether the listing goes on). Each segment in
// [lo, hi] holds at least one offset there, which matches unless it is a dead
// letter and the filter is a status other than dead_letter: such a segment may
// match nothing, but holds at least one of the partition's dead letters in
// [lo, hi], so reading that many more segments is enough.
func segmentBudget(f MessageFilter, dead map[int64]bool, lo, hi int64) int64 {
	switch f.Status {
	case StatusDeadLetter:
		// Dead letters may sit anywhere in the committed range: only their segments are read.
		return maxListRows
	case "":
		return int64(f.Offset + f.Limit + 1)
	}
	deadInRange := 0
	for off := range dead {
		if off >= lo && off <= hi {
			deadInRange++
		}
	}
	return int64(f.Offset + f.Limit + 1 + deadInRange)
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
