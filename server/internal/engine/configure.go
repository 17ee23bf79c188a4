package engine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math"
	"regexp"
	"slices"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
)

// QueueOptions is the full option set of a queue, with wire names.
type QueueOptions struct {
	LeaseTime                   int    `json:"leaseTime"`
	RetryLimit                  int    `json:"retryLimit"`
	DeadLetterQueue             bool   `json:"deadLetterQueue"`
	DLQAfterMaxRetries          bool   `json:"dlqAfterMaxRetries"`
	DelayedProcessing           int    `json:"delayedProcessing"`
	WindowBuffer                int    `json:"windowBuffer"`
	RetentionEnabled            bool   `json:"retentionEnabled"`
	RetentionSeconds            int    `json:"retentionSeconds"`
	CompletedRetentionSeconds   int    `json:"completedRetentionSeconds"`
	MaxWaitTimeSeconds          int    `json:"maxWaitTimeSeconds"`
	MinPopWaitTime              int    `json:"minPopWaitTime"`
	EncryptionEnabled           bool   `json:"encryptionEnabled"`
	DedupWindowSeconds          int    `json:"dedupWindowSeconds"`
	RetentionSinkHold           string `json:"retentionSinkHold"`
	RetentionSinkHoldMaxSeconds int    `json:"retentionSinkHoldMaxSeconds"`
	Priority                    int    `json:"priority"`
	TTL                         int    `json:"ttl"`
	MaxSize                     int    `json:"maxSize"`
	RetryDelay                  int    `json:"retryDelay"`
}

// DefaultQueueOptions is what /configure lands on for every omitted option.
func DefaultQueueOptions() QueueOptions {
	return QueueOptions{
		LeaseTime: 300, RetryLimit: 3, DeadLetterQueue: true, DLQAfterMaxRetries: true,
		DedupWindowSeconds: 3600, RetentionSinkHoldMaxSeconds: 604800, TTL: 3600, RetryDelay: 1000,
	}
}

// ConfigureRequest sets a queue's options. Options maps wire option names to
// raw JSON values; JSON null means "back to the default".
type ConfigureRequest struct {
	Queue     string
	Namespace *string
	Task      *string
	Options   map[string]json.RawMessage
	Merge     bool
}

// QueueConfig is a queue's identity and effective options.
type QueueConfig struct {
	ID        uuid.UUID
	Name      string
	Namespace string
	Task      string
	Options   QueueOptions
	CreatedAt time.Time
}

var sinkHoldPattern = regexp.MustCompile(`^[A-Za-z0-9._-]{0,64}$`)

type optionSpec struct {
	kind     string // int, bool, string
	min, max int64
	apply    func(o *QueueOptions, v any)
}

var optionSpecs = map[string]optionSpec{
	"leaseTime":                   {"int", 1, MaxLeaseSeconds, func(o *QueueOptions, v any) { o.LeaseTime = v.(int) }},
	"retryLimit":                  {"int", 0, 1000000, func(o *QueueOptions, v any) { o.RetryLimit = v.(int) }},
	"deadLetterQueue":             {"bool", 0, 0, func(o *QueueOptions, v any) { o.DeadLetterQueue = v.(bool) }},
	"dlqAfterMaxRetries":          {"bool", 0, 0, func(o *QueueOptions, v any) { o.DLQAfterMaxRetries = v.(bool) }},
	"delayedProcessing":           {"int", 0, 31536000, func(o *QueueOptions, v any) { o.DelayedProcessing = v.(int) }},
	"windowBuffer":                {"int", 0, 31536000, func(o *QueueOptions, v any) { o.WindowBuffer = v.(int) }},
	"retentionEnabled":            {"bool", 0, 0, func(o *QueueOptions, v any) { o.RetentionEnabled = v.(bool) }},
	"retentionSeconds":            {"int", 0, 315360000, func(o *QueueOptions, v any) { o.RetentionSeconds = v.(int) }},
	"completedRetentionSeconds":   {"int", 0, 315360000, func(o *QueueOptions, v any) { o.CompletedRetentionSeconds = v.(int) }},
	"maxWaitTimeSeconds":          {"int", 0, 315360000, func(o *QueueOptions, v any) { o.MaxWaitTimeSeconds = v.(int) }},
	"minPopWaitTime":              {"int", 0, 60000, func(o *QueueOptions, v any) { o.MinPopWaitTime = v.(int) }},
	"encryptionEnabled":           {"bool", 0, 0, func(o *QueueOptions, v any) { o.EncryptionEnabled = v.(bool) }},
	"dedupWindowSeconds":          {"int", 0, 315360000, func(o *QueueOptions, v any) { o.DedupWindowSeconds = v.(int) }},
	"retentionSinkHold":           {"string", 0, 0, func(o *QueueOptions, v any) { o.RetentionSinkHold = v.(string) }},
	"retentionSinkHoldMaxSeconds": {"int", 60, 31536000, func(o *QueueOptions, v any) { o.RetentionSinkHoldMaxSeconds = v.(int) }},
	"priority":                    {"int", -1000000, 1000000, func(o *QueueOptions, v any) { o.Priority = v.(int) }},
	"ttl":                         {"int", 0, 315360000, func(o *QueueOptions, v any) { o.TTL = v.(int) }},
	"maxSize":                     {"int", 0, 2147483647, func(o *QueueOptions, v any) { o.MaxSize = v.(int) }},
	"retryDelay":                  {"int", 0, 86400000, func(o *QueueOptions, v any) { o.RetryDelay = v.(int) }},
}

