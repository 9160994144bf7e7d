package filter

import (
	"errors"
	"strings"
	"testing"
)

// Each invalid policy, with the text its error must contain: the part at
// fault and what is allowed.
func TestParseRefuses(t *testing.T) {
	sixKeys := `{"a": ["1"], "b": ["1"], "c": ["1"], "d": ["1"], "e": ["1"], "f": ["1"]}`
	tooMany := `{"a": ["1","2","3","4","5","6"], "b": ["1","2","3","4","5"], "c": ["1","2","3","4","5,","6"]}`
	for _, c := range []struct {
		name, policy string
		scope        Scope
		want         string
	}{
		{"not JSON", `{"a": [`, Attributes, "filter policy: is not valid JSON"},
		{"trailing text", `{"a": ["x"]} {}`, Attributes, "has text after the JSON object"},
		{"not an object", `["a"]`, Attributes, "must be a JSON object of keys, not an array"},
		{"empty", `{}`, Attributes, "an object must name at least one key"},
		{"duplicate key", `{"a": ["x"], "a": ["y"]}`, Attributes, `key "a": the key appears twice in one object`},
		{"duplicate nested key", `{"a": {"b": ["x"], "b": ["y"]}}`, Body, `key "a.b": the key appears twice in one object`},
		{"too deep", strings.Repeat("[", maxDepth+2) + strings.Repeat("]", maxDepth+2), Attributes, "nests deeper than 10000 levels"},
		{"bad JSON in an array", `{"a": ["x" "y"]}`, Attributes, "filter policy: is not valid JSON: invalid character"},
		{"invalid UTF-8", "{\"a\": [\"\xff\"]}", Attributes, "is not valid UTF-8"},
		{"too big", `{"a": ["` + strings.Repeat("x", maxPolicyBytes) + `"]}`, Attributes, "the limit is 262144 (256 KiB)"},
		{"value not array", `{"a": "x"}`, Attributes, `key "a": the value must be an array of conditions`},
		{"empty array", `{"a": []}`, Attributes, `key "a": the array must hold at least one condition`},
		{"nested array", `{"a": [["x"]]}`, Attributes, `key "a": an array cannot hold another array`},
		{"nested in attributes", `{"a": {"b": ["x"]}}`, Attributes, `key "a": nested objects are allowed only with scope MessageBody`},
		{"boolean header", `{"a": [true]}`, Attributes, `key "a": true cannot match a string; headers and the event key are text, so write "true"`},
		{"null header", `{"a": [null]}`, Attributes, `key "a": null cannot match a string`},
		{"unknown operator", `{"a": [{"contains": "x"}]}`, Attributes,
			`key "a": contains: is not an operator; the operators are anything-but, cidr, equals-ignore-case, exists, numeric, prefix, suffix`},
		{"two operators", `{"a": [{"prefix": "x", "suffix": "y"}]}`, Attributes, `key "a": a condition object must have exactly one operator`},
		{"prefix number", `{"a": [{"prefix": 1}]}`, Attributes, `key "a": prefix: takes a string, not a number`},
		{"prefix empty", `{"a": [{"prefix": ""}]}`, Attributes, `key "a": prefix: takes a non-empty string`},
		{"suffix empty", `{"a": [{"suffix": ""}]}`, Attributes, `key "a": suffix: takes a non-empty string`},
		{"ignore case number", `{"a": [{"equals-ignore-case": 5}]}`, Attributes, `key "a": equals-ignore-case: takes a string, not a number`},
		{"anything-but empty", `{"a": [{"anything-but": []}]}`, Attributes, `key "a": anything-but: takes at least one value`},
		{"anything-but object", `{"a": [{"anything-but": {"suffix": "x"}}]}`, Attributes,
			`key "a": anything-but: an object here must be {"prefix": "..."}`},
		{"anything-but boolean", `{"a": [{"anything-but": [true]}]}`, Attributes, `key "a": anything-but: takes strings and numbers, not a boolean`},
		{"anything-but prefix empty", `{"a": [{"anything-but": {"prefix": ""}}]}`, Attributes, `anything-but: prefix: takes a non-empty string`},
		{"numeric operator", `{"price": [{"numeric": ["=>", 5]}]}`, Attributes,
			`filter policy: key "price": numeric: operator "=>" is not one of =, <, <=, >, >=`},
		{"numeric shape", `{"price": [{"numeric": [">", 5, "<"]}]}`, Attributes, `key "price": numeric: takes [operator, number]`},
		{"numeric not array", `{"price": [{"numeric": 5}]}`, Attributes, `key "price": numeric: takes [operator, number]`},
		{"numeric string value", `{"price": [{"numeric": [">", "5"]}]}`, Attributes, `numeric: operator ">" takes a number, not a string`},
		{"numeric operator number", `{"price": [{"numeric": [5, 5]}]}`, Attributes, `numeric: an operator must be a string`},
		{"range starts low", `{"price": [{"numeric": ["<", 5, "<", 10]}]}`, Attributes, `numeric: a range starts with > or >=, not "<"`},
		{"range ends high", `{"price": [{"numeric": [">", 5, ">", 10]}]}`, Attributes, `numeric: a range ends with < or <=, not ">"`},
		{"range equals", `{"price": [{"numeric": [">", 5, "=", 10]}]}`, Attributes, `numeric: a range ends with < or <=, not "="`},
		{"range empty", `{"price": [{"numeric": [">", 10, "<", 5]}]}`, Attributes, `numeric: the range is empty`},
		{"range point open", `{"price": [{"numeric": [">=", 5, "<", 5]}]}`, Attributes, `numeric: the range is empty`},
		{"number too big", `{"price": [1000000001]}`, Attributes, `key "price": number 1000000001 is outside the range -1e9 to 1e9`},
		{"number too small", `{"price": [{"numeric": [">", -2e9]}]}`, Attributes, `numeric: number -2e9 is outside the range -1e9 to 1e9`},
		{"number overflows", `{"price": [1e400]}`, Attributes, `number 1e400 is outside the range`},
		{"six decimals", `{"price": [0.000001]}`, Attributes, `number 0.000001 has more than 5 digits after the decimal point`},
		{"six decimals exponent", `{"price": [{"anything-but": [1.5e-6]}]}`, Attributes, `number 1.5e-6 has more than 5 digits`},
		{"cidr not string", `{"ip": [{"cidr": 10}]}`, Attributes, `key "ip": cidr: takes a string, not a number`},
		{"cidr malformed", `{"ip": [{"cidr": "10.0.0.0/33"}]}`, Attributes,
			`key "ip": cidr: "10.0.0.0/33" is not an IP address or a CIDR block such as "10.0.0.0/24"`},
		{"$key cidr", `{"$key": [{"cidr": "10.0.0.0/8"}]}`, Attributes, `$key takes exact strings and`},
		{"exists string", `{"a": [{"exists": "yes"}]}`, Attributes, `key "a": exists: takes true or false, not a string`},
		{"or not array", `{"$or": {"a": ["x"]}}`, Attributes, `key "$or": $or takes an array of two or more objects`},
		{"or one", `{"$or": [{"a": ["x"]}]}`, Attributes, `key "$or": $or takes an array of two or more objects`},
		{"or not object", `{"$or": [{"a": ["x"]}, ["b"]]}`, Attributes, `key "$or[1]": an alternative of $or must be an object, not an array`},
		{"or empty alternative", `{"$or": [{"a": ["x"]}, {}]}`, Attributes, `key "$or[1]": an object must name at least one key`},
		{"or bad inside", `{"$or": [{"a": ["x"]}, {"b": [{"prefix": 2}]}]}`, Attributes, `key "$or[1].b": prefix: takes a string`},
		{"reserved", `{"$and": [{"a": ["x"]}]}`, Attributes, `key "$and": names starting with $ are reserved; the ones defined are $or and $key`},
		{"empty name", `{"": ["x"]}`, Attributes, `a key name must not be empty`},
		{"six keys", sixKeys, Attributes, "has 6 keys in one alternative; the limit is 5"},
		{"six keys with $or", `{"a": ["1"], "b": ["1"], "c": ["1"], "d": ["1"], "$or": [{"e": ["1"]}, {"f": ["1"], "g": ["1"]}]}`, Attributes,
			"has 6 keys in one alternative; the limit is 5"},
		{"combinations", tooMany, Attributes, "has more than 150 combinations of values, the limit"},
		{"combinations with $or", `{"a": ["1","2","3","4","5","6","7","8","9","10"], "$or": [` +
			`{"b": ["1","2","3","4","5","6","7","8"]}, {"c": ["1","2","3","4","5","6","7","8"]}]}`, Attributes,
			"has more than 150 combinations of values, the limit"},

		{"body nested empty", `{"a": {}}`, Body, `key "a": an object must name at least one key`},
		{"body nested bad", `{"a": {"b": [{"numeric": ["<>", 1]}]}}`, Body, `key "a.b": numeric: operator "<>" is not one of`},
		{"body nested keys", `{"a": {"b": ["1"], "c": ["1"], "d": ["1"]}, "e": {"f": ["1"], "g": ["1"], "h": ["1"]}}`, Body,
			"has 6 keys in one alternative; the limit is 5"},
		{"body $key nested", `{"a": {"$key": ["x"]}}`, Body, `key "a.$key": $key is allowed only at the top level`},

		{"$key number", `{"$key": [5]}`, Attributes, `key "$key": $key is a string; number 5 cannot match it`},
		{"$key numeric", `{"$key": [{"numeric": [">", 5]}]}`, Attributes,
			`key "$key": $key takes exact strings and anything-but, equals-ignore-case, prefix, suffix; not "numeric"`},
		{"$key exists", `{"$key": [{"exists": true}]}`, Attributes, `$key takes exact strings and`},
		{"$key anything-but number", `{"$key": [{"anything-but": [1]}]}`, Attributes, `anything-but: $key is a string; number 1 cannot match it`},
		{"$key boolean", `{"$key": [true]}`, Body, `key "$key": true cannot match a string`},
	} {
		t.Run(c.name, func(t *testing.T) {
			p, err := Parse([]byte(c.policy), c.scope)
			if err == nil {
				t.Fatalf("Parse(%.80s) = %s, want an error containing %q", c.policy, p, c.want)
			}
			if !strings.Contains(err.Error(), c.want) {
				t.Errorf("Parse(%.80s): %v\nwant it to contain %q", c.policy, err, c.want)
			}
			var perr *Error
			if !errors.As(err, &perr) {
				t.Errorf("error %T is not an *Error", err)
			}
		})
	}
}

