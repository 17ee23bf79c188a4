package main

import (
	"context"
	"net/http"
	"sort"
	"time"

	"github.com/jackc/pgx/v5"
)

// HopProbe is what one round trip between two processes costs on this
// machine when both were busy (requests back to back) and when they had gone
// idle (20 ms apart): an idle vCPU of a KVM guest that halts takes time to
// wake, and a parked pop's wake-up (the wake scenario) is a chain of such
// round trips between load generator, broker and PostgreSQL.
type HopProbe struct {
	HTTPBusyP50Ms   float64 `json:"httpBusyP50Ms"`
	HTTPIdleP50Ms   float64 `json:"httpIdleP50Ms"`
	HTTPIdleP99Ms   float64 `json:"httpIdleP99Ms"`
	CommitBusyP50Ms float64 `json:"commitBusyP50Ms"`
	CommitIdleP50Ms float64 `json:"commitIdleP50Ms"`
	CommitIdleP99Ms float64 `json:"commitIdleP99Ms"`
}

const (
	hopSamples = 200
	hopIdleGap = 20 * time.Millisecond
)

// probeHops measures GET /status (liveness: no database) on the broker and a
// one-row durable commit on the ceiling's database, each back to back and
// then with an idle gap before every sample.
func (h *harness) probeHops(ctx context.Context) (*HopProbe, error) {
	conn, err := pgx.Connect(ctx, h.ceilingURL)
	if err != nil {
		return nil, err
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, `CREATE TABLE IF NOT EXISTS hop_probe (id bigserial PRIMARY KEY, at timestamptz NOT NULL DEFAULT now())`); err != nil {
		return nil, err
	}
	liveness := func() error { _, err := h.doOnce(ctx, http.MethodGet, "/status", nil, nil); return err }
	commit := func() error { _, err := conn.Exec(ctx, `INSERT INTO hop_probe DEFAULT VALUES`); return err }
	p := &HopProbe{}
	for _, m := range []struct {
		op                 func() error
		busy, idle, idle99 *float64
	}{
		{liveness, &p.HTTPBusyP50Ms, &p.HTTPIdleP50Ms, &p.HTTPIdleP99Ms},
		{commit, &p.CommitBusyP50Ms, &p.CommitIdleP50Ms, &p.CommitIdleP99Ms},
	} {
		for _, gap := range []time.Duration{0, hopIdleGap} {
			samples := make([]float64, 0, hopSamples)
			for range hopSamples {
				time.Sleep(gap)
				t := time.Now()
				if err := m.op(); err != nil {
					return nil, err
				}
				samples = append(samples, float64(time.Since(t).Microseconds())/1000)
			}
			sort.Float64s(samples)
			if gap == 0 {
				*m.busy = samples[len(samples)/2]
			} else {
				*m.idle, *m.idle99 = samples[len(samples)/2], samples[len(samples)*99/100]
			}
		}
	}
	_, _ = conn.Exec(ctx, `DROP TABLE hop_probe`)
	return p, nil
}
