package filter

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"
)

// The limits SNS documents for a filter policy.
const (
	maxPolicyBytes  = 256 << 10
	maxKeys         = 5
	maxCombinations = 150
)

// The names a policy reserves; every other name starting with reserved is
// refused, so that new operators can be added without breaking a policy.
const (
	reserved = "$"
	orName   = "$or"
	keyName  = "$key"
)

// Error is what Parse returns for a policy it refuses.
type Error struct {
	// Key is where in the policy the fault is, as a dotted path of key
	// names ("order.kind", "$or[1].price"); empty when it is the whole
	// policy's.
	Key string
	// Reason says what is wrong and what is allowed.
	Reason string
	// Err is the underlying error, if any, such as a JSON syntax error.
	Err error
}

func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString("filter policy: ")
	if e.Key != "" {
		b.WriteString("key " + quote(e.Key) + ": ")
	}
	b.WriteString(e.Reason)
	if e.Err != nil {
		b.WriteString(": " + e.Err.Error())
	}
	return b.String()
}

func (e *Error) Unwrap() error { return e.Err }

// Parse validates a filter policy and compiles it for Match. The error, an
// *Error, names the part of the policy at fault and what is allowed there.
func Parse(policy []byte, scope Scope) (*Policy, error) {
	if scope != Attributes && scope != Body {
		return nil, &Error{Reason: "scope " + scope.String() + " is not MessageAttributes or MessageBody"}
	}
	doc, err := decode(policy)
	if err != nil {
		return nil, err
	}
	ps := parser{p: &Policy{scope: scope, fields: &field{}}}
	root, err := ps.group(doc, nil, "", true)
	if err != nil {
		return nil, err
	}
	ps.p.root = root
	if err := ps.checkLimits(); err != nil {
		return nil, err
	}
	for _, name := range slices.Sorted(maps.Keys(ps.p.fields.children)) {
		ps.p.headers = append(ps.p.headers, header{name, ps.p.fields.children[name]})
	}
	ps.p.canonical = canonical(doc)
	return ps.p, nil
}

// decode reads the policy into JSON values, numbers kept as written.
func decode(policy []byte) (map[string]any, error) {
	if len(policy) > maxPolicyBytes {
		return nil, &Error{Reason: "is " + itoa(len(policy)) + " bytes; the limit is " + itoa(maxPolicyBytes) + " (256 KiB)"}
	}
	if !utf8.Valid(policy) {
		return nil, &Error{Reason: "is not valid UTF-8"}
	}
	d := json.NewDecoder(bytes.NewReader(policy))
	d.UseNumber()
	doc, err := readValue(d, "", 0)
	if err != nil {
		var perr *Error
		if errors.As(err, &perr) {
			return nil, err
		}
		return nil, &Error{Reason: "is not valid JSON", Err: err}
	}
	if _, err := d.Token(); err != io.EOF {
		return nil, &Error{Reason: "has text after the JSON object"}
	}
	obj, ok := doc.(map[string]any)
	if !ok {
		return nil, &Error{Reason: "must be a JSON object of keys, not " + jsonType(doc)}
	}
	return obj, nil
}

// readValue reads one JSON value from d, refusing what encoding/json lets
// pass: an object that names a key twice (the last would win, silently)
// and nesting deeper than a payload may.
func readValue(d *json.Decoder, where string, depth int) (any, error) {
	if depth > maxDepth {
		return nil, &Error{Key: where, Reason: "nests deeper than " + itoa(maxDepth) + " levels"}
	}
	tok, err := d.Token()
	if err != nil {
		return nil, err
	}
	switch tok {
	case json.Delim('{'):
		obj := map[string]any{}
		for d.More() {
			tok, err := d.Token()
			if err != nil {
				return nil, err
			}
			name := tok.(string)
			if _, twice := obj[name]; twice {
				return nil, &Error{Key: join(where, name), Reason: "the key appears twice in one object"}
			}
			if obj[name], err = readValue(d, join(where, name), depth+1); err != nil {
				return nil, err
			}
		}
		_, err = d.Token() // }
		return obj, err
	case json.Delim('['):
		arr := []any{}
		for d.More() {
			v, err := readValue(d, where, depth+1)
			if err != nil {
				return nil, err
			}
			arr = append(arr, v)
		}
		_, err = d.Token() // ]
		return arr, err
	}
	return tok, nil
}

