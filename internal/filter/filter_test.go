package filter

import (
	"testing"
)

// headers builds an event's headers from name, value pairs.
func headers(kv ...string) Event {
	h := make(map[string]string, len(kv)/2)
	for i := 0; i+1 < len(kv); i += 2 {
		h[kv[i]] = kv[i+1]
	}
	return Event{Headers: h}
}

func body(json string) Event { return Event{Payload: []byte(json)} }

type matchCase struct {
	name   string
	policy string
	event  Event
	want   bool
}

// runMatches parses each case's policy with scope and checks Match, then
// checks that the canonical form matches the same way.
func runMatches(t *testing.T, scope Scope, cases []matchCase) {
	t.Helper()
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p, err := Parse([]byte(c.policy), scope)
			if err != nil {
				t.Fatalf("Parse(%s): %v", c.policy, err)
			}
			if got := p.Match(c.event); got != c.want {
				t.Errorf("policy %s, event %+v: Match = %v, want %v", c.policy, c.event, got, c.want)
			}
			again, err := Parse([]byte(p.String()), scope)
			if err != nil {
				t.Fatalf("canonical %s does not parse: %v", p.String(), err)
			}
			if got := again.Match(c.event); got != c.want {
				t.Errorf("canonical %s: Match = %v, want %v", p.String(), got, c.want)
			}
		})
	}
}

// The SNS documentation's examples for message attributes, each a policy
// and a message it does or does not let through. A String.Array attribute
// is a header holding a JSON array; a Number attribute is a header holding
// the number's text.
func TestMatchAttributesDocExamples(t *testing.T) {
	const (
		interests  = `{"customer_interests": ["rugby", "tennis"]}`
		notSports  = `{"customer_interests": [{"anything-but": ["rugby", "tennis"]}]}`
		notBas     = `{"event": [{"anything-but": {"prefix": "order-"}}]}`
		prefixBas  = `{"customer_interests": [{"prefix": "bas"}]}`
		suffixBall = `{"customer_interests": [{"suffix": "ball"}]}`
		ignoreCase = `{"customer_interests": [{"equals-ignore-case": "tennis"}]}`
		priceIs    = `{"price_usd": [{"numeric": ["=", 301.5]}]}`
		notPrices  = `{"price": [{"anything-but": [100, 500]}]}`
		negative   = `{"price_usd": [{"numeric": ["<", 0]}]}`
		upTo150    = `{"price_usd": [{"numeric": [">", 0, "<=", 150]}]}`
		hasStore   = `{"store": [{"exists": true}]}`
		noStore    = `{"store": [{"exists": false}]}`
		and        = `{"customer_interests": ["rugby"], "price_usd": [{"numeric": [">", 100]}]}`
		or         = `{"customer_interests": ["rugby", "football", "baseball"]}`
		orOp       = `{"source": ["aws.cloudwatch"], "$or": [{"metricName": ["CPUUtilization"]}, {"namespace": ["AWS/EC2"]}]}`
		mixed      = `{"store": ["example_corp"], "event": [{"anything-but": "order_cancelled"}],` +
			` "customer_interests": ["rugby", "football", "baseball"], "price_usd": [{"numeric": [">=", 100]}]}`
	)
	both := headers("store", "fans", "customer_interests", `["baseball", "basketball"]`)
	runMatches(t, Attributes, []matchCase{
		{"exact/rugby", interests, headers("customer_interests", "rugby"), true},
		{"exact/tennis", interests, headers("customer_interests", "tennis"), true},
		{"exact/array", interests, headers("customer_interests", `["rugby", "tennis"]`), true},
		{"exact/baseball", interests, headers("customer_interests", "baseball"), false},
		{"exact/array baseball", interests, headers("customer_interests", `["baseball"]`), false},
		{"exact/case differs", interests, headers("customer_interests", "Rugby"), false},

		{"anything-but/baseball", notSports, headers("customer_interests", "baseball"), true},
		{"anything-but/football", notSports, headers("customer_interests", "football"), true},
		{"anything-but/array with one other", notSports, headers("customer_interests", `["rugby", "baseball"]`), true},
		{"anything-but/rugby", notSports, headers("customer_interests", "rugby"), false},
		{"anything-but/array of listed", notSports, headers("customer_interests", `["rugby", "tennis"]`), false},
		{"anything-but/absent", notSports, headers("other", "x"), false},

		{"anything-but prefix/other", notBas, headers("event", "data-entry"), true},
		{"anything-but prefix/prefixed", notBas, headers("event", "order-created"), false},

		{"prefix/baseball", prefixBas, headers("customer_interests", "baseball"), true},
		{"prefix/basketball", prefixBas, headers("customer_interests", "basketball"), true},
		{"prefix/rugby", prefixBas, headers("customer_interests", "rugby"), false},

		{"suffix/baseball", suffixBall, headers("customer_interests", "baseball"), true},
		{"suffix/rugby", suffixBall, headers("customer_interests", "rugby"), false},

		{"ignore case/TENNIS", ignoreCase, headers("customer_interests", "TENNIS"), true},
		{"ignore case/Tennis", ignoreCase, headers("customer_interests", "Tennis"), true},
		{"ignore case/rugby", ignoreCase, headers("customer_interests", "rugby"), false},

		{"numeric =/301.5", priceIs, headers("price_usd", "301.5"), true},
		{"numeric =/3.015e2", priceIs, headers("price_usd", "3.015e2"), true},
		{"numeric =/301.6", priceIs, headers("price_usd", "301.6"), false},
		{"numeric =/not a number", priceIs, headers("price_usd", "301.5 USD"), false},

		{"anything-but numbers/101", notPrices, headers("price", "101"), true},
		{"anything-but numbers/100.1", notPrices, headers("price", "100.1"), true},
		{"anything-but numbers/array with 50", notPrices, headers("price", "[100, 50]"), true},
		{"anything-but numbers/100", notPrices, headers("price", "100"), false},
		{"anything-but numbers/100.0", notPrices, headers("price", "100.0"), false},

		{"numeric </-1", negative, headers("price_usd", "-1"), true},
		{"numeric </0", negative, headers("price_usd", "0"), false},
		{"range/150", upTo150, headers("price_usd", "150"), true},
		{"range/0.5", upTo150, headers("price_usd", "0.5"), true},
		{"range/0", upTo150, headers("price_usd", "0"), false},
		{"range/150.00001", upTo150, headers("price_usd", "150.00001"), false},
		{"range/hex is not a number", upTo150, headers("price_usd", "0x10"), false},

		{"exists true/present", hasStore, both, true},
		{"exists true/absent", hasStore, headers("customer_interests", `["baseball", "basketball"]`), false},
		{"exists false/present", noStore, both, false},
		{"exists false/absent", noStore, headers("customer_interests", `["baseball", "basketball"]`), true},
		{"exists false/no headers", noStore, Event{}, true},

		{"and/both", and, headers("customer_interests", "rugby", "price_usd", "100.5"), true},
		{"and/one", and, headers("customer_interests", "rugby", "price_usd", "99"), false},
		{"and/absent", and, headers("customer_interests", "rugby"), false},

		{"or/football", or, headers("customer_interests", "football"), true},
		{"or/tennis", or, headers("customer_interests", "tennis"), false},

		{"$or/first", orOp, headers("source", "aws.cloudwatch", "metricName", "CPUUtilization"), true},
		{"$or/second", orOp, headers("source", "aws.cloudwatch", "namespace", "AWS/EC2"), true},
		{"$or/neither", orOp, headers("source", "aws.cloudwatch", "metricName", "ReadLatency"), false},
		{"$or/and fails", orOp, headers("source", "aws.ec2", "namespace", "AWS/EC2"), false},

		{"mixed/all hold", mixed, headers("store", "example_corp", "event", "order_placed",
			"customer_interests", "soccer, rugby", "price_usd", "210.75"), false},
		{"mixed/array", mixed, headers("store", "example_corp", "event", "order_placed",
			"customer_interests", `["soccer", "rugby"]`, "price_usd", "210.75"), true},
		{"mixed/cancelled", mixed, headers("store", "example_corp", "event", "order_cancelled",
			"customer_interests", "rugby", "price_usd", "210.75"), false},
	})
}

