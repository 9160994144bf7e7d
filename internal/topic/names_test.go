package topic

import (
	"errors"
	"strings"
	"testing"
)

// wantInvalid fails unless err wraps ErrInvalid and its message contains
// every one of want.
func wantInvalid(t *testing.T, err error, want ...string) {
	t.Helper()
	if err == nil {
		t.Fatalf("got no error, want one mentioning %q", want)
	}
	if !errors.Is(err, ErrInvalid) {
		t.Errorf("error %q does not wrap ErrInvalid", err)
	}
	for _, w := range want {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("error %q does not mention %q", err, w)
		}
	}
}

func TestValidateName(t *testing.T) {
	for _, name := range []string{"a", "Z", "0", "orders", "my-topic_2", strings.Repeat("x", MaxNameLen)} {
		if err := ValidateName(name); err != nil {
			t.Errorf("ValidateName(%q) = %v, want nil", name, err)
		}
	}
	const rule = "use 1-128 characters from A-Z a-z 0-9 _ -"
	for _, tc := range []struct {
		name string
		want []string
	}{
		{"", []string{`""`, "a name is required", rule}},
		{"a.b", []string{`"a.b"`, `'.' is not allowed`, rule, "dots are reserved for shard names"}},
		{"a/b", []string{`'/' is not allowed`, rule}},
		{"a b", []string{`' ' is not allowed`, rule}},
		{"café", []string{`'é' is not allowed`, rule}},
		{"a\x00", []string{`'\x00' is not allowed`}},
		{strings.Repeat("x", MaxNameLen+1), []string{"(129 characters)", rule}},
		{strings.Repeat("y", 10000), []string{"(10000 characters)", "..."}},
	} {
		err := ValidateName(tc.name)
		wantInvalid(t, err, tc.want...)
		if err != nil && len(err.Error()) > 400 {
			t.Errorf("error for a %d-byte name is %d bytes long; long names must be elided", len(tc.name), len(err.Error()))
		}
	}
}

func TestShardName(t *testing.T) {
	for _, tc := range []struct {
		topic string
		i     int
		name  string
	}{
		{"orders", 0, "orders"},
		{"orders", 1, "orders.1"},
		{"orders", 10, "orders.10"},
		{"a-b_c", MaxShards - 1, "a-b_c.1023"},
	} {
		if got := ShardName(tc.topic, tc.i); got != tc.name {
			t.Errorf("ShardName(%q, %d) = %q, want %q", tc.topic, tc.i, got, tc.name)
		}
		topic, i, err := ParseShardName(tc.name)
		if err != nil || topic != tc.topic || i != tc.i {
			t.Errorf("ParseShardName(%q) = %q, %d, %v; want %q, %d, nil", tc.name, topic, i, err, tc.topic, tc.i)
		}
	}
}

func TestParseShardNameErrors(t *testing.T) {
	const form = "TOPIC.N for shard N"
	for _, tc := range []struct {
		in   string
		want []string
	}{
		{"", []string{"invalid shard name", "a name is required", form}},
		{".1", []string{"invalid shard name", form}},
		{"a.0", []string{`"a.0"`, "1-1023 without leading zeros", form}},
		{"a.01", []string{"without leading zeros"}},
		{"a.1024", []string{"1-1023"}},
		{"a.-1", []string{"1-1023"}},
		{"a.+1", []string{"1-1023"}},
		{"a.", []string{"1-1023"}},
		{"a.1.2", []string{"1-1023"}},
		{"a b.1", []string{`' ' is not allowed`}},
		{"a.99999999999999999999", []string{"1-1023"}},
	} {
		_, _, err := ParseShardName(tc.in)
		wantInvalid(t, err, tc.want...)
	}
}

func TestEventID(t *testing.T) {
	for _, tc := range []struct {
		topic  string
		shard  int
		offset uint64
		id     string
	}{
		{"orders", 0, 0, "orders/0/0"},
		{"orders", 3, 1042, "orders/3/1042"},
		{"x", MaxShards - 1, ^uint64(0), "x/1023/18446744073709551615"},
	} {
		if got := EventID(tc.topic, tc.shard, tc.offset); got != tc.id {
			t.Errorf("EventID(%q, %d, %d) = %q, want %q", tc.topic, tc.shard, tc.offset, got, tc.id)
		}
		topic, shard, offset, err := ParseEventID(tc.id)
		if err != nil || topic != tc.topic || shard != tc.shard || offset != tc.offset {
			t.Errorf("ParseEventID(%q) = %q, %d, %d, %v", tc.id, topic, shard, offset, err)
		}
	}
}

