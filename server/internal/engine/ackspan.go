package engine

import (
	"context"
	"fmt"

	"github.com/google/uuid"
)

// A transaction id can repeat in a partition: on a queue with deduplication
// off, or when a producer re-sends it after the dedup window. lanes.txns keeps
// one row per (partition, id), pointing at the newest copy, so it cannot say
// which copy an ack means. An ack while the cursor has a leased span
// (committed, batch_end] means a message that span delivered: the id resolves
// to its lowest copy in the span, and the k-th mention of the id by one call
// under one lease to the k-th copy (so acking every message of [x, y, x]
// commits through the third). Lowest first because a consumer acks in
// delivery order: resolving to the newest would commit past messages it has
// not handled (they would be lost), and a newest copy above the span would
// leave the id unresolvable for as long as the lease redelivers it. A mention
// past the last copy names the last again (the same message mentioned twice,
// as a retried item would). An id with no copy in the span, or an ack while
// the cursor has no span, resolves through lanes.txns as before.

// spanSegmentsSQL reads the segments covering each span [lo, hi] given, in
// one probe per span (segmentsCoveringSpan).
const spanSegmentsSQL = `SELECT t.ord, sg.base_offset, sg.end_offset, sg.frames
	FROM unnest($1::uuid[], $2::int8[], $3::int8[]) WITH ORDINALITY AS t(pid, lo, hi, ord)
	CROSS JOIN LATERAL (` + segmentsCoveringSpan + `) sg
	ORDER BY t.ord, sg.base_offset`

// resolveSpans fills p.spans once the cursors are read and locked: from the
// lease index when it holds the cursor's lease (what the lease delivered),
// else from the span's segments, read in tx, for the cursors where lanes.txns
// cannot tell: an id it lacks or places above the span, or one inside the
// span on a queue with deduplication off (an older copy may sit below it).
// With deduplication on, a txns offset inside the span is taken as the only
// copy there, and one at or below the cursor means no copy is in the span
// (txns holds the newest), so the common ack reads nothing more.
func (p *ackPlan) resolveSpans(ctx context.Context, tx dbtx, items []AckItem, leases *leaseIndex) error {
	named := map[cursorKey][]string{}
	for _, k := range p.keys {
		c := cursorKey{k.partition, k.group}
		row := p.rows[c]
		if row == nil || row.batchEnd <= row.committed || (k.lease != "" && (k.lease != row.leaseID || !row.leaseLive)) {
			continue // no span, or acks apply rejects for their lease
		}
		for _, r := range p.groups[k] {
			named[c] = append(named[c], items[r.index].TransactionID)
		}
	}
	var read []cursorKey
	for c, txns := range named {
		row := p.rows[c]
		if delivered, ok := leases.delivered(row.leaseID, c.p); ok {
			p.setSpan(c, txns)
			for _, txn := range txns {
				for _, off := range delivered[txn] {
					if off > row.committed && off <= row.batchEnd {
						p.spans[c][txn] = append(p.spans[c][txn], off)
					}
				}
			}
			continue
		}
		if !p.txnsTell(c, txns, row) {
			read = append(read, c)
		}
	}
	if len(read) == 0 {
		return nil
	}
	return p.readSpans(ctx, tx, read, named)
}

// txnsTell reports whether lanes.txns alone places each of txns relative to
// the span of cursor c (see resolveSpans).
func (p *ackPlan) txnsTell(c cursorKey, txns []string, row *consumerRow) bool {
	for _, txn := range txns {
		off, ok := p.offsets[cursorKey{c.p, txn}]
		switch {
		case !ok, off > row.batchEnd:
			return false
		case off > row.committed && !row.dedup:
			return false
		}
	}
	return true
}

// readSpans reads the spans of cursors read in one statement and records
// where in them the ids named for each cursor sit.
func (p *ackPlan) readSpans(ctx context.Context, tx dbtx, read []cursorKey, named map[cursorKey][]string) error {
	pids := make([]uuid.UUID, len(read))
	los, his := make([]int64, len(read)), make([]int64, len(read))
	for i, c := range read {
		row := p.rows[c]
		pids[i], los[i], his[i] = c.p, row.committed+1, row.batchEnd
		p.setSpan(c, named[c])
	}
	rows, err := tx.Query(ctx, spanSegmentsSQL, uuidArray(pids), int8Array(los), int8Array(his))
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		var ord, base, end int64
		var blob []byte
		if err := rows.Scan(&ord, &base, &end, &blob); err != nil {
			return err
		}
		i := int(ord - 1)
		frames, err := decodeSpan(blob, base, end, los[i], his[i])
		if err != nil {
			return fmt.Errorf("partition %s segment %d: %w", pids[i], base, err)
		}
		span := p.spans[read[i]]
		first := max(base, los[i])
		for j := range frames {
			if offs, ok := span[frames[j].TransactionID]; ok {
				span[frames[j].TransactionID] = append(offs, first+int64(j))
			}
		}
	}
	return rows.Err()
}

// setSpan starts cursor c's entry in p.spans with every id of txns, none
// found yet.
func (p *ackPlan) setSpan(c cursorKey, txns []string) {
	if p.spans == nil {
		p.spans = map[cursorKey]map[string][]int64{}
	}
	span := make(map[string][]int64, len(txns))
	for _, txn := range txns {
		span[txn] = []int64{}
	}
	p.spans[c] = span
}

// resolveRefs gives each ack of group k its offset: the copy within the span
// its mention names when the span holds the id, else the lanes.txns offset if
// it is at most upper.
func (p *ackPlan) resolveRefs(k ackGroupKey, refs []ackRef, items []AckItem, upper int64) {
	span := p.spans[cursorKey{k.partition, k.group}]
	var mentions map[string]int // only for an id with several copies in the span
	for i := range refs {
		txn := items[refs[i].index].TransactionID
		if offs := span[txn]; len(offs) > 0 {
			n := 0
			if len(offs) > 1 {
				if mentions == nil {
					mentions = map[string]int{}
				}
				n = mentions[txn]
				mentions[txn]++
			}
			refs[i].offset, refs[i].known = nthCopy(offs, n), true
			continue
		}
		off, ok := p.offsets[cursorKey{k.partition, txn}]
		refs[i].offset, refs[i].known = off, ok && off <= upper
	}
}
