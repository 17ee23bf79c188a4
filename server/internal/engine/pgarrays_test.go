package engine

import (
	"bytes"
	"fmt"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgtype"
)

// The array parameters must reach PostgreSQL as the bytes pgx's generic slice
// path sends, NULL and empty included (but a nil uuid list, which was always
// sent as '{}').
func TestArrayParamsEncodeAsPgxSlicesDo(t *testing.T) {
	m := pgtype.NewMap()
	encode := func(oid uint32, v any) []byte {
		t.Helper()
		out, err := m.Encode(oid, pgtype.BinaryFormatCode, v, nil)
		if err != nil {
			t.Fatalf("encode %T: %v", v, err)
		}
		return out
	}
	ids := []uuid.UUID{uuid.New(), uuid.New(), uuid.New()}
	raw := make([][16]byte, len(ids))
	for i, id := range ids {
		raw[i] = id
	}
	cases := []struct {
		name      string
		oid       uint32
		got, want any
	}{
		{"uuids", pgtype.UUIDArrayOID, uuidArray(ids), raw},
		{"no uuids", pgtype.UUIDArrayOID, uuidArray(nil), [][16]byte{}},
		{"texts", pgtype.TextArrayOID, textArray([]string{"a", "", "order-9137-paid", "ü"}), []string{"a", "", "order-9137-paid", "ü"}},
		{"empty texts", pgtype.TextArrayOID, textArray([]string{}), []string{}},
		{"nil texts", pgtype.TextArrayOID, textArray(nil), []string(nil)},
		{"int8s", pgtype.Int8ArrayOID, int8Array([]int64{0, -1, 1 << 40}), []int64{0, -1, 1 << 40}},
		{"empty int8s", pgtype.Int8ArrayOID, int8Array([]int64{}), []int64{}},
		{"nil int8s", pgtype.Int8ArrayOID, int8Array(nil), []int64(nil)},
	}
	for _, c := range cases {
		got, want := encode(c.oid, c.got), encode(c.oid, c.want)
		if !bytes.Equal(got, want) {
			t.Errorf("%s: %x, pgx's slice path sends %x", c.name, got, want)
		}
	}
}

// BenchmarkArrayParams encodes one 100-message push's transaction-index
// arrays (partition ids, transaction ids, offsets, message ids).
func BenchmarkArrayParams(b *testing.B) {
	const n = 100
	pids, msgs := make([]uuid.UUID, n), make([]uuid.UUID, n)
	txns, offsets := make([]string, n), make([]int64, n)
	for i := range n {
		pids[i], msgs[i], txns[i], offsets[i] = uuid.New(), uuid.New(), fmt.Sprintf("p3-%d", 1000+i), int64(5000+i)
	}
	m := pgtype.NewMap()
	buf := make([]byte, 0, 16<<10)
	encodeAll := func(b *testing.B, args ...any) {
		oids := []uint32{pgtype.UUIDArrayOID, pgtype.TextArrayOID, pgtype.Int8ArrayOID, pgtype.UUIDArrayOID}
		for i, a := range args {
			if _, err := m.Encode(oids[i], pgtype.BinaryFormatCode, a, buf[:0]); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.Run("pgx-slices", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			rawP, rawM := make([][16]byte, n), make([][16]byte, n)
			for i := range n {
				rawP[i], rawM[i] = pids[i], msgs[i]
			}
			encodeAll(b, rawP, txns, offsets, rawM)
		}
	})
	b.Run("array-params", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			encodeAll(b, uuidArray(pids), textArray(txns), int8Array(offsets), uuidArray(msgs))
		}
	})
}
