package node

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"herald/internal/shard"
	"herald/internal/topic"
)

// TestAckOfALapsedReceiptEndsNoOtherLease: a consumer whose lease expired
// and whose event was handed out again acks by receipt; the ack is not
// acted on, the event stays with its new holder, and the key's next event
// is not handed out until that holder acks. An ack by event id would have
// freed it at once.
func TestAckOfALapsedReceiptEndsNoOtherLease(t *testing.T) {
	n := openNode(t, testConfig(t.TempDir()))
	ctx := context.Background()
	mustCreate(t, n, "t", map[string]string{"shards": "1"})
	publish(t, n, "t", ev("a", "a1"), ev("a", "a2"))

	// Fetches of one event: a fetch of more would lease a's run, a1 and a2.
	first := fetch(t, n, "t", 1, 100*time.Millisecond)
	if len(first) != 1 || string(first[0].Event.Payload) != "a1" {
		t.Fatalf("first fetch = %v, want a1", payloads(first))
	}
	if _, _, offset, lease, err := topic.ParseAckID(first[0].Receipt); err != nil || lease == 0 || offset != first[0].Offset {
		t.Fatalf("receipt %q of %s: offset %d, lease %d, %v; want the event's offset and a lease", first[0].Receipt, first[0].ID, offset, lease, err)
	}
	time.Sleep(150 * time.Millisecond) // the lease expires
	second := fetch(t, n, "t", 1, time.Minute)
	if len(second) != 1 || second[0].ID != first[0].ID || second[0].Receipt == first[0].Receipt {
		t.Fatalf("fetch after the lease expired = %v, want a1 again under a new receipt", second)
	}

	count, err := n.Ack(ctx, []string{first[0].Receipt})
	var lapsed *LapsedError
	if !errors.As(err, &lapsed) || !slices.Equal(lapsed.Receipts, []string{first[0].Receipt}) || count != 0 {
		t.Fatalf("ack of the lapsed receipt = %d, %v; want 0 and a LapsedError naming it", count, err)
	}
	if err := n.Nack(ctx, []string{first[0].Receipt}); err != nil {
		t.Fatalf("nack of the lapsed receipt: %v", err)
	}
	if ds := fetch(t, n, "t", 10, time.Minute); len(ds) != 0 {
		t.Fatalf("fetch while the second consumer holds a1 handed out %v; the lapsed ack and nack must leave its lease", payloads(ds))
	}

	if count, err := n.Ack(ctx, []string{second[0].Receipt}); err != nil || count != 1 {
		t.Fatalf("ack of the current receipt = %d, %v; want 1", count, err)
	}
	if ds := fetch(t, n, "t", 10, time.Minute); len(ds) != 1 || string(ds[0].Event.Payload) != "a2" {
		t.Fatalf("fetch after a1 was acknowledged = %v, want a2", payloads(ds))
	}
	// Acking an acknowledged event's receipt again is accepted, and
	// counts nothing, like an id.
	if count, err := n.Ack(ctx, []string{second[0].Receipt}); err != nil || count != 0 {
		t.Fatalf("second ack of a1's receipt = %d, %v; want 0, nil", count, err)
	}
}

// TestAckOfAReceiptNobodyElseHolds: a receipt whose lease expired acks
// its event when no other consumer has taken it since, and a receipt's
// nack ends its own lease.
func TestAckOfAReceiptNobodyElseHolds(t *testing.T) {
	n := openNode(t, testConfig(t.TempDir()))
	ctx := context.Background()
	mustCreate(t, n, "t", map[string]string{"shards": "1"})
	publish(t, n, "t", ev("a", "a1"), ev("a", "a2"), ev("b", "b1"))

	ds := fetch(t, n, "t", 10, 100*time.Millisecond)
	if !slices.Equal(payloads(ds), []string{"a1", "a2", "b1"}) {
		t.Fatalf("first fetch = %v, want a1, a2 (a's run) and b1", payloads(ds))
	}
	time.Sleep(150 * time.Millisecond) // both leases expire; nobody fetches
	if count, err := n.Ack(ctx, []string{ds[0].Receipt}); err != nil || count != 1 {
		t.Fatalf("ack of an expired receipt nobody else holds = %d, %v; want 1", count, err)
	}
	b := fetch(t, n, "t", 10, time.Minute)
	if len(b) != 2 || string(b[0].Event.Payload) != "a2" || string(b[1].Event.Payload) != "b1" {
		t.Fatalf("fetch after the ack = %v, want a2 and b1", payloads(b))
	}
	if err := n.Nack(ctx, []string{b[1].Receipt}); err != nil {
		t.Fatal(err)
	}
	if again := fetch(t, n, "t", 10, time.Minute); len(again) != 1 || string(again[0].Event.Payload) != "b1" {
		t.Fatalf("fetch after nacking b1's receipt = %v, want b1", payloads(again))
	}
}

// TestAckNamesBadReceipts: a malformed receipt fails the call with a
// message saying the form.
func TestAckNamesBadReceipts(t *testing.T) {
	n := openNode(t, testConfig(t.TempDir()))
	mustCreate(t, n, "t", map[string]string{"shards": "1"})
	_, err := n.Ack(context.Background(), []string{"t/0/1.0"})
	if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "OFFSET.LEASE") {
		t.Fatalf("ack of t/0/1.0 = %v, want invalid, saying OFFSET.LEASE", err)
	}
}

// TestAckOfAReceiptOfNoEventLeavesNoLease: a receipt naming an offset
// never assigned fails the ack, saying so, and leaves nothing leased.
func TestAckOfAReceiptOfNoEventLeavesNoLease(t *testing.T) {
	n := openNode(t, testConfig(t.TempDir()))
	mustCreate(t, n, "t", map[string]string{"shards": "1"})
	publish(t, n, "t", ev("a", "a1"))
	_, err := n.Ack(context.Background(), []string{topic.Receipt("t/0/999", 5)})
	if !errors.Is(err, shard.ErrUnknownOffset) || !strings.Contains(err.Error(), "999") {
		t.Fatalf("ack of a receipt of offset 999 = %v, want an unknown-offset error naming it", err)
	}
	st, err := n.TopicStats(context.Background(), "t")
	if err != nil {
		t.Fatal(err)
	}
	if leased := st.Shards[0].Leased; leased != 0 {
		t.Fatalf("%d leases after the failed ack, want 0", leased)
	}
}
