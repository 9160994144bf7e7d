package node

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"herald/internal/shard"
	"herald/internal/topic"
)

// pullSubscription creates a pull subscription of a topic: its cursors
// are on every shard when it returns.
func pullSubscription(t *testing.T, n *Node, topicName, name string) Subscription {
	t.Helper()
	sub, err := n.CreateSubscription(context.Background(), topicName, name, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !hasCursor(t, n, topicName, sub.ID) {
		t.Fatalf("subscription %q was created without its cursor", name)
	}
	return sub
}

// fetchFrom fetches up to 100 events of a subscription of a topic.
func fetchFrom(t *testing.T, n *Node, topicName, sub string, visibility time.Duration) []Delivery {
	t.Helper()
	res, err := n.Fetch(context.Background(), topicName, FetchOptions{Max: 100, Visibility: visibility, Subscription: sub})
	if err != nil {
		t.Fatalf("fetch from subscription %q of %s: %v", sub, topicName, err)
	}
	return res.Deliveries
}

func sortedIDs(ds []Delivery) []string {
	ids := make([]string, len(ds))
	for i, d := range ds {
		ids[i] = d.ID
	}
	slices.Sort(ids)
	return ids
}

func receipts(ds []Delivery) []string {
	out := make([]string, len(ds))
	for i, d := range ds {
		out[i] = d.Receipt
	}
	return out
}

// Two pull subscriptions of a topic each get every event, under leases of
// their own, and an ack in one leaves the events pending in the other and
// in the default subscription.
func TestPullSubscriptionsConsumeIndependently(t *testing.T) {
	ctx := context.Background()
	n := openNode(t, testConfig(t.TempDir()))
	mustCreate(t, n, "orders", map[string]string{"shards": "2"})
	billing := pullSubscription(t, n, "orders", "billing")
	pullSubscription(t, n, "orders", "audit")
	ids := publish(t, n, "orders", ev("a", "1"), ev("b", "2"), ev("c", "3"), ev("d", "4"))
	slices.Sort(ids)

	got := fetchFrom(t, n, "orders", "billing", time.Minute)
	if !slices.Equal(sortedIDs(got), ids) {
		t.Fatalf("billing fetched %v, want %v", sortedIDs(got), ids)
	}
	for _, d := range got {
		a, err := topic.ParseAck(d.Receipt)
		if err != nil || a.Subscription != billing.ID || a.Offset != d.Offset {
			t.Fatalf("receipt %q of %s: %+v, %v; want subscription %d", d.Receipt, d.ID, a, err, billing.ID)
		}
	}
	// Billing's leases hide nothing from audit, nor from the default
	// subscription.
	audit := fetchFrom(t, n, "orders", "audit", 100*time.Millisecond)
	if !slices.Equal(sortedIDs(audit), ids) {
		t.Fatalf("audit, while billing holds every event, fetched %v, want %v", sortedIDs(audit), ids)
	}
	if def := fetchFrom(t, n, "orders", "", time.Minute); !slices.Equal(sortedIDs(def), ids) {
		t.Fatalf("the default subscription fetched %v, want %v", sortedIDs(def), ids)
	}

	// A receipt acks in its own subscription, named or not.
	if count, err := n.Ack(ctx, receipts(got[:2])); err != nil || count != 2 {
		t.Fatalf("ack of billing's receipts = %d, %v; want 2", count, err)
	}
	if count, err := n.AckSubscription(ctx, "billing", receipts(got[2:])); err != nil || count != 2 {
		t.Fatalf("ack of billing's receipts naming billing = %d, %v; want 2", count, err)
	}
	if ds := fetchFrom(t, n, "orders", "billing", time.Minute); len(ds) != 0 {
		t.Errorf("billing fetched %v after acking everything", sortedIDs(ds))
	}

	// Audit's leases expire: it has every event still.
	time.Sleep(150 * time.Millisecond)
	audit = fetchFrom(t, n, "orders", "audit", time.Minute)
	if !slices.Equal(sortedIDs(audit), ids) {
		t.Fatalf("audit, after billing acked everything, fetched %v, want %v", sortedIDs(audit), ids)
	}
	// A nack in audit, by id, ends audit's lease only.
	if err := n.NackSubscription(ctx, "audit", ids[:1]); err != nil {
		t.Fatal(err)
	}
	if ds := fetchFrom(t, n, "orders", "audit", time.Minute); !slices.Equal(sortedIDs(ds), ids[:1]) {
		t.Errorf("audit, after its nack of %s, fetched %v", ids[0], sortedIDs(ds))
	}
	// Event ids ack in the subscription named.
	if count, err := n.AckSubscription(ctx, "audit", ids); err != nil || count != 4 {
		t.Fatalf("ack in audit of every id = %d, %v; want 4", count, err)
	}
	time.Sleep(10 * time.Millisecond)
	if ds := fetchFrom(t, n, "orders", "audit", time.Minute); len(ds) != 0 {
		t.Errorf("audit fetched %v after acking everything", sortedIDs(ds))
	}
	st, err := n.TopicStats(ctx, "orders")
	if err != nil {
		t.Fatal(err)
	}
	if st.Total.Stats.Events != 4 {
		t.Errorf("the default subscription has %d events pending, want 4: acks in other subscriptions are not its", st.Total.Stats.Events)
	}
}

// Fetches, acks and nacks of a subscription fail with errors that say
// what is wrong: an unknown subscription, a push subscription, a receipt
// of another subscription.
func TestPullSubscriptionErrors(t *testing.T) {
	ctx := context.Background()
	n := openNode(t, testConfig(t.TempDir()))
	mustCreate(t, n, "orders", map[string]string{"shards": "1"})
	pullSubscription(t, n, "orders", "billing")
	pullSubscription(t, n, "orders", "audit")
	if _, err := n.CreateSubscription(ctx, "orders", "hooks", map[string]string{"push_endpoint": "http://127.0.0.1:1/events"}); err != nil {
		t.Fatal(err)
	}
	publish(t, n, "orders", ev("a", "1"))
	got := fetchFrom(t, n, "orders", "billing", time.Minute)
	if len(got) != 1 {
		t.Fatalf("billing fetched %v, want one event", sortedIDs(got))
	}

	fetchErr := func(sub string) error {
		_, err := n.Fetch(ctx, "orders", FetchOptions{Subscription: sub})
		return err
	}
	for _, tc := range []struct {
		name string
		err  error
		kind error
	}{
		{"fetch of an unknown subscription", fetchErr("nope"), ErrNotFound},
		{"fetch of a bad name", fetchErr("a.b"), ErrInvalid},
		{"fetch of a push subscription", fetchErr("hooks"), ErrFailedPrecondition},
		{"ack in an unknown subscription", errOf(n.AckSubscription(ctx, "nope", []string{got[0].ID})), ErrNotFound},
		{"ack of a receipt in another subscription", errOf(n.AckSubscription(ctx, "audit", receipts(got))), ErrInvalid},
		{"nack of a receipt in another subscription", n.NackSubscription(ctx, "audit", receipts(got)), ErrInvalid},
	} {
		if !errors.Is(tc.err, tc.kind) {
			t.Errorf("%s: %v, want %v", tc.name, tc.err, tc.kind)
		}
		t.Logf("%s: %v", tc.name, tc.err)
	}
	if err := fetchErr("hooks"); !errors.Is(err, ErrPushSubscription) {
		t.Errorf("fetch of a push subscription: %v, want ErrPushSubscription", err)
	}

	// A receipt of a deleted subscription names a subscription that is
	// no more.
	if err := n.DeleteSubscription(ctx, "orders", "billing"); err != nil {
		t.Fatal(err)
	}
	if _, err := n.Ack(ctx, receipts(got)); !errors.Is(err, ErrNotFound) {
		t.Errorf("ack of a receipt of a deleted subscription: %v, want ErrNotFound", err)
	}
}

// A subscription whose cursor a shard does not hold (it was created a
// moment ago, and the shard had no leader then) has nothing to fetch
// there, and an ack in it asks to retry; the node's cursor sync then
// starts the cursor.
func TestPullSubscriptionWithoutItsCursor(t *testing.T) {
	ctx := context.Background()
	n := openNode(t, testConfig(t.TempDir()))
	mustCreate(t, n, "orders", map[string]string{"shards": "1"})
	sub := pullSubscription(t, n, "orders", "late")
	ids := publish(t, n, "orders", ev("a", "1"))
	tr, _ := n.reg.lookup("orders")
	// The node's own cursor sync may start the cursor again at any
	// moment (it runs on the node's events): what is seen counts only if
	// the cursor is still missing after it was seen, and the cursor
	// sync, which alone starts it, cannot remove it again meanwhile.
	for attempt := 0; ; attempt++ {
		if attempt == 20 {
			t.Fatal("the cursor sync started the cursor again before every look, 20 times")
		}
		if _, err := n.proposeShard(ctx, tr.shards[0], &shard.Command{Op: shard.OpUnsubscribe, Subscription: sub.ID}); err != nil {
			t.Fatal(err)
		}
		ds := fetchFrom(t, n, "orders", "late", time.Minute)
		_, ackErr := n.AckSubscription(ctx, "late", ids)
		if hasCursor(t, n, "orders", sub.ID) {
			continue
		}
		if len(ds) != 0 {
			t.Errorf("fetch without the cursor = %v, want nothing", sortedIDs(ds))
		}
		if !errors.Is(ackErr, ErrUnavailable) {
			t.Errorf("ack without the cursor: %v, want ErrUnavailable (retry)", ackErr)
		}
		break
	}
	n.cursors.syncAll(ctx)
	if !hasCursor(t, n, "orders", sub.ID) {
		t.Fatal("the cursor sync did not start the missing cursor")
	}
	publish(t, n, "orders", ev("b", "2"))
	if ds := fetchFrom(t, n, "orders", "late", time.Minute); len(ds) != 1 {
		t.Errorf("after the sync, fetched %v; want the event published since", sortedIDs(ds))
	}
}

// hasCursor reports whether shard 0 of a topic holds subscription sub's
// cursor.
func hasCursor(t *testing.T, n *Node, topicName string, sub uint64) bool {
	t.Helper()
	tr, err := n.reg.lookup(topicName)
	if err != nil {
		t.Fatal(err)
	}
	var ok bool
	err = shardLog{n, tr.shards[0]}.View(context.Background(), func(m *shard.Machine) { _, ok = m.Cursor(sub) })
	if err != nil {
		t.Fatal(err)
	}
	return ok
}