// The same examples where SNS shows a message body.
func TestMatchBodyDocExamples(t *testing.T) {
	const (
		interests = `{"customer_interests": ["rugby", "tennis"]}`
		priceIs   = `{"price_usd": [{"numeric": ["=", 301.5]}]}`
		notPrices = `{"price": [{"anything-but": [100, 500]}]}`
		hasStore  = `{"store": [{"exists": true}]}`
		noStore   = `{"store": [{"exists": false}]}`
	)
	runMatches(t, Body, []matchCase{
		{"exact/rugby", interests, body(`{"customer_interests": "rugby"}`), true},
		{"exact/tennis", interests, body(`{"customer_interests": "tennis"}`), true},
		{"exact/array", interests, body(`{"customer_interests": ["baseball", "tennis"]}`), true},
		{"exact/baseball", interests, body(`{"customer_interests": "baseball"}`), false},
		{"numeric =/301.5", priceIs, body(`{"price_usd": 301.5}`), true},
		{"numeric =/3.015e2", priceIs, body(`{"price_usd": 3.015e2}`), true},
		{"numeric =/a string is not a number", priceIs, body(`{"price_usd": "301.5"}`), false},
		{"anything-but/101", notPrices, body(`{"price": 101}`), true},
		{"anything-but/100.1", notPrices, body(`{"price": 100.1}`), true},
		{"anything-but/array with 50", notPrices, body(`{"price": [100, 50]}`), true},
		{"anything-but/100", notPrices, body(`{"price": 100}`), false},
		{"exists true/present", hasStore, body(`{"store": "fans", "customer_interests": ["baseball", "basketball"]}`), true},
		{"exists true/absent", hasStore, body(`{"customer_interests": ["baseball", "basketball"]}`), false},
		{"exists false/present", noStore, body(`{"store": "fans"}`), false},
		{"exists false/absent", noStore, body(`{"customer_interests": ["baseball", "basketball"]}`), true},
	})
}
