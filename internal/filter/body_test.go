package filter

import "testing"

// Body scope over nested objects and arrays.
func TestMatchBodyNested(t *testing.T) {
	const (
		kind      = `{"order": {"kind": ["book"]}}`
		deep      = `{"a": {"b": {"c": {"d": [{"prefix": "x"}]}}}}`
		twoFields = `{"order": {"kind": ["book"], "total": [{"numeric": [">", 10]}]}, "region": ["eu"]}`
		nestedOr  = `{"order": {"$or": [{"kind": ["book"]}, {"total": [{"numeric": [">=", 100]}]}]}}`
		literals  = `{"paid": [true], "coupon": [null], "gift": [false]}`
		noKind    = `{"order": {"kind": [{"exists": false}]}}`
		hasKind   = `{"order": {"kind": [{"exists": true}]}}`
		escaped   = `{"na\"me": ["a\"b"]}`
		sameLeaf  = `{"$or": [{"tag": ["a"]}, {"tag": [{"prefix": "b"}]}]}`
	)
	runMatches(t, Body, []matchCase{
		{"nested/match", kind, body(`{"order": {"kind": "book", "id": 7}}`), true},
		{"nested/other value", kind, body(`{"order": {"kind": "film"}}`), false},
		{"nested/field at the top level is not nested", kind, body(`{"kind": "book"}`), false},
		{"nested/object at the leaf", kind, body(`{"order": {"kind": {"name": "book"}}}`), false},
		{"nested/parent is a string", kind, body(`{"order": "book"}`), false},
		{"nested/through an array of objects", kind, body(`{"order": [{"kind": "film"}, {"kind": "book"}]}`), true},
		{"nested/array at the leaf", kind, body(`{"order": {"kind": ["film", ["book"]]}}`), true},
		{"nested/skips unrelated values", kind, body(`{"x": {"kind": "book", "y": [1, {"z": "}"}]}, "order": {"kind": "book"}}`), true},

		{"deep/match", deep, body(`{"a": {"b": {"c": {"d": "xy"}}}}`), true},
		{"deep/miss", deep, body(`{"a": {"b": {"c": {"e": "xy"}}}}`), false},

		{"two fields/all hold", twoFields, body(`{"region": "eu", "order": {"total": 12.5, "kind": "book"}}`), true},
		{"two fields/one fails", twoFields, body(`{"region": "eu", "order": {"total": 9, "kind": "book"}}`), false},
		{"two fields/region missing", twoFields, body(`{"order": {"total": 12.5, "kind": "book"}}`), false},

		{"nested $or/first", nestedOr, body(`{"order": {"kind": "book", "total": 5}}`), true},
		{"nested $or/second", nestedOr, body(`{"order": {"kind": "film", "total": 100}}`), true},
		{"nested $or/neither", nestedOr, body(`{"order": {"kind": "film", "total": 99.99999}}`), false},

		{"literals/all", literals, body(`{"paid": true, "coupon": null, "gift": false}`), true},
		{"literals/string true", literals, body(`{"paid": "true", "coupon": null, "gift": false}`), false},
		{"literals/null absent", literals, body(`{"paid": true, "gift": false}`), false},

		{"exists false/null is absent", noKind, body(`{"order": {"kind": null}}`), true},
		{"exists false/parent absent", noKind, body(`{"other": 1}`), true},
		{"exists false/present", noKind, body(`{"order": {"kind": "book"}}`), false},
		{"exists true/null", hasKind, body(`{"order": {"kind": null}}`), false},
		{"exists true/empty array", hasKind, body(`{"order": {"kind": []}}`), false},
		{"exists true/empty string", hasKind, body(`{"order": {"kind": ""}}`), false},
		{"exists false/empty string", noKind, body(`{"order": {"kind": ""}}`), true},
		{"exists true/present", hasKind, body(`{"order": {"kind": ["", 0]}}`), true},
		{"exists false/not a JSON object", noKind, body(`["order"]`), false},
		{"exists false/not JSON", noKind, body(`{"order": `), false},
		{"exists false/empty payload", noKind, Event{}, false},

		{"escapes/in name and value", escaped, body(`{"na\"me": "a\u0022b"}`), true},
		{"escapes/other value", escaped, body(`{"na\"me": "a\"c"}`), false},

		{"same leaf twice/first", sameLeaf, body(`{"tag": "a"}`), true},
		{"same leaf twice/second", sameLeaf, body(`{"tag": "bee"}`), true},
		{"same leaf twice/neither", sameLeaf, body(`{"tag": "c"}`), false},
	})
}

