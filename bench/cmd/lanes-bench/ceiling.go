package main

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
)

// ceilingScenario measures PostgreSQL alone doing the durable write a push
// group commit boils down to: one segment row (the frames of batch messages,
// encoded as the broker encodes them) per transaction, through pgx with no
// HTTP, from workers concurrent connections, each on its own partition id.
//
// With notify, each transaction also runs pg_notify as a push commit does, which
// shows what NOTIFY's commit-time lock costs PostgreSQL alone.
func (h *harness) ceilingScenario(name string, workers, batch int, notify bool) (Result, error) {
	ctx := context.Background()
	pool, err := newPool(ctx, h.ceilingURL, int32(workers))
	if err != nil {
		return Result{}, err
	}
	defer pool.Close()
	if _, err := pool.Exec(ctx, `CREATE TABLE IF NOT EXISTS segments (
		partition_id uuid NOT NULL, base_offset bigint NOT NULL, end_offset bigint NOT NULL,
		created_at timestamptz NOT NULL, frames bytea NOT NULL, PRIMARY KEY (partition_id, base_offset))`); err != nil {
		return Result{}, err
	}
	// Compressed as the broker's segments are (lz4 where the server has it), so
	// the ceiling is PostgreSQL's best for the same rows.
	if _, err := pool.Exec(ctx, `DO $$ BEGIN
			ALTER TABLE segments ALTER COLUMN frames SET COMPRESSION lz4;
		EXCEPTION WHEN feature_not_supported THEN NULL; END $$`); err != nil {
		return Result{}, err
	}
	// frames as engine/frames.go lays them out: id, txn id, trace id, producer sub, payload JSON
	payload, _ := json.Marshal(benchPayload{Seq: 123456, Body: payloadBody})
	var frames []byte
	for i := 0; i < batch; i++ {
		var id [16]byte
		_, _ = rand.Read(id[:])
		frames = append(frames, id[:]...)
		txn := fmt.Sprintf("%d-%d-%d", 7, 123456, i)
		frames = binary.AppendUvarint(frames, uint64(len(txn)))
		frames = append(frames, txn...)
		frames = binary.AppendUvarint(frames, 0)
		frames = binary.AppendUvarint(frames, 0)
		frames = binary.AppendUvarint(frames, uint64(len(payload)))
		frames = append(frames, payload...)
	}
	// open every connection before the window
	var warm sync.WaitGroup
	for i := 0; i < workers; i++ {
		warm.Add(1)
		go func() { defer warm.Done(); _, _ = pool.Exec(ctx, "SELECT 1") }()
	}
	warm.Wait()
	runCtx, cancel := context.WithTimeout(ctx, h.o.duration)
	defer cancel()
	var txs atomic.Int64
	var firstErr firstError
	lat := &recorder{}
	var wg sync.WaitGroup
	w := h.begin(h.ceilingDB, "")
	start := time.Now()
	for i := 0; i < workers; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var pid [16]byte
			_, _ = rand.Read(pid[:])
			for off := int64(0); runCtx.Err() == nil; off += int64(batch) {
				t0 := time.Now()
				var err error
				if notify {
					b := &pgx.Batch{}
					b.Queue("BEGIN")
					b.Queue(`INSERT INTO segments (partition_id, base_offset, end_offset, created_at, frames) VALUES ($1, $2, $3, clock_timestamp(), $4)`, pid, off, off+int64(batch)-1, frames)
					b.Queue(`SELECT pg_notify('lanes_bench', 'q')`)
					b.Queue("COMMIT")
					err = pool.SendBatch(ctx, b).Close()
				} else {
					_, err = pool.Exec(ctx, `INSERT INTO segments (partition_id, base_offset, end_offset, created_at, frames) VALUES ($1, $2, $3, clock_timestamp(), $4)`,
						pid, off, off+int64(batch)-1, frames)
				}
				if err != nil {
					firstErr.set(err)
					return
				}
				lat.add(time.Since(t0))
				txs.Add(1)
			}
		}()
	}
	wg.Wait()
	desc := fmt.Sprintf("PostgreSQL alone: %d pgx connections, each committing one %d-message segment row (%d bytes) per transaction, no HTTP", workers, batch, len(frames))
	if notify {
		desc += ", plus pg_notify in every transaction (as a push commit does)"
	}
	r := Result{Scenario: name, System: "postgres", Available: true, Seconds: time.Since(start).Seconds(), Description: desc}
	w.end(&r)
	if err := firstErr.get(); err != nil {
		return r, err
	}
	r.TxPerSec = float64(txs.Load()) / r.Seconds
	r.Messages = txs.Load() * int64(batch)
	r.MsgPerSec = float64(r.Messages) / r.Seconds
	r.LatencyMs = lat.percentiles()
	return r, nil
}