// parser builds a Policy from decoded JSON.
type parser struct {
	p *Policy
}

// group parses one JSON object of the policy: path is the field path it
// sits at, where its display name, top whether it is the policy's top
// level (where "$key" may appear).
func (ps *parser) group(obj map[string]any, path []string, where string, top bool) (group, error) {
	var g group
	if len(obj) == 0 {
		return g, &Error{Key: where, Reason: "an object must name at least one key"}
	}
	for _, name := range slices.Sorted(maps.Keys(obj)) {
		if err := ps.member(&g, name, obj[name], path, join(where, name), top); err != nil {
			return g, err
		}
	}
	return g, nil
}

// member parses one name and its value into g.
func (ps *parser) member(g *group, name string, v any, path []string, where string, top bool) error {
	switch {
	case name == orName:
		alts, err := ps.or(v, path, where, top)
		g.ors = append(g.ors, alts)
		return err
	case name == keyName && top:
		return ps.leaf(g, v, nil, where, true)
	case name == keyName:
		return &Error{Key: where, Reason: "$key is allowed only at the top level of the policy"}
	case strings.HasPrefix(name, reserved):
		return &Error{Key: where, Reason: "names starting with $ are reserved; the ones defined are $or and $key"}
	case name == "":
		return &Error{Key: where, Reason: "a key name must not be empty"}
	}
	sub := append(slices.Clip(path), name)
	nested, isObject := v.(map[string]any)
	if !isObject {
		return ps.leaf(g, v, sub, where, false)
	}
	if ps.p.scope != Body {
		return &Error{Key: where, Reason: "nested objects are allowed only with scope MessageBody; headers are flat"}
	}
	inner, err := ps.group(nested, sub, where, false)
	g.leaves = append(g.leaves, inner.leaves...)
	g.ors = append(g.ors, inner.ors...)
	return err
}

// or parses the array of "$or".
func (ps *parser) or(v any, path []string, where string, top bool) ([]group, error) {
	arr, ok := v.([]any)
	if !ok || len(arr) < 2 {
		return nil, &Error{Key: where, Reason: "$or takes an array of two or more objects"}
	}
	alts := make([]group, 0, len(arr))
	for i, a := range arr {
		at := where + "[" + itoa(i) + "]"
		obj, ok := a.(map[string]any)
		if !ok {
			return nil, &Error{Key: at, Reason: "an alternative of $or must be an object, not " + jsonType(a)}
		}
		alt, err := ps.group(obj, path, at, top)
		if err != nil {
			return nil, err
		}
		alts = append(alts, alt)
	}
	return alts, nil
}

// leaf parses a key's array of conditions and adds it to g. A nil path
// means the key is "$key".
func (ps *parser) leaf(g *group, v any, path []string, where string, isKey bool) error {
	arr, ok := v.([]any)
	if !ok {
		return &Error{Key: where, Reason: "the value must be an array of conditions, such as [\"a\", {\"prefix\": \"b\"}], not " + jsonType(v)}
	}
	if len(arr) == 0 {
		return &Error{Key: where, Reason: "the array must hold at least one condition"}
	}
	l := leaf{typed: ps.p.scope == Body}
	cp := condParser{typed: l.typed, isKey: isKey}
	for _, x := range arr {
		if err := cp.entry(&l, x); err != nil {
			return &Error{Key: where, Reason: err.Error()}
		}
	}
	l.numeric = l.wantsNumber()
	i := len(ps.p.leaves)
	ps.p.leaves = append(ps.p.leaves, l)
	g.leaves = append(g.leaves, i)
	if isKey {
		ps.p.keyLeaves = append(ps.p.keyLeaves, i)
		return nil
	}
	f := ps.p.fields
	for _, name := range path {
		if f.children == nil {
			f.children = map[string]*field{}
		}
		next := f.children[name]
		if next == nil {
			next = &field{}
			f.children[name] = next
		}
		f = next
	}
	f.leaves = append(f.leaves, i)
	return nil
}