func TestParseEventIDErrors(t *testing.T) {
	const form = "TOPIC/SHARD/OFFSET"
	for _, tc := range []struct {
		in   string
		want []string
	}{
		{"", []string{`invalid event id ""`, "want 3 parts", "got 1", form}},
		{"orders", []string{"got 1", form}},
		{"orders/1", []string{"got 2", form}},
		{"orders/1/2/3", []string{"got 4", form}},
		{"/1/2", []string{"a name is required"}},
		{"or.ders/1/2", []string{`'.' is not allowed`}},
		{"orders//2", []string{"shard must be a number 0-1023", form}},
		{"orders/1024/2", []string{"shard must be a number 0-1023"}},
		{"orders/01/2", []string{"without leading zeros"}},
		{"orders/-1/2", []string{"shard must be a number"}},
		{"orders/1/", []string{"offset must be a decimal number", form}},
		{"orders/1/007", []string{"without leading zeros"}},
		{"orders/1/-5", []string{"offset must be a decimal number"}},
		{"orders/1/+5", []string{"offset must be a decimal number"}},
		{"orders/1/18446744073709551616", []string{"offset must be a decimal number"}},
		{"orders/1/r5", []string{"offset must be a decimal number"}},
		{NonPersistentEventID("orders", 1, 3, 7), []string{`"orders/1/np3.7"`, "non-persistent topic", "never stored"}},
	} {
		_, _, _, err := ParseEventID(tc.in)
		wantInvalid(t, err, tc.want...)
	}
}

// TestParseAckID: an ack names an event id or a receipt, and each parses
// back to what made it.
func TestParseAckID(t *testing.T) {
	for _, tc := range []struct {
		id            string
		shard         int
		offset, lease uint64
	}{
		{"orders/3/1042", 3, 1042, 0},
		{Receipt("orders/3/1042", 7), 3, 1042, 7},
		{Receipt("orders/0/0", ^uint64(0)), 0, 0, ^uint64(0)},
	} {
		topic, shard, offset, lease, err := ParseAckID(tc.id)
		if err != nil || topic != "orders" || shard != tc.shard || offset != tc.offset || lease != tc.lease {
			t.Errorf("ParseAckID(%q) = %q, %d, %d, %d, %v; want orders, %d, %d, %d", tc.id, topic, shard, offset, lease, err, tc.shard, tc.offset, tc.lease)
		}
	}
	for _, tc := range []struct {
		in   string
		want []string
	}{
		{"orders/1/5.0", []string{`invalid receipt "orders/1/5.0"`, "the lease not 0"}},
		{"orders/1/5.", []string{"invalid receipt", "OFFSET.LEASE"}},
		{"orders/1/.7", []string{"invalid receipt", "OFFSET.LEASE"}},
		{"orders/1/5.07", []string{"invalid receipt", "without leading zeros"}},
		{"orders/1/5.7.0", []string{"invalid receipt", "the subscription, if any, not 0"}},
		{"orders/1/5.7.1.2", []string{"invalid receipt"}},
		{"orders/1/5.7.01", []string{"invalid receipt", "without leading zeros"}},
		{"orders/1/r5", []string{"offset must be a decimal number"}},
		{"orders/1", []string{"got 2", "or a receipt"}},
		{NonPersistentEventID("orders", 1, 3, 7), []string{"non-persistent topic"}},
	} {
		_, _, _, _, err := ParseAckID(tc.in)
		wantInvalid(t, err, tc.want...)
	}
}

// TestSubscriptionReceipt: a receipt names the subscription it was
// delivered for, but for the default subscription's, which keep the form
// they had before subscriptions.
func TestSubscriptionReceipt(t *testing.T) {
	for _, tc := range []struct {
		sub  uint64
		want string
	}{
		{0, "orders/3/1042.7"},
		{5, "orders/3/1042.7.5"},
		{^uint64(0), "orders/3/1042.7.18446744073709551615"},
	} {
		r := SubscriptionReceipt("orders/3/1042", 7, tc.sub)
		if r != tc.want {
			t.Errorf("SubscriptionReceipt(orders/3/1042, 7, %d) = %q, want %q", tc.sub, r, tc.want)
		}
		want := AckID{Topic: "orders", Shard: 3, Offset: 1042, Lease: 7, Subscription: tc.sub}
		if got, err := ParseAck(r); err != nil || got != want {
			t.Errorf("ParseAck(%q) = %+v, %v; want %+v", r, got, err, want)
		}
		if _, _, offset, lease, err := ParseAckID(r); err != nil || offset != 1042 || lease != 7 {
			t.Errorf("ParseAckID(%q) = offset %d, lease %d, %v; want 1042, 7", r, offset, lease, err)
		}
	}
	if got, err := ParseAck("orders/3/1042"); err != nil || got != (AckID{Topic: "orders", Shard: 3, Offset: 1042}) {
		t.Errorf("ParseAck of an event id = %+v, %v", got, err)
	}
}

