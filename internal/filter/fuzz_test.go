package filter

import (
	"encoding/json"
	"testing"
)

// FuzzParse checks that Parse never panics, that Match never panics on any
// event, and that a policy's canonical form parses to a policy that
// matches the same events.
func FuzzParse(f *testing.F) {
	for _, seed := range []struct {
		policy        string
		body          bool
		key, hdr, val string
		payload       string
	}{
		{`{"customer_interests": ["rugby", "tennis"]}`, false, "", "customer_interests", `["rugby"]`, ``},
		{`{"price": [{"numeric": [">", 0, "<=", 150]}], "$key": [{"prefix": "o"}]}`, false, "orders/1", "price", "150", ``},
		{`{"price": [{"anything-but": [100, 500]}]}`, true, "", "", "", `{"price": [100, 50]}`},
		{`{"a": {"b": [{"exists": false}], "$or": [{"c": [null]}, {"d": [true]}]}}`, true, "", "", "", `{"a": [{"c": null}, {"b": 1}]}`},
		{`{"s": [{"equals-ignore-case": "X"}, {"suffix": "y"}, {"anything-but": {"prefix": "z"}}]}`, false, "", "s", "zy", ``},
	} {
		f.Add([]byte(seed.policy), seed.body, seed.key, seed.hdr, seed.val, []byte(seed.payload))
	}
	f.Fuzz(func(t *testing.T, policy []byte, body bool, key, hdr, val string, payload []byte) {
		scope := Attributes
		if body {
			scope = Body
		}
		p, err := Parse(policy, scope)
		if err != nil {
			return
		}
		e := Event{Key: key, Headers: map[string]string{hdr: val}, Payload: payload}
		got := p.Match(e)
		again, err := Parse([]byte(p.String()), scope)
		if err != nil {
			t.Fatalf("canonical %s of %s does not parse: %v", p, policy, err)
		}
		if again.String() != p.String() {
			t.Fatalf("canonical %s parses to canonical %s", p, again)
		}
		if again.Match(e) != got {
			t.Fatalf("policy %s matches %+v: %v; its canonical %s: %v", policy, e, got, p, !got)
		}
	})
}

// FuzzScan checks that the scanner accepts exactly the JSON that json.Valid
// does, since Match relies on it alone to refuse a malformed payload.
func FuzzScan(f *testing.F) {
	for _, seed := range []string{
		`{"a": [1, -2.5e3, true, false, null, "x\u00e9\n"], "b": {}}`, `[]`, `[1,]`, `{"a" 1}`, `"\x"`,
		`01`, `1.`, `-`, `{"a":1}}`, "\"\x01\"", `nul`, `[1 2]`, `{,}`, ` 7 `,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, text []byte) {
		s := scanner{s: string(text)}
		if got, want := s.walk(nil, nil, nil), json.Valid(text); got != want {
			t.Fatalf("scanner says %q is valid: %v; json.Valid: %v", text, got, want)
		}
	})
}