func TestParseAcceptsTheLimits(t *testing.T) {
	for _, policy := range []string{
		`{"a": ["1"], "b": ["1"], "c": ["1"], "d": ["1"], "e": ["1"]}`,
		`{"a": ["1","2","3","4","5","6"], "b": ["1","2","3","4","5"], "c": ["1","2","3","4","5"]}`,
		`{"price": [1000000000, -1000000000, 0.00001, 1.5e-4, 12345e-5, 1e9]}`,
		`{"price": [{"numeric": [">=", 5, "<=", 5]}]}`,
	} {
		if _, err := Parse([]byte(policy), Attributes); err != nil {
			t.Errorf("Parse(%s): %v", policy, err)
		}
	}
}

func TestParseWrapsTheJSONError(t *testing.T) {
	_, err := Parse([]byte(`{"a": [}`), Attributes)
	var perr *Error
	if !errors.As(err, &perr) || perr.Err == nil || errors.Unwrap(err) != perr.Err {
		t.Fatalf("Parse: %v, want an *Error wrapping the JSON syntax error", err)
	}
}

func TestParseScope(t *testing.T) {
	for name, want := range map[string]Scope{"": Attributes, "MessageAttributes": Attributes, "MessageBody": Body} {
		if got, err := ParseScope(name); err != nil || got != want {
			t.Errorf("ParseScope(%q) = %v, %v; want %v", name, got, err, want)
		}
		if want.String() != name && name != "" {
			t.Errorf("%v.String() = %q, want %q", want, want.String(), name)
		}
	}
	if _, err := ParseScope("Body"); err == nil || !strings.Contains(err.Error(), `scope "Body" is not MessageAttributes or MessageBody`) {
		t.Errorf("ParseScope(Body): %v", err)
	}
	if _, err := Parse([]byte(`{"a": ["x"]}`), Scope(7)); err == nil || !strings.Contains(err.Error(), "scope Scope(7)") {
		t.Errorf("Parse with Scope(7): %v", err)
	}
}

func TestCanonical(t *testing.T) {
	for policy, want := range map[string]string{
		`{ "b" : ["x"],"a":[ 1.50, 3e2, -0 ] }`:                 `{"a":[1.5,300,0],"b":["x"]}`,
		`{"p": [{"numeric": [">", 0, "<=", 1.5E2]}]}`:           `{"p":[{"numeric":[">",0,"<=",150]}]}`,
		`{"$or": [{"b": ["<&>"]}, {"a": [{"exists": false}]}]}`: `{"$or":[{"b":["<&>"]},{"a":[{"exists":false}]}]}`,
	} {
		p, err := Parse([]byte(policy), Attributes)
		if err != nil {
			t.Fatalf("Parse(%s): %v", policy, err)
		}
		if p.String() != want {
			t.Errorf("Parse(%s).String() = %s, want %s", policy, p, want)
		}
	}
}
