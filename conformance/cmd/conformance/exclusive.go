package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"sync"
	"time"
)

// brokerWide lets a case that changes broker-wide state (caseSpec.Exclusive: push or pop
// maintenance) run alone: every other case, in every SDK, holds a read lock while it runs.
type brokerWide struct {
	mu   sync.RWMutex
	base string // the broker itself, not the proxy: the runner's own checks belong to no case
}

// enter waits until c may run and returns the matching release.
func (b *brokerWide) enter(c testCase) func() {
	if c.Spec.Exclusive {
		b.mu.Lock()
		return b.mu.Unlock
	}
	b.mu.RLock()
	return b.mu.RUnlock
}

// maintenanceRoutes are the broker-wide switches an exclusive case may turn on.
var maintenanceRoutes = map[string]string{
	"push maintenance": "/api/v1/system/maintenance",
	"pop maintenance":  "/api/v1/system/maintenance/pop",
}

// restore runs after an exclusive case: a switch the case left on is a problem of that case,
// and the runner turns it off so the cases after it run on a normal broker whatever the order.
func (b *brokerWide) restore(ctx context.Context) []string {
	var problems []string
	for name, path := range maintenanceRoutes {
		on, err := b.switchOn(ctx, path)
		if err != nil {
			problems = append(problems, fmt.Sprintf("reading %s after the case: %v", name, err))
			continue
		}
		if !on {
			continue
		}
		problems = append(problems, fmt.Sprintf("the case left %s on (the runner turned it off)", name))
		if err := b.switchOff(ctx, path); err != nil {
			problems = append(problems, fmt.Sprintf("turning %s off: %v", name, err))
		}
	}
	return problems
}

func (b *brokerWide) switchOn(ctx context.Context, path string) (bool, error) {
	var out struct {
		Enabled bool `json:"enabled"`
	}
	err := b.call(ctx, http.MethodGet, path, nil, &out)
	return out.Enabled, err
}

func (b *brokerWide) switchOff(ctx context.Context, path string) error {
	return b.call(ctx, http.MethodPost, path, map[string]bool{"enabled": false}, nil)
}

func (b *brokerWide) call(ctx context.Context, method, path string, body, out any) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	var rd bytes.Buffer
	if body != nil {
		if err := json.NewEncoder(&rd).Encode(body); err != nil {
			return err
		}
	}
	req, err := http.NewRequestWithContext(ctx, method, b.base+path, &rd)
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s %s: %s", method, path, resp.Status)
	}
	if out == nil {
		return nil
	}
	return json.NewDecoder(resp.Body).Decode(out)
}
