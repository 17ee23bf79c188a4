package api

import (
	"fmt"
	"reflect"
	"testing"
	"unicode/utf8"

	gojson "github.com/goccy/go-json"
)

// plainBody is a request body and whether a hot path's plain decoder takes
// it (the others go to the general decoder).
type plainBody struct {
	body  string
	plain bool
}

// plainDecoder is a hot path's own decoder (decodePlainPush,
// decodePlainAckBatch) and how a failure prints what it decoded.
type plainDecoder[T any] struct {
	decode func([]byte, *T) bool
	text   func(T) string
}

// checkTable checks that the plain decoder takes exactly the bodies marked
// plain, leaves the request untouched for the others, and that every body
// decodes through the request codec to what the general decoder gives it.
func (d plainDecoder[T]) checkTable(t *testing.T, bodies []plainBody) {
	t.Helper()
	for _, c := range bodies {
		var plain, zero T
		if got := d.decode([]byte(c.body), &plain); got != c.plain {
			t.Errorf("%s: plain decoder took it: %v, want %v", c.body, got, c.plain)
		}
		if !c.plain && !reflect.DeepEqual(plain, zero) {
			t.Errorf("%s: the plain decoder left %+v behind", c.body, plain)
		}
		d.sameAsGeneral(t, []byte(c.body))
		var got, want T
		gotErr, wantErr := (requestBodyCodec{}).Unmarshal([]byte(c.body), &got), gojson.Unmarshal([]byte(c.body), &want)
		if fmt.Sprint(gotErr) != fmt.Sprint(wantErr) || !reflect.DeepEqual(got, want) {
			t.Errorf("%s: the request codec gives %s (%v), goccy %s (%v)", c.body, d.text(got), gotErr, d.text(want), wantErr)
		}
	}
}

// sameAsGeneral checks that a body the plain decoder takes decodes to what
// goccy alone gives it. The request codec refuses a body that is not UTF-8
// before either decoder sees it.
func (d plainDecoder[T]) sameAsGeneral(t *testing.T, body []byte) {
	t.Helper()
	var plain, general T
	if !utf8.Valid(body) || !d.decode(body, &plain) {
		return
	}
	if err := gojson.Unmarshal(body, &general); err != nil || !reflect.DeepEqual(plain, general) {
		t.Fatalf("%q decoded to %s, the general decoder gives %s (%v)", body, d.text(plain), d.text(general), err)
	}
}

// optionalText prints an optional field: nil, or its quoted value.
func optionalText(p *string) string {
	if p == nil {
		return "nil"
	}
	return fmt.Sprintf("%q", *p)
}
