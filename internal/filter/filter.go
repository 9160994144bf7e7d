// Package filter decides whether an event passes a subscription's filter,
// written as an AWS SNS subscription filter policy: the JSON that SNS users
// already know, such as
//
//	{"store": ["example_corp"], "price_usd": [{"numeric": [">=", 100]}]}
//
// Parse validates a policy once, when the subscription sets it, and compiles
// it; Match then runs per event on the delivery path without parsing the
// policy again, walking a body's JSON once, and without allocating (but to
// unescape a string that holds JSON escapes, or past 16 keys' worth of
// state).
//
// # Semantics
//
// A policy names keys. An event passes when every key's condition holds (AND
// across keys) and, for each key, at least one entry of its array holds (OR
// within a key). "$or" takes an array of two or more sub-policies and holds
// when any of them does. The entries are:
//
//   - "text": the value equals text, case-sensitively.
//   - 42: the value equals the number 42 (so does "42.0" or "4.2e1").
//   - {"prefix": "p"}, {"suffix": "s"}: the value starts or ends with it.
//   - {"equals-ignore-case": "t"}: the value equals t up to Unicode case.
//   - {"anything-but": ...}: the value is none of one string or number, or
//     of an array of them, or does not start with {"prefix": "p"}.
//   - {"numeric": ["=", 5]}, [">", 0], ["<=", 150], [">", 0, "<=", 150]:
//     the value is a number in that range.
//   - {"cidr": "10.0.0.0/24"}: the value is an IP address in that block
//     (IPv4 or IPv6; a lone address is a block of one).
//   - {"exists": true} / {"exists": false}: the key is present / absent.
//   - true, false, null: the JSON literal (Body scope only).
//
// A key is present when it has a value that is not null, not the empty
// string and not an empty array (SNS asks exists for a non-null, non-empty
// value). A key that is absent satisfies only {"exists": false}; in
// particular anything-but does not match an absent key (add
// {"exists": false} to the same array for that, as with SNS).
//
// # Scopes
//
// With Attributes (SNS's MessageAttributes, the default) keys name the
// event's headers. Herald headers are strings, so:
//
//   - string conditions compare the header's text;
//   - numeric conditions, and numbers listed in a key's array or in
//     anything-but, match a header whose text is a JSON number ("150",
//     "-2.5", "1e3"); other headers never match them;
//   - a header whose text is a well-formed JSON array, such as
//     ["rugby","tennis"], is taken as SNS's String.Array: it matches when any
//     element does, each element taken as text (a number element by its
//     literal, which numeric conditions then read). An empty array has no
//     element, so the key is absent. Text that merely starts with "[" and is
//     not a JSON array is an ordinary string.
//   - true, false and null are refused when parsing, because no header can
//     hold them; quote them to match the text.
//
// With Body (SNS's MessageBody) the payload must be a JSON object, and keys
// name its fields; a nested object in the policy names fields of nested
// objects, so {"order": {"kind": ["book"]}} reads payload.order.kind. Values
// keep their JSON types: "100" (a string) does not match a numeric
// condition, and 100 does not match "100". An array met on the way to a key,
// or at it, is flattened: the key matches when any element does. An object
// at a key is not a value (SNS's "leaf nodes only"). A key whose value is
// null matches [null]. A payload that is not a well-formed JSON object
// matches no Body policy.
//
// Unlike SNS, {"exists": false} holds for an event that has no headers at
// all: herald events often carry none, and skipping them would surprise.
//
// # The event key
//
// Herald adds a condition SNS has none of: "$key" holds string conditions on
// the event's key, as in {"$key": [{"prefix": "orders/"}]}. It may appear
// only at the policy's top level (or in a top-level "$or" alternative) and
// takes exact strings, prefix, suffix, equals-ignore-case and anything-but of
// strings. Every name that starts with "$" is reserved for operators, so no
// header or body field named "$..." can be filtered on; that is what keeps
// "$key" and "$or" from colliding with a real header.
//
// # Limits
//
// Parse enforces SNS's documented limits and names the one exceeded:
//
//   - at most 5 keys in each alternative the policy expands to ("$or"
//     expands into its alternatives; with Body each nested key path counts,
//     and "$key" counts as a key);
//   - at most 150 combinations: the product of the array lengths in each
//     alternative, summed over the alternatives;
//   - numbers between -1e9 and 1e9, with at most 5 digits after the decimal
//     point; numbers are compared at that precision;
//   - a policy of at most 256 KiB of valid UTF-8.
//
// Beyond SNS, a policy may not name a key twice in one object (JSON would
// keep the last silently), and neither a policy nor a payload may nest
// deeper than 10000 levels, as encoding/json allows.
package filter

import "unsafe"

// Scope says what a policy's keys name.
type Scope int

const (
	// Attributes makes keys name event headers; SNS calls it
	// MessageAttributes. It is the zero Scope, as it is SNS's default.
	Attributes Scope = iota
	// Body makes keys name fields of a JSON payload; SNS calls it
	// MessageBody.
	Body
)