// Header values, the event key, and the corners of numbers.
func TestMatchHeadersAndKey(t *testing.T) {
	const (
		orders    = `{"$key": [{"prefix": "orders/"}]}`
		keyAndHdr = `{"$key": ["orders/1", {"suffix": "/2"}], "type": ["created"]}`
		keyNot    = `{"$key": [{"anything-but": ["orders/1", "orders/2"]}]}`
		keyInOr   = `{"$or": [{"$key": [{"equals-ignore-case": "VIP"}]}, {"tier": ["gold"]}]}`
		dollarHdr = `{"type": ["a"]}`
		num       = `{"n": [5]}`
		ab        = `{"n": [{"anything-but": "x"}]}`
	)
	runMatches(t, Attributes, []matchCase{
		{"key prefix/match", orders, Event{Key: "orders/42"}, true},
		{"key prefix/miss", orders, Event{Key: "users/42"}, false},
		{"key and header/both", keyAndHdr, Event{Key: "orders/2", Headers: map[string]string{"type": "created"}}, true},
		{"key and header/key fails", keyAndHdr, Event{Key: "orders/3", Headers: map[string]string{"type": "created"}}, false},
		{"key and header/a header named $key is not the key", keyAndHdr,
			Event{Key: "x", Headers: map[string]string{"$key": "orders/1", "type": "created"}}, false},
		{"key anything-but/other", keyNot, Event{Key: "orders/3"}, true},
		{"key anything-but/listed", keyNot, Event{Key: "orders/2"}, false},
		{"key anything-but/empty key", keyNot, Event{}, true},
		{"key in $or/key", keyInOr, Event{Key: "vip"}, true},
		{"key in $or/header", keyInOr, headers("tier", "gold"), true},
		{"key in $or/neither", keyInOr, headers("tier", "silver"), false},

		{"header/not a JSON array", dollarHdr, headers("type", "[a"), false},
		{"header/array with a number and an object", dollarHdr, headers("type", `[1, {"x": "a"}, "a"]`), true},
		{"header/empty array", dollarHdr, headers("type", `[]`), false},
		{"header/empty array is absent", `{"type": [{"exists": false}]}`, headers("type", `[]`), true},
		{"header/empty is absent", `{"type": [{"exists": true}]}`, headers("type", ""), false},
		{"header/empty matches the empty string", `{"type": [""]}`, headers("type", ""), true},
		{"header/escaped element", dollarHdr, headers("type", `["\u0061"]`), true},
		{"header/brackets but not JSON", `{"type": ["[a]"]}`, headers("type", "[a]"), true},

		{"number/5.0", num, headers("n", "5.0"), true},
		{"number/5e0", num, headers("n", "5e0"), true},
		{"number/leading space", num, headers("n", " 5"), false},
		{"number/Inf", `{"n": [{"numeric": [">", 0]}]}`, headers("n", "Inf"), false},
		{"number/under the precision", num, headers("n", "5.000001"), true},
		{"number/array element", num, headers("n", `["4", 5]`), true},
		{"number/string element", num, headers("n", `["5"]`), true},
		{"number/huge", `{"n": [{"numeric": [">", 1000000000]}]}`, headers("n", "1e300"), true},

		{"cidr/in block", `{"ip": [{"cidr": "10.0.0.0/24"}]}`, headers("ip", "10.0.0.255"), true},
		{"cidr/outside", `{"ip": [{"cidr": "10.0.0.0/24"}]}`, headers("ip", "10.0.1.0"), false},
		{"cidr/not an address", `{"ip": [{"cidr": "10.0.0.0/24"}]}`, headers("ip", "10.0.0.x"), false},
		{"cidr/one address", `{"ip": [{"cidr": "192.0.2.7"}]}`, headers("ip", "192.0.2.7"), true},
		{"cidr/ipv6", `{"ip": [{"cidr": "2001:db8::/32"}]}`, headers("ip", `["10.0.0.1", "2001:db8::1"]`), true},
		{"cidr/unmasked block", `{"ip": [{"cidr": "10.0.0.9/24"}]}`, headers("ip", "10.0.0.1"), true},

		{"anything-but single/other", ab, headers("n", "y"), true},
		{"anything-but single/listed", ab, headers("n", "x"), false},
	})
}

// Policies with more leaves than Match tracks on the stack still match.
func TestMatchManyLeaves(t *testing.T) {
	policy := `{"$or": [`
	for i := range 20 {
		if i > 0 {
			policy += ","
		}
		policy += `{"k": ["v` + itoa(i) + `"]}`
	}
	policy += `]}`
	runMatches(t, Attributes, []matchCase{
		{"last", policy, headers("k", "v19"), true},
		{"none", policy, headers("k", "v20"), false},
	})
}

func TestNilPolicyMatchesEverything(t *testing.T) {
	var p *Policy
	if !p.Match(Event{}) {
		t.Error("a nil policy refused an event")
	}
}