// ApplyOptions validates raw options and applies them over base; a bad value
// or an unknown key names its option. An unknown key is refused, not ignored:
// configure replaces by default, so a misspelled option (dedupWindowSecs) would
// otherwise silently reset the option it meant to set.
func ApplyOptions(base QueueOptions, raw map[string]json.RawMessage) (QueueOptions, error) {
	defaults := DefaultQueueOptions()
	out := base
	// In key order, so that of several bad options the same one is named every time.
	for _, name := range slices.Sorted(maps.Keys(raw)) {
		value := raw[name]
		spec, ok := optionSpecs[name]
		if !ok {
			return out, invalid(name, "unknown queue option %q", name)
		}
		if string(value) == "null" {
			spec.apply(&out, defaultValue(defaults, name))
			continue
		}
		switch spec.kind {
		case "int":
			var f float64
			if err := json.Unmarshal(value, &f); err != nil {
				return out, invalid(name, "%s must be an integer", name)
			}
			// The range first: int64(f) of a value past 64 bits is no integer's.
			if f < float64(spec.min) || f > float64(spec.max) {
				return out, invalid(name, "%s must be between %d and %d", name, spec.min, spec.max)
			}
			if f != math.Trunc(f) {
				return out, invalid(name, "%s must be an integer", name)
			}
			spec.apply(&out, int(f))
		case "bool":
			var b bool
			if err := json.Unmarshal(value, &b); err != nil {
				return out, invalid(name, "%s must be a boolean", name)
			}
			spec.apply(&out, b)
		case "string":
			var s string
			if err := json.Unmarshal(value, &s); err != nil || !sinkHoldPattern.MatchString(s) {
				return out, invalid(name, "%s must match [A-Za-z0-9._-]{0,64}", name)
			}
			spec.apply(&out, s)
		}
	}
	return out, nil
}

func defaultValue(d QueueOptions, name string) any {
	b, _ := json.Marshal(d)
	var m map[string]any
	_ = json.Unmarshal(b, &m)
	switch v := m[name].(type) {
	case float64:
		return int(v)
	default:
		return v
	}
}

const queueColumns = `id, name, namespace, task, lease_time, retry_limit, dead_letter_queue, dlq_after_max_retries,
	delayed_processing, window_buffer, retention_enabled, retention_seconds, completed_retention_seconds,
	max_wait_time_seconds, min_pop_wait_time, encryption_enabled, dedup_window_seconds, retention_sink_hold,
	retention_sink_hold_max_seconds, priority, ttl, max_size, retry_delay, created_at`

func scanQueue(row pgx.Row) (*QueueConfig, error) {
	var q QueueConfig
	if err := row.Scan(queueTargets(&q)...); err != nil {
		return nil, err
	}
	return &q, nil
}

// queueTargets are the scan targets of queueColumns in q.
func queueTargets(q *QueueConfig) []any {
	o := &q.Options
	return []any{&q.ID, &q.Name, &q.Namespace, &q.Task, &o.LeaseTime, &o.RetryLimit, &o.DeadLetterQueue,
		&o.DLQAfterMaxRetries, &o.DelayedProcessing, &o.WindowBuffer, &o.RetentionEnabled, &o.RetentionSeconds,
		&o.CompletedRetentionSeconds, &o.MaxWaitTimeSeconds, &o.MinPopWaitTime, &o.EncryptionEnabled,
		&o.DedupWindowSeconds, &o.RetentionSinkHold, &o.RetentionSinkHoldMaxSeconds, &o.Priority, &o.TTL,
		&o.MaxSize, &o.RetryDelay, &q.CreatedAt}
}

// GetQueue returns a queue's configuration or ErrNotFound.
func (e *Engine) GetQueue(ctx context.Context, name string) (*QueueConfig, error) {
	q, err := scanQueue(e.pool.QueryRow(ctx, `SELECT `+queueColumns+` FROM lanes.queues WHERE name = $1`, name))
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, ErrNotFound
	}
	return q, err
}

