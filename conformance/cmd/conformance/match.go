package main

import (
	"encoding/json"
	"fmt"
	"sort"
	"strconv"
	"strings"
)

// matcher compares an expectation with an actual result. Maps match as subsets (keys not
// mentioned are ignored), arrays element by element with equal length, scalars by value
// (numbers as float64). A map whose keys all start with "$" is an operator:
//
//	$gte $lte $gt $lt n     numeric bounds (combine freely)
//	$len n                  array/string/map length
//	$absent true            key missing or null
//	$null true              key present with the value null (a plain null also matches a missing key)
//	$any true               anything, even absent
//	$present true           anything but absent/null
//	$same "step.path"       equal to a value of an earlier step's result (dot path; numbers index arrays)
//	$gteSame {ref, plus}    a number at least an earlier step's value (ref, as $same) plus plus
//	$ne v                   not equal
//	$contains "s"           string contains s
//	$oneOf [a, b]           equal to one of
type matcher struct {
	results map[string]any // step id → result
}

func (m matcher) match(path string, exp, act any) []string {
	if op, ok := exp.(map[string]any); ok && isOperator(op) {
		return m.operator(path, op, act)
	}
	switch e := exp.(type) {
	case nil:
		if act != nil {
			return []string{fmt.Sprintf("%s: want null, got %s", path, show(act))}
		}
		return nil
	case map[string]any:
		a, ok := act.(map[string]any)
		if !ok {
			return []string{fmt.Sprintf("%s: want an object, got %s", path, show(act))}
		}
		var errs []string
		keys := make([]string, 0, len(e))
		for k := range e {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			if op, ok := e[k].(map[string]any); ok && op["$null"] == true {
				if _, present := a[k]; !present {
					errs = append(errs, fmt.Sprintf("%s.%s: want null, got no key", path, k))
					continue
				}
			}
			errs = append(errs, m.match(path+"."+k, e[k], a[k])...)
		}
		return errs
	case []any:
		a, ok := act.([]any)
		if !ok {
			return []string{fmt.Sprintf("%s: want an array, got %s", path, show(act))}
		}
		if len(a) != len(e) {
			return []string{fmt.Sprintf("%s: want %d elements %s, got %d %s", path, len(e), show(e), len(a), show(a))}
		}
		var errs []string
		for i := range e {
			errs = append(errs, m.match(fmt.Sprintf("%s[%d]", path, i), e[i], a[i])...)
		}
		return errs
	default:
		if !equal(exp, act) {
			return []string{fmt.Sprintf("%s: want %s, got %s", path, show(exp), show(act))}
		}
		return nil
	}
}

func isOperator(m map[string]any) bool {
	if len(m) == 0 {
		return false
	}
	for k := range m {
		if !strings.HasPrefix(k, "$") {
			return false
		}
	}
	return true
}

func (m matcher) operator(path string, op map[string]any, act any) []string {
	fail := func(format string, a ...any) []string {
		return []string{path + ": " + fmt.Sprintf(format, a...)}
	}
	var errs []string
	keys := make([]string, 0, len(op))
	for k := range op {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		arg := op[k]
		switch k {
		case "$any":
		case "$absent":
			if act != nil {
				errs = append(errs, fail("want absent, got %s", show(act))...)
			}
		case "$null":
			if act != nil {
				errs = append(errs, fail("want null, got %s", show(act))...)
			}
		case "$present":
			if act == nil {
				errs = append(errs, fail("want a value, got none")...)
			}
		case "$gte", "$lte", "$gt", "$lt":
			a, ok1 := act.(float64)
			b, ok2 := arg.(float64)
			if !ok1 || !ok2 {
				errs = append(errs, fail("%s %s: not numbers (got %s)", k, show(arg), show(act))...)
				continue
			}
			ok := map[string]bool{"$gte": a >= b, "$lte": a <= b, "$gt": a > b, "$lt": a < b}[k]
			if !ok {
				errs = append(errs, fail("want %s %s, got %s", k, show(arg), show(act))...)
			}
		case "$len":
			n := -1
			switch a := act.(type) {
			case []any:
				n = len(a)
			case string:
				n = len(a)
			case map[string]any:
				n = len(a)
			}
			if !equal(float64(n), arg) {
				errs = append(errs, fail("want length %s, got %s", show(arg), show(act))...)
			}
		case "$same":
			ref, _ := arg.(string)
			want, ok := m.lookup(ref)
			if !ok {
				errs = append(errs, fail("$same %q: no such value", ref)...)
			} else if !equal(want, act) {
				errs = append(errs, fail("want the same as %s (%s), got %s", ref, show(want), show(act))...)
			}
		case "$gteSame":
			spec, _ := arg.(map[string]any)
			ref, _ := spec["ref"].(string)
			plus, _ := spec["plus"].(float64)
			base, ok := m.lookup(ref)
			b, isNum := base.(float64)
			a, actNum := act.(float64)
			switch {
			case !ok || !isNum:
				errs = append(errs, fail("$gteSame %q: no such number", ref)...)
			case !actNum || a < b+plus:
				errs = append(errs, fail("want at least %s (%s) + %s, got %s", ref, show(base), show(plus), show(act))...)
			}
		case "$ne":
			if equal(arg, act) {
				errs = append(errs, fail("want anything but %s", show(arg))...)
			}
		case "$contains":
			s, _ := act.(string)
			sub, _ := arg.(string)
			if !strings.Contains(s, sub) {
				errs = append(errs, fail("want a string containing %q, got %s", sub, show(act))...)
			}
		case "$oneOf":
			list, _ := arg.([]any)
			found := false
			for _, x := range list {
				if equal(x, act) {
					found = true
				}
			}
			if !found {
				errs = append(errs, fail("want one of %s, got %s", show(arg), show(act))...)
			}
		default:
			errs = append(errs, fail("unknown operator %s", k)...)
		}
	}
	return errs
}

// lookup resolves "step.a.0.b" in the results of the steps run so far.
func (m matcher) lookup(ref string) (any, bool) {
	parts := strings.Split(ref, ".")
	cur, ok := m.results[parts[0]]
	if !ok {
		return nil, false
	}
	for _, p := range parts[1:] {
		switch c := cur.(type) {
		case map[string]any:
			cur, ok = c[p]
			if !ok {
				return nil, false
			}
		case []any:
			i, err := strconv.Atoi(p)
			if err != nil || i < 0 || i >= len(c) {
				return nil, false
			}
			cur = c[i]
		default:
			return nil, false
		}
	}
	return cur, true
}

func equal(a, b any) bool {
	ja, _ := json.Marshal(a)
	jb, _ := json.Marshal(b)
	return string(ja) == string(jb)
}

func show(v any) string {
	if v == nil {
		return "null"
	}
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprint(v)
	}
	if len(b) > 300 {
		return string(b[:300]) + "…"
	}
	return string(b)
}
