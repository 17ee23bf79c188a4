package engine

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"
)

// ConfigurePool sets what the engine needs of every connection of a pool it
// is given: times scanned from timestamptz columns in UTC. pgx scans them in
// the process's local zone by default, and an answer built from one would
// carry that zone's offset (-05:00) where every other time on the wire is UTC.
func ConfigurePool(cfg *pgxpool.Config) {
	next := cfg.AfterConnect
	cfg.AfterConnect = func(ctx context.Context, conn *pgx.Conn) error {
		conn.TypeMap().RegisterType(&pgtype.Type{Name: "timestamptz", OID: pgtype.TimestamptzOID,
			Codec: &pgtype.TimestamptzCodec{ScanLocation: time.UTC}})
		if next != nil {
			return next(ctx, conn)
		}
		return nil
	}
}