// Configure creates or updates a queue. By default every omitted option returns
// to its default (full replace); Merge keeps the stored value of omitted options.
// Validation happens before anything is written.
func (e *Engine) Configure(ctx context.Context, req ConfigureRequest) (*QueueConfig, error) {
	if err := checkRequiredName("queue", req.Queue); err != nil {
		return nil, err
	}
	// The labels are names a discovery pop sends, checked as it checks them;
	// unchecked, a NUL or a label past the (namespace, task) index's limit
	// failed the UPDATE with a 500.
	for _, label := range [...]struct {
		field string
		value *string
	}{{"namespace", req.Namespace}, {"task", req.Task}} {
		if label.value == nil {
			continue
		}
		if err := checkName(label.field, *label.value); err != nil {
			return nil, err
		}
	}
	if _, err := ApplyOptions(DefaultQueueOptions(), req.Options); err != nil {
		return nil, err
	}
	var out *QueueConfig
	err := pgx.BeginFunc(ctx, e.pool, func(tx pgx.Tx) error {
		ns, task := NamespaceTask(req.Queue)
		if _, err := tx.Exec(ctx, `INSERT INTO lanes.queues (name, namespace, task, lease_time) VALUES ($1, $2, $3, 300)
			ON CONFLICT (name) DO NOTHING`, req.Queue, ns, task); err != nil {
			return err
		}
		cur, err := scanQueue(tx.QueryRow(ctx, `SELECT `+queueColumns+` FROM lanes.queues WHERE name = $1 FOR UPDATE`, req.Queue))
		if err != nil {
			return err
		}
		base := DefaultQueueOptions()
		if req.Merge {
			base = cur.Options
		}
		opts, err := ApplyOptions(base, req.Options)
		if err != nil {
			return err
		}
		if req.Namespace != nil {
			cur.Namespace = *req.Namespace
		}
		if req.Task != nil {
			cur.Task = *req.Task
		}
		o := opts
		out, err = scanQueue(tx.QueryRow(ctx, `UPDATE lanes.queues SET namespace = $2, task = $3, lease_time = $4,
				retry_limit = $5, dead_letter_queue = $6, dlq_after_max_retries = $7, delayed_processing = $8,
				window_buffer = $9, retention_enabled = $10, retention_seconds = $11, completed_retention_seconds = $12,
				max_wait_time_seconds = $13, min_pop_wait_time = $14, encryption_enabled = $15,
				dedup_window_seconds = $16, retention_sink_hold = $17, retention_sink_hold_max_seconds = $18,
				priority = $19, ttl = $20, max_size = $21, retry_delay = $22, updated_at = now()
			WHERE id = $1 RETURNING `+queueColumns,
			cur.ID, cur.Namespace, cur.Task, o.LeaseTime, o.RetryLimit, o.DeadLetterQueue, o.DLQAfterMaxRetries,
			o.DelayedProcessing, o.WindowBuffer, o.RetentionEnabled, o.RetentionSeconds, o.CompletedRetentionSeconds,
			o.MaxWaitTimeSeconds, o.MinPopWaitTime, o.EncryptionEnabled, o.DedupWindowSeconds, o.RetentionSinkHold,
			o.RetentionSinkHoldMaxSeconds, o.Priority, o.TTL, o.MaxSize, o.RetryDelay))
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("configure %q: %w", req.Queue, err)
	}
	e.holds.forget()
	return out, nil
}

// PartitionInfo describes one partition of a queue.
type PartitionInfo struct {
	ID          uuid.UUID
	Name        string
	LastOffset  int64
	LogStart    int64
	LastWriteAt *time.Time
	CreatedAt   time.Time
}

// QueueDetail returns a queue's configuration with one page of its
// partitions by name, and whether more follow; ErrNotFound for an unknown
// queue. Both are read in one statement, so the page holds the partitions of
// the queue the configuration describes even while it is deleted or created
// again; the queue's row carries the page's rows, so an empty page still has it.
func (e *Engine) QueueDetail(ctx context.Context, name string, page RowPage) (*QueueConfig, []PartitionInfo, bool, error) {
	after, args := page.nameAfter("p.name", name, page.limitArg(), page.Offset)
	rows, err := e.pool.Query(ctx, `WITH q AS (SELECT `+queueColumns+` FROM lanes.queues WHERE name = $1),
		page AS (SELECT p.id, p.name, p.last_offset, p.log_start, p.last_write_at, p.created_at
			FROM lanes.partitions p WHERE p.queue_id IN (SELECT id FROM q)`+after+` ORDER BY p.name LIMIT $2 OFFSET $3)
		SELECT q.*, page.id, page.name, page.last_offset, page.log_start, page.last_write_at, page.created_at
		FROM q LEFT JOIN page ON true ORDER BY page.name`, args...)
	if err != nil {
		return nil, nil, false, err
	}
	var q *QueueConfig
	var row QueueConfig
	list := []PartitionInfo{}
	var p PartitionInfo
	var id *uuid.UUID
	var partition *string
	var lastOffset, logStart *int64
	var createdAt *time.Time
	targets := append(queueTargets(&row), &id, &partition, &lastOffset, &logStart, &p.LastWriteAt, &createdAt)
	_, err = pgx.ForEachRow(rows, targets, func() error {
		q = &row
		if id != nil {
			p.ID, p.Name, p.LastOffset, p.LogStart, p.CreatedAt = *id, *partition, *lastOffset, *logStart, *createdAt
			list = append(list, p)
		}
		return nil
	})
	if err != nil {
		return nil, nil, false, err
	}
	if q == nil {
		return nil, nil, false, ErrNotFound
	}
	list, more := cutPage(list, page)
	return q, list, more, nil
}
