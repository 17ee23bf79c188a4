package api

import (
	"context"
	"errors"
	"strconv"
	"time"

	"github.com/google/uuid"

	"github.com/lanesmq/lanes/server/internal/api/gen"
	"github.com/lanesmq/lanes/server/internal/engine"
)

// ListMessages lists retained messages newest first with their derived status.
func (s *Server) ListMessages(ctx context.Context, req gen.ListMessagesRequestObject) (gen.ListMessagesResponseObject, error) {
	p := req.Params
	f := engine.MessageFilter{
		Queue: deref(p.Queue), Partition: deref(p.Partition), Namespace: deref(p.Namespace), Task: deref(p.Task),
		Status: engine.MessageStatus(deref(p.Status)), Limit: 200,
	}
	if f.Namespace == "" {
		f.Namespace = deref(p.Ns)
	}
	if p.Limit != nil {
		f.Limit = *p.Limit
	}
	place, err := keyedRowPage(&f.Limit, p.Offset, p.After, messageKeyPlaceNames, messageKeyNamesWithWindow)
	if err != nil {
		return nil, err
	}
	f.Offset = place.Offset
	var walk *messageWindow
	if place.After != nil {
		if f.After, walk, err = parseMessageKey(place.After); err != nil {
			return nil, err
		}
	}
	window := pageWindow(p.From, p.To, walk, time.Now())
	if p.From != nil && p.To != nil && !window.from.Before(window.to) {
		return gen.ListMessages400JSONResponse{BadRequestJSONResponse: gen.BadRequestJSONResponse{
			Error: "from must be before to", Code: CodeBadRequest}}, nil
	}
	f.From, f.To = window.from, window.to
	page, err := s.engine.ListMessages(ctx, f)
	if err != nil {
		return nil, err
	}
	items := make([]gen.MessageListItem, len(page.Records))
	for i := range page.Records {
		items[i] = wireListItem(&page.Records[i])
	}
	out := gen.ListMessages200JSONResponse{Messages: items, Total: len(items), Mode: wireMode(page.Mode)}
	out.Truncated = &page.Truncated
	if page.Truncated {
		// The positions covered, unreadable messages included, as NextOffset counts them.
		covered := page.NextOffset - place.Offset
		out.NextAfter, out.NextOffset = nextPlaces(place, covered, messageKeyNames(page.NextAfter, window)...)
	}
	if len(page.Unreadable) > 0 {
		unreadable := make([]gen.UnreadableMessages, len(page.Unreadable))
		for i, u := range page.Unreadable {
			unreadable[i] = gen.UnreadableMessages{Queue: u.Queue, Partition: u.Partition, PartitionId: u.PartitionID.String(), Messages: u.Messages}
		}
		out.Unreadable = &unreadable
	}
	return out, nil
}

// messageWindow is the createdAt window [from, to) a page of the message listing reads.
type messageWindow struct{ from, to time.Time }

// pageWindow is the window of a page asked for with the bounds from and to
// (nil when left out) after a key carrying walk, the window of the walk's
// first page (nil on a first page, and in a key of a broker before keys
// carried it, which keeps that broker's window: the page's own clock's). A
// bound left out takes the walk's: by its own clock a later page's window
// would have moved on, leaving out the messages at its lower edge and
// letting its upper one pass the first page's. A bound the page names wins
// over the walk's rather than being refused: it does not move with the
// clock, and the SDK walks, like clients that page by offset, send the
// query's from and to again with every page.
func pageWindow(from, to *time.Time, walk *messageWindow, now time.Time) messageWindow {
	var w messageWindow
	w.from, w.to = engine.MessageWindow(deref(from), deref(to), now)
	if walk != nil && from == nil {
		w.from = walk.from
	}
	if walk != nil && to == nil {
		w.to = walk.to
	}
	return w
}

// The lengths of a message listing's key: the message's place alone (keys of
// brokers before the window was carried), or followed by the walk's window.
const (
	messageKeyPlaceNames      = 3
	messageKeyNamesWithWindow = 5
)

// messageKeyNames are the names of a message's key in an after: its
// segment's createdAt in microseconds since the epoch (an integer, as in
// deadLetterKeyNames), its partition id and its offset, then the bounds of
// the walk's window w, in microseconds too (the database's precision, so a
// later page reads the very window the first did).
func messageKeyNames(k engine.MessageKey, w messageWindow) []string {
	return []string{strconv.FormatInt(k.CreatedAt.UnixMicro(), 10), k.PartitionID.String(), strconv.FormatInt(k.Offset, 10),
		strconv.FormatInt(w.from.UnixMicro(), 10), strconv.FormatInt(w.to.UnixMicro(), 10)}
}

// parseMessageKey reads the names of messageKeyNames back; the window is nil
// in a key of the place alone.
func parseMessageKey(names []string) (*engine.MessageKey, *messageWindow, error) {
	micros, err := strconv.ParseInt(names[0], 10, 64)
	pid, pidErr := uuid.Parse(names[1])
	offset, offsetErr := strconv.ParseInt(names[2], 10, 64)
	if err != nil || pidErr != nil || offsetErr != nil || micros < oldestTimestampMicros || offset < 0 {
		return nil, nil, badAfter()
	}
	key := &engine.MessageKey{CreatedAt: time.UnixMicro(micros), PartitionID: pid, Offset: offset}
	if len(names) == messageKeyPlaceNames {
		return key, nil, nil
	}
	from, fromErr := strconv.ParseInt(names[3], 10, 64)
	to, toErr := strconv.ParseInt(names[4], 10, 64)
	// A page of an empty window is empty and names no next page.
	if fromErr != nil || toErr != nil || from < oldestTimestampMicros || from >= to {
		return nil, nil, badAfter()
	}
	return key, &messageWindow{from: time.UnixMicro(from), to: time.UnixMicro(to)}, nil
}