// checkLimits refuses a policy over SNS's limits on keys and combinations.
func (ps *parser) checkLimits() error {
	keys, combos := ps.size(&ps.p.root)
	if keys > maxKeys {
		return &Error{Reason: "has " + itoa(keys) + " keys in one alternative; the limit is " + itoa(maxKeys)}
	}
	if combos > maxCombinations {
		return &Error{Reason: "has more than " + itoa(maxCombinations) + " combinations of values, the limit" +
			" (the product of the array lengths, summed over the alternatives $or makes)"}
	}
	return nil
}

// size returns the most keys any alternative of g has and the number of
// value combinations over all of them, both capped just past their limits
// so that no policy can overflow them.
func (ps *parser) size(g *group) (keys, combos int) {
	keys, combos = len(g.leaves), 1
	for _, i := range g.leaves {
		combos = capped(combos * ps.p.leaves[i].values())
	}
	for _, alts := range g.ors {
		most, sum := 0, 0
		for i := range alts {
			k, c := ps.size(&alts[i])
			most, sum = max(most, k), capped(sum+c)
		}
		keys, combos = capped(keys+most), capped(combos*sum)
	}
	return keys, combos
}

func capped(n int) int { return min(n, maxCombinations+1) }

// values is how many entries the leaf's array had.
func (l *leaf) values() int {
	n := len(l.conds)
	if l.existsTrue {
		n++
	}
	if l.existsFalse {
		n++
	}
	return max(n, 1)
}

// canonical writes the policy back as compact JSON with sorted keys and
// numbers in their shortest form.
func canonical(doc map[string]any) string {
	var b bytes.Buffer
	e := json.NewEncoder(&b)
	e.SetEscapeHTML(false)
	if err := e.Encode(normalize(doc)); err != nil {
		// Everything in doc came from json.Decode, so it encodes.
		panic("filter: policy does not encode: " + err.Error())
	}
	return strings.TrimSuffix(b.String(), "\n")
}

// normalize rewrites the numbers in v in their shortest form.
func normalize(v any) any {
	switch v := v.(type) {
	case map[string]any:
		out := make(map[string]any, len(v))
		for k, x := range v {
			out[k] = normalize(x)
		}
		return out
	case []any:
		out := make([]any, len(v))
		for i, x := range v {
			out[i] = normalize(x)
		}
		return out
	case json.Number:
		f, err := v.Float64()
		if err != nil {
			return v
		}
		if f == 0 {
			f = 0 // no "-0"
		}
		return json.Number(strconv.FormatFloat(f, 'f', -1, 64))
	}
	return v
}

func join(where, name string) string {
	if where == "" {
		return name
	}
	return where + "." + name
}

func jsonType(v any) string {
	switch v.(type) {
	case map[string]any:
		return "an object"
	case []any:
		return "an array"
	case string:
		return "a string"
	case json.Number:
		return "a number"
	case bool:
		return "a boolean"
	case nil:
		return "null"
	}
	return "an unknown value"
}

func itoa(n int) string { return strconv.Itoa(n) }

func quote(s string) string { return strconv.Quote(s) }

// reason makes the reason of a condition's fault; the caller adds where.
func reason(s string) error { return errors.New(s) }

// parseNumber reads a policy number, refusing one outside the SNS range or
// with more decimals than SNS keeps, and returns it quantized.
func parseNumber(n json.Number) (float64, error) {
	f, err := n.Float64()
	if err != nil || math.Abs(f) > maxMagnitude {
		return 0, reason("number " + n.String() + " is outside the range -1e9 to 1e9")
	}
	if decimals(n.String()) > decimalPlaces {
		return 0, reason("number " + n.String() + " has more than " + itoa(decimalPlaces) + " digits after the decimal point")
	}
	return quantize(f), nil
}

// decimals counts the digits after the decimal point that the JSON number
// s needs, once written without an exponent and trailing zeros.
func decimals(s string) int {
	s = strings.TrimPrefix(s, "-")
	exp := 0
	if i := strings.IndexAny(s, "eE"); i >= 0 {
		e, err := strconv.Atoi(strings.TrimPrefix(s[i+1:], "+"))
		if err != nil {
			return math.MaxInt32
		}
		s, exp = s[:i], e
	}
	whole, frac, _ := strings.Cut(s, ".")
	digits := strings.TrimRight(whole+frac, "0")
	if strings.Trim(digits, "0") == "" {
		return 0
	}
	zeros := len(whole) + len(frac) - len(digits)
	return max(0, len(frac)-exp-zeros)
}
