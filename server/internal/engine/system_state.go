package engine

import (
	"context"
	"encoding/json"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"
)

// SystemFlag reads a boolean switch from lanes.system_state (shared by every
// broker on the database); a missing row is false.
func (e *Engine) SystemFlag(ctx context.Context, key string) (bool, error) {
	ctx, cancel := context.WithTimeout(withSessionMode(ctx, sessionAny), 2*time.Second) // a key probe in any session
	defer cancel()
	var raw []byte
	err := e.pool.QueryRow(ctx, `SELECT value FROM lanes.system_state WHERE key = $1`, key).Scan(&raw)
	if errors.Is(err, pgx.ErrNoRows) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	var v struct {
		Enabled bool `json:"enabled"`
	}
	if err := json.Unmarshal(raw, &v); err != nil {
		return false, err
	}
	return v.Enabled, nil
}

// SetSystemFlag writes a boolean switch to lanes.system_state.
func (e *Engine) SetSystemFlag(ctx context.Context, key string, enabled bool) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	value, _ := json.Marshal(map[string]bool{"enabled": enabled})
	_, err := e.pool.Exec(ctx, `INSERT INTO lanes.system_state (key, value, updated_at) VALUES ($1, $2, now())
		ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value, updated_at = now()`, key, value)
	return err
}