// String returns the scope's SNS name.
func (s Scope) String() string {
	switch s {
	case Attributes:
		return "MessageAttributes"
	case Body:
		return "MessageBody"
	}
	return "Scope(" + itoa(int(s)) + ")"
}

// ParseScope reads a scope by its SNS name, MessageAttributes or
// MessageBody; the empty string is the default, Attributes.
func ParseScope(name string) (Scope, error) {
	switch name {
	case "", "MessageAttributes":
		return Attributes, nil
	case "MessageBody":
		return Body, nil
	}
	return 0, &Error{Reason: "scope " + quote(name) + " is not MessageAttributes or MessageBody"}
}

// Event is what a policy is matched against.
type Event struct {
	Key     string
	Headers map[string]string
	// Payload is read only with Body scope.
	Payload []byte
}

// Policy is a parsed, validated filter policy, safe for concurrent use.
type Policy struct {
	scope     Scope
	canonical string
	root      group
	leaves    []leaf
	// fields is the tree of key paths, walked once over the headers or the
	// payload; "$key" leaves are apart, in keyLeaves.
	fields    *field
	keyLeaves []int
	// headers lists the top-level fields, for Attributes scope, in a slice
	// because ranging over it is cheaper than over fields.children.
	headers []header
}

// header is a top-level field and its name.
type header struct {
	name string
	*field
}

// Scope returns the scope the policy was parsed with.
func (p *Policy) Scope() Scope { return p.scope }

// String returns the policy's canonical JSON: keys sorted, no spaces,
// numbers in their shortest form. Parsing it again, with the same scope,
// gives a policy that matches exactly the same events, so two policies
// with equal String are equivalent.
func (p *Policy) String() string { return p.canonical }

// stackLeaves is how many leaves Match tracks without allocating.
const stackLeaves = 16

// Match reports whether the event passes the policy. A nil policy passes
// every event: a subscription without a filter.
func (p *Policy) Match(e Event) bool {
	if p == nil {
		return true
	}
	var buf [stackLeaves]leafState
	st := buf[:]
	if len(p.leaves) > stackLeaves {
		st = make([]leafState, len(p.leaves))
	}
	st = st[:len(p.leaves)]
	for _, i := range p.keyLeaves {
		p.visit(i, st, value{kind: kindString, text: e.Key})
	}
	switch p.scope {
	case Body:
		if !p.scanBody(e.Payload, st) {
			return false
		}
	default:
		p.scanHeaders(e.Headers, st)
	}
	return p.root.holds(p.leaves, st)
}

// scanHeaders feeds each header a key names to that key's leaves.
func (p *Policy) scanHeaders(headers map[string]string, st []leafState) {
	for _, f := range p.headers {
		h, ok := headers[f.name]
		if !ok {
			continue
		}
		if isJSONArray(h) {
			s := scanner{s: h, asText: true}
			s.walk(p, f.field, st)
			continue
		}
		for _, i := range f.leaves {
			p.visit(i, st, value{kind: kindString, text: h})
		}
	}
}

// scanBody walks the payload once, feeding each value a key path names to
// that path's leaves. It reports false if the payload is not a JSON object.
func (p *Policy) scanBody(payload []byte, st []leafState) bool {
	// The scanner only reads the text and keeps none of it once Match
	// returns, so viewing the payload as a string without copying it is
	// safe and spares an allocation the size of every payload.
	s := scanner{s: unsafe.String(unsafe.SliceData(payload), len(payload))}
	if s.space(); s.peek() != '{' {
		return false
	}
	return s.walk(p, p.fields, st)
}

// visit records one value met at leaf i.
func (p *Policy) visit(i int, st []leafState, v value) {
	if v.kind != kindNull && (v.kind != kindString || v.text != "") {
		st[i].present = true
	}
	if !st[i].matched && p.leaves[i].matches(v) {
		st[i].matched = true
	}
}

// field is one level of key paths: the leaves whose path ends here, and the
// fields nested below.
type field struct {
	leaves   []int
	children map[string]*field
}

// leafState is what one Match learnt about one leaf.
type leafState struct {
	present bool // a value neither null nor empty was met
	matched bool // a value met one of the leaf's value conditions
}

// group is a conjunction: all its leaves hold, and each of its "$or"s has
// an alternative that holds.
type group struct {
	leaves []int
	ors    [][]group
}

func (g *group) holds(leaves []leaf, st []leafState) bool {
	for _, i := range g.leaves {
		if !leaves[i].holds(st[i]) {
			return false
		}
	}
	for _, alts := range g.ors {
		if !anyHolds(alts, leaves, st) {
			return false
		}
	}
	return true
}

func anyHolds(alts []group, leaves []leaf, st []leafState) bool {
	for i := range alts {
		if alts[i].holds(leaves, st) {
			return true
		}
	}
	return false
}
