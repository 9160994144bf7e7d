package filter

import "testing"

// A typical policy: three keys, mixed conditions.
const benchPolicy = `{"type": ["order.created", "order.paid"], "region": [{"prefix": "eu-"}],` +
	` "total": [{"numeric": [">", 0, "<=", 500]}]}`

// BenchmarkMatch matches the typical policy against headers and against a
// JSON body of about 300 bytes with the fields spread among others.
func BenchmarkMatch(b *testing.B) {
	b.Run("attributes", func(b *testing.B) {
		p := mustParse(b, benchPolicy, Attributes)
		e := Event{Key: "orders/42", Headers: map[string]string{
			"type": "order.paid", "region": "eu-west-1", "total": "129.95",
			"trace-id": "4bf92f3577b34da6a3ce929d0e0e4736", "content-type": "application/json",
		}}
		benchMatch(b, p, e)
	})
	b.Run("attributes/array", func(b *testing.B) {
		p := mustParse(b, benchPolicy, Attributes)
		e := Event{Key: "orders/42", Headers: map[string]string{
			"type": `["order.created", "order.paid"]`, "region": "eu-west-1", "total": "129.95",
		}}
		benchMatch(b, p, e)
	})
	b.Run("body", func(b *testing.B) {
		p := mustParse(b, benchPolicy, Body)
		e := Event{Key: "orders/42", Payload: []byte(`{"id": "0b7c6f9e-5d1a-4c1e-9a57-3c2b1e0d9f11",` +
			` "type": "order.paid", "customer": {"id": 81723, "name": "Ada Lovelace", "tags": ["vip", "newsletter"]},` +
			` "lines": [{"sku": "BK-1", "qty": 1, "price": 99.95}, {"sku": "BK-2", "qty": 2, "price": 15}],` +
			` "region": "eu-west-1", "total": 129.95, "currency": "EUR", "created": "2026-11-26T14:00:00Z"}`)}
		benchMatch(b, p, e)
	})
	b.Run("body/nested", func(b *testing.B) {
		p := mustParse(b, `{"order": {"type": ["order.paid"], "total": [{"numeric": [">", 100]}]}, "region": [{"prefix": "eu-"}]}`, Body)
		e := Event{Payload: []byte(`{"region": "eu-west-1", "order": {"id": 7, "type": "order.paid", "total": 129.95,` +
			` "lines": [{"sku": "BK-1"}, {"sku": "BK-2"}]}}`)}
		benchMatch(b, p, e)
	})
}

func benchMatch(b *testing.B, p *Policy, e Event) {
	b.Helper()
	if !p.Match(e) {
		b.Fatal("the benchmark's event does not match")
	}
	b.ReportAllocs()
	for b.Loop() {
		p.Match(e)
	}
}

func mustParse(tb testing.TB, policy string, scope Scope) *Policy {
	tb.Helper()
	p, err := Parse([]byte(policy), scope)
	if err != nil {
		tb.Fatal(err)
	}
	return p
}

func BenchmarkParse(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Parse([]byte(benchPolicy), Attributes); err != nil {
			b.Fatal(err)
		}
	}
}