// DeliveryNames names a delivery as EventID and SubscriptionReceipt do,
// in one allocation, whatever the lengths of its parts.
func TestDeliveryNames(t *testing.T) {
	long := strings.Repeat("t", MaxNameLen)
	for _, tc := range []struct {
		topic              string
		shard              int
		offset, lease, sub uint64
	}{
		{"orders", 3, 1042, 7, 0},
		{"orders", 0, 0, 1, 5},
		{long, MaxShards - 1, ^uint64(0), ^uint64(0), ^uint64(0)},
	} {
		id, receipt := DeliveryNames(tc.topic, tc.shard, tc.offset, tc.lease, tc.sub)
		wantID := EventID(tc.topic, tc.shard, tc.offset)
		if want := SubscriptionReceipt(wantID, tc.lease, tc.sub); id != wantID || receipt != want {
			t.Errorf("DeliveryNames(%+v) = %q, %q; want %q, %q", tc, id, receipt, wantID, want)
		}
		allocs := testing.AllocsPerRun(100, func() {
			id, receipt = DeliveryNames(tc.topic, tc.shard, tc.offset, tc.lease, tc.sub)
		})
		if allocs != 1 {
			t.Errorf("DeliveryNames(%+v) takes %v allocations, want 1", tc, allocs)
		}
	}
}

func TestNonPersistentEventID(t *testing.T) {
	for _, tc := range []struct {
		epoch, n uint64
		want     string
	}{
		{1, 1, "live/2/np1.1"},
		{12, 345, "live/2/np12.345"},
		{^uint64(0), ^uint64(0), "live/2/np18446744073709551615.18446744073709551615"},
	} {
		if got := NonPersistentEventID("live", 2, tc.epoch, tc.n); got != tc.want {
			t.Errorf("NonPersistentEventID(live, 2, %d, %d) = %q, want %q", tc.epoch, tc.n, got, tc.want)
		}
	}
	// Epoch and counter are separated, so that no two pairs give one id.
	if NonPersistentEventID("t", 0, 1, 12) == NonPersistentEventID("t", 0, 11, 2) {
		t.Error("epochs 1 and 11 give the same ids")
	}
}

func TestReservationID(t *testing.T) {
	id := ReservationID("orders", 3, 17)
	if id != "orders/3/r17" {
		t.Fatalf("ReservationID = %q, want orders/3/r17", id)
	}
	topic, shard, n, err := ParseReservationID(id)
	if err != nil || topic != "orders" || shard != 3 || n != 17 {
		t.Errorf("ParseReservationID(%q) = %q, %d, %d, %v", id, topic, shard, n, err)
	}
	topic, shard, n, err = ParseReservationID("t/0/r18446744073709551615")
	if err != nil || topic != "t" || shard != 0 || n != ^uint64(0) {
		t.Errorf("ParseReservationID(max) = %q, %d, %d, %v", topic, shard, n, err)
	}
}

func TestParseReservationIDErrors(t *testing.T) {
	const form = "TOPIC/SHARD/rN"
	for _, tc := range []struct {
		in   string
		want []string
	}{
		{"", []string{"invalid reservation id", "want 3 parts", form}},
		{"orders/3/17", []string{"'r' followed by a number", form}},
		{"orders/3/r", []string{"decimal without leading zeros", form}},
		{"orders/3/r01", []string{"without leading zeros"}},
		{"orders/3/rx", []string{"decimal"}},
		{"orders/3/R1", []string{"'r' followed by a number"}},
		{"orders/3000/r1", []string{"shard must be a number 0-1023"}},
		{"a.b/3/r1", []string{`'.' is not allowed`}},
	} {
		_, _, _, err := ParseReservationID(tc.in)
		wantInvalid(t, err, tc.want...)
	}
}

// TestParseDecimal: the canonical decimal form alone, up to the bound.
func TestParseDecimal(t *testing.T) {
	for _, c := range []struct {
		s   string
		max uint64
		n   uint64
		ok  bool
	}{
		{"0", 0, 0, true}, {"1", 0, 0, false}, {"9", 9, 9, true}, {"10", 9, 0, false},
		{"1023", 1023, 1023, true}, {"1024", 1023, 0, false}, {"01", 100, 0, false}, {"", 100, 0, false},
		{"1a", 100, 0, false}, {"-1", 100, 0, false}, {"+1", 100, 0, false},
		{"18446744073709551615", ^uint64(0), ^uint64(0), true},
		{"18446744073709551616", ^uint64(0), 0, false},
		{"99999999999999999999", ^uint64(0), 0, false},
	} {
		if n, ok := parseDecimal(c.s, c.max); n != c.n || ok != c.ok {
			t.Errorf("parseDecimal(%q, %d) = %d, %v; want %d, %v", c.s, c.max, n, ok, c.n, c.ok)
		}
	}
}