func wireListItem(r *engine.MessageRecord) gen.MessageListItem {
	id, pid := r.ID.String(), r.PartitionID.String()
	status := gen.MessageListItemStatus(r.Status)
	queueStatus := string(r.Status)
	path := r.Queue + "/" + r.Partition
	created := r.CreatedAt.UTC()
	available := true
	// No segment position: offsets never appear on the wire.
	item := gen.MessageListItem{
		Id: id, TransactionId: r.TransactionID, PartitionId: pid, QueuePath: path,
		Queue: r.Queue, Partition: r.Partition, Namespace: r.Namespace, Task: r.Task, Status: status,
		QueueStatus: queueStatus, TraceId: optional(r.TraceID), ProducerSub: optional(r.ProducerSub),
		PayloadAvailable: available, CreatedAt: created, LeaseExpiresAt: r.LeaseExpiresAt,
		Data: r.Payload, Payload: r.Payload,
	}
	item.BusStatus = struct {
		ConsumedBy  *int `json:"consumedBy,omitempty"`
		TotalGroups *int `json:"totalGroups,omitempty"`
	}{ConsumedBy: &r.ConsumedBy, TotalGroups: &r.TotalGroups}
	return item
}

func wireMode(m engine.MessageListMode) gen.MessageListMode {
	t := gen.MessageListModeType(m.Type)
	return gen.MessageListMode{HasQueueMode: m.HasQueueMode, BusGroupsCount: m.BusGroups, Type: t}
}

// parsePartitionID reads the partition id of a message address; a malformed
// one gets the 400 invalid_id body to answer.
func parsePartitionID(raw string) (uuid.UUID, *gen.BadRequestJSONResponse) {
	pid, err := uuid.Parse(raw)
	if err != nil {
		return uuid.UUID{}, &gen.BadRequestJSONResponse{Error: "partitionId must be a UUID, got " + raw, Code: CodeInvalidID}
	}
	return pid, nil
}

// messageNotFound answers a message address with nothing behind it.
var messageNotFound = gen.NotFoundJSONResponse{Error: "Message not found", Code: CodeMessageNotFound}

// GetMessage answers one message with its per-group consumption.
func (s *Server) GetMessage(ctx context.Context, req gen.GetMessageRequestObject) (gen.GetMessageResponseObject, error) {
	pid, bad := parsePartitionID(req.PartitionId)
	if bad != nil {
		return gen.GetMessage400JSONResponse{BadRequestJSONResponse: *bad}, nil
	}
	d, err := s.engine.GetMessage(ctx, pid, req.TransactionId)
	if errors.Is(err, engine.ErrNotFound) {
		return gen.GetMessage404JSONResponse{NotFoundJSONResponse: messageNotFound}, nil
	}
	if err != nil {
		return nil, err
	}
	id, partitionID := d.ID.String(), d.PartitionID.String()
	status := string(d.Status)
	path := d.Queue + "/" + d.Partition
	created := d.CreatedAt.UTC()
	encrypted := false
	groups := make([]gen.MessageConsumerGroup, len(d.Groups))
	var queueModeLease *time.Time
	for i := range d.Groups {
		g := &d.Groups[i]
		groups[i] = gen.MessageConsumerGroup{Name: g.Group, Group: g.Group, Consumed: g.Consumed, LeaseExpiresAt: g.LeaseExpiresAt}
		if g.Group == engine.QueueModeGroup {
			queueModeLease = g.LeaseExpiresAt
		}
	}
	out := gen.GetMessage200JSONResponse{
		Id: id, TransactionId: d.TransactionID, Data: d.Payload, Payload: d.Payload, TraceId: optional(d.TraceID),
		ProducerSub: optional(d.ProducerSub), CreatedAt: created, PartitionId: partitionID, Partition: d.Partition,
		IsEncrypted: encrypted, Queue: d.Queue, QueuePath: path, Namespace: d.Namespace, Task: d.Task,
		Status: status, ErrorMessage: optional(d.ErrorMessage), RetryCount: d.RetryCount,
		LeaseExpiresAt: queueModeLease, ConsumerGroups: groups, Mode: wireMode(d.Mode),
	}
	out.QueueConfig = struct {
		LeaseTime  *int `json:"leaseTime,omitempty"`
		RetryLimit *int `json:"retryLimit,omitempty"`
	}{LeaseTime: &d.LeaseTime, RetryLimit: &d.RetryLimit}
	return out, nil
}

// DeleteMessage deletes the dead letters at a message address; live messages
// cannot be deleted one by one.
func (s *Server) DeleteMessage(ctx context.Context, req gen.DeleteMessageRequestObject) (gen.DeleteMessageResponseObject, error) {
	pid, bad := parsePartitionID(req.PartitionId)
	if bad != nil {
		return gen.DeleteMessage400JSONResponse{BadRequestJSONResponse: *bad}, nil
	}
	n, err := s.engine.DeleteDeadLetters(ctx, pid, req.TransactionId)
	if errors.Is(err, engine.ErrNotFound) {
		return gen.DeleteMessage404JSONResponse{NotFoundJSONResponse: messageNotFound}, nil
	}
	if err != nil {
		return nil, err
	}
	deleted, ok := int(n), true
	return gen.DeleteMessage200JSONResponse{Success: ok, Deleted: deleted}, nil
}
