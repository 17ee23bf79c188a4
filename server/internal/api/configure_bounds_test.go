package api

import (
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
)

// The spec states every integer option's bounds, and they are the broker's:
// a client generated from openapi.yaml (a form, a validator) must never offer
// a value the broker refuses. Just outside a bound, or past 64 bits, is
// refused as invalid_option naming the option and its bounds, in an options
// object (the validator's finding) as at the top level (the handler's), and
// changes nothing; the bound itself is accepted.
func TestConfigureOptionBoundsAreTheSpecs(t *testing.T) {
	spec := loadSpec(t)
	b := newTestBroker(t)
	q := uniqueQueue(t)
	props := spec.Components.Schemas["QueueOptions"].Value.Properties
	for _, name := range slices.Sorted(func(yield func(string) bool) {
		for name := range props {
			if !yield(name) {
				return
			}
		}
	}) {
		s := props[name].Value
		if !s.Type.Is("integer") {
			continue
		}
		if s.Min == nil || s.Max == nil {
			t.Errorf("%s: the spec states no minimum or no maximum", name)
			continue
		}
		lo, hi := int64(*s.Min), int64(*s.Max)
		for _, v := range []int64{lo, hi} {
			var out struct {
				Options map[string]any `json:"options"`
			}
			status, _ := b.call(t, "POST", "/api/v1/configure", map[string]any{"queue": q, "mode": "merge", "options": map[string]any{name: v}}, &out)
			if status != http.StatusOK || out.Options[name] != float64(v) {
				t.Errorf("%s=%d, within the spec's bounds: %d %v", name, v, status, out.Options[name])
			}
		}
		for _, v := range []string{fmt.Sprint(lo - 1), fmt.Sprint(hi + 1), "9223372036854775807"} {
			for form, body := range map[string]string{
				"options":   fmt.Sprintf(`{"queue":%q,"mode":"merge","options":{%q:%s}}`, q, name, v),
				"top level": fmt.Sprintf(`{"queue":%q,"mode":"merge",%q:%s}`, q, name, v),
			} {
				var bad struct {
					Error   string `json:"error"`
					Code    string `json:"code"`
					Invalid string `json:"invalid"`
				}
				status, _ := b.call(t, "POST", "/api/v1/configure", body, &bad)
				if status != http.StatusBadRequest || bad.Code != CodeInvalidOption || bad.Invalid != name || !strings.Contains(bad.Error, "between") {
					t.Errorf("%s=%s in %s: %d %+v, want 400 invalid_option naming it and its bounds", name, v, form, status, bad)
				}
			}
		}
	}
	// The last accepted value of every integer option was its maximum.
	var detail struct {
		Options map[string]json.RawMessage `json:"options"`
	}
	b.call(t, "GET", "/api/v1/resources/queues/"+q, nil, &detail)
	for name, p := range props {
		if s := p.Value; s.Type.Is("integer") && s.Max != nil && string(detail.Options[name]) != fmt.Sprint(int64(*s.Max)) {
			t.Errorf("%s is %s after the refused values, want %d", name, detail.Options[name], int64(*s.Max))
		}
	}
}
