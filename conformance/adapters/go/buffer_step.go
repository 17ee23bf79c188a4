package main

import (
	"context"
	"errors"
	"sync"
	"time"

	lanes "github.com/lanesmq/lanes/sdk-go"
)

type bufferPushArgs struct {
	queueArgs
	Items        []item `json:"items"`
	MessageCount int    `json:"messageCount"`
	RetryDelayMs int    `json:"retryDelayMs"`
	// FlushTimeoutMs bounds the flush (default 10 s).
	FlushTimeoutMs int `json:"flushTimeoutMs"`
	MaxSize        int `json:"maxSize"`
	// PushTimeoutMs bounds the push's wait for room (the caller's ctx); none = no bound.
	PushTimeoutMs int `json:"pushTimeoutMs"`
}

// bufferPush pushes the items into the client's push buffer for the queue and partition, then
// flushes it (the flush interval is long, so only that flush sends). It reports the error
// callback's calls (onError: the error, or a DroppedError's cause; dropped: the transaction
// ids of the items dropped) and the client's buffer stats after the flush.
func (s *state) bufferPush(ctx context.Context, a bufferPushArgs) (map[string]any, error) {
	var mu sync.Mutex
	onErrors, dropped := []any{}, []any{}
	opts := lanes.BufferOptions{MessageCount: a.MessageCount, FlushInterval: time.Minute, MaxSize: a.MaxSize,
		RetryDelay: time.Duration(a.RetryDelayMs) * time.Millisecond,
		OnError: func(err error) {
			mu.Lock()
			defer mu.Unlock()
			onErrors = append(onErrors, errKind(err))
			var de *lanes.DroppedError
			if errors.As(err, &de) {
				for _, it := range de.Items {
					dropped = append(dropped, it.TransactionID)
				}
			}
		}}
	buf := s.builder(a.queueArgs).Buffer(opts)
	out := map[string]any{}
	pctx, cancelPush := ctx, context.CancelFunc(func() {})
	if a.PushTimeoutMs > 0 {
		pctx, cancelPush = context.WithTimeout(ctx, time.Duration(a.PushTimeoutMs)*time.Millisecond)
	}
	err := buf.Push(pctx, items(a.Items)...)
	cancelPush()
	if a.PushTimeoutMs > 0 && errors.Is(err, context.DeadlineExceeded) {
		out["pushTimedOut"], err = true, nil // nothing queued; the step does not flush
	} else if err == nil {
		timeout := 10 * time.Second
		if a.FlushTimeoutMs > 0 {
			timeout = time.Duration(a.FlushTimeoutMs) * time.Millisecond
		}
		fctx, cancel := context.WithTimeout(ctx, timeout)
		err = buf.Flush(fctx)
		cancel()
	}
	stats := s.client.BufferStats()
	mu.Lock()
	out["onError"], out["dropped"] = onErrors, dropped
	mu.Unlock()
	out["stats"] = map[string]any{"activeBuffers": stats.ActiveBuffers,
		"totalBufferedMessages": stats.TotalBufferedMessages, "flushesPerformed": stats.FlushesPerformed}
	return withErr(out, err), nil
}
