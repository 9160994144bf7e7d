package controller

import (
	"bytes"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"herald/internal/topic"
)

func subAttrs(t *testing.T, changes map[string]string) *topic.SubscriptionAttributes {
	t.Helper()
	a, err := topic.NewSubscriptionAttributes(changes)
	if err != nil {
		t.Fatal(err)
	}
	return &a
}

func createSub(topicName, name string, a *topic.SubscriptionAttributes, time int64) Command {
	return Command{Op: OpCreateSubscription, Name: topicName, Subscription: name, SubscriptionAttributes: a, Time: time}
}

func subOp(op, topicName, name string, time int64) Command {
	return Command{Op: op, Name: topicName, Subscription: name, Time: time}
}

// mustApply applies c and fails on a rejection.
func mustApply(t *testing.T, s *State, c Command) Result {
	t.Helper()
	r := apply(t, s, c)
	if r.Err != nil {
		t.Fatalf("%s: %v", c.Op, r.Err)
	}
	return r
}

func TestSubscriptionLifecycle(t *testing.T) {
	s := New()
	mustApply(t, s, create("orders", attrs(t, map[string]string{"push_endpoint": "https://h/topic"}), 10))

	// A new topic has its default subscription, id 0.
	subs, err := s.Subscriptions("orders")
	if err != nil || len(subs) != 1 || subs[0].ID != 0 || subs[0].Name != "default" ||
		subs[0].Attributes.Delivery.PushEndpoint != "https://h/topic" || subs[0].CreatedAt != 10 {
		t.Fatalf("Subscriptions of a new topic = %+v, %v", subs, err)
	}

	r := mustApply(t, s, createSub("orders", "billing", subAttrs(t, map[string]string{
		"push_endpoint": "nats://n", "filter_policy": `{"type": ["paid"]}`}), 20))
	if got := r.Subscription; got.ID != 1 || got.Name != "billing" || got.Topic != "orders" || got.CreatedAt != 20 || got.UpdatedAt != 20 {
		t.Errorf("created %+v", got)
	}
	mustApply(t, s, createSub("orders", "audit", subAttrs(t, nil), 21))

	r = mustApply(t, s, Command{Op: OpSetSubscription, Name: "orders", Subscription: "billing",
		Changes: map[string]string{"max_retries": "3", "key_prefix": "eu/"}, Time: 30})
	if got := r.Subscription; got.Attributes.Delivery.MaxRetries != 3 || got.Attributes.KeyPrefix != "eu/" ||
		got.Attributes.FilterPolicy == "" || got.UpdatedAt != 30 || got.CreatedAt != 20 {
		t.Errorf("after set: %+v", got)
	}

	r = mustApply(t, s, Command{Op: OpDisableSubscription, Name: "orders", Subscription: "billing", Reason: "endpoint gone", Time: 40})
	if got := r.Subscription; !got.Disabled || got.DisabledReason != "endpoint gone" || got.DisabledAt != 40 {
		t.Errorf("after disable: %+v", got)
	}
	// Disabling again keeps when and why it first stopped.
	r = mustApply(t, s, Command{Op: OpDisableSubscription, Name: "orders", Subscription: "billing", Reason: "again", Time: 45})
	if got := r.Subscription; got.DisabledReason != "endpoint gone" || got.DisabledAt != 40 {
		t.Errorf("after a second disable: %+v", got)
	}
	r = mustApply(t, s, subOp(OpEnableSubscription, "orders", "billing", 50))
	if got := r.Subscription; got.Disabled || got.DisabledReason != "" || got.DisabledAt != 0 || got.UpdatedAt != 50 {
		t.Errorf("after enable: %+v", got)
	}

	// Listed: the default first, then by name; found by name and by id.
	subs, _ = s.Subscriptions("orders")
	var names []string
	for _, sub := range subs {
		names = append(names, fmt.Sprintf("%s=%d", sub.Name, sub.ID))
	}
	if got := strings.Join(names, " "); got != "default=0 audit=2 billing=1" {
		t.Errorf("Subscriptions = %s", got)
	}
	if sub, err := s.Subscription("orders", "audit"); err != nil || sub.ID != 2 {
		t.Errorf("Subscription(audit) = %+v, %v", sub, err)
	}
	if sub, err := s.SubscriptionByID("orders", 1); err != nil || sub.Name != "billing" {
		t.Errorf("SubscriptionByID(1) = %+v, %v", sub, err)
	}

	r = mustApply(t, s, subOp(OpDeleteSubscription, "orders", "billing", 60))
	if r.Subscription.Name != "billing" {
		t.Errorf("delete returned %+v", r.Subscription)
	}
	if _, err := s.Subscription("orders", "billing"); err == nil {
		t.Error("a deleted subscription is still found")
	}
}

func TestDefaultSubscription(t *testing.T) {
	s := New()
	mustApply(t, s, create("t", attrs(t, nil), 1))

	r := mustApply(t, s, Command{Op: OpDisableSubscription, Name: "t", Subscription: "default", Reason: "paused", Time: 2})
	if got := r.Subscription; got.ID != 0 || !got.Disabled || got.DisabledReason != "paused" || got.DisabledAt != 2 || got.UpdatedAt != 2 {
		t.Errorf("disabled default: %+v", got)
	}
	wantErr(t, apply(t, s, Command{Op: OpSetSubscription, Name: "t", Subscription: "default", Changes: map[string]string{"key_prefix": "a"}, Time: 3}).Err,
		ErrDefaultSubscription, "herald topic set t")
	wantErr(t, apply(t, s, createSub("t", "default", nil, 3)).Err, ErrSubscriptionExists, "attached already")

	// Deleting detaches it: it is no longer listed or found.
	mustApply(t, s, subOp(OpDeleteSubscription, "t", "default", 4))
	tp, _ := s.Topic("t")
	if !tp.Default.Detached {
		t.Error("the topic does not record its default subscription as detached")
	}
	if subs, _ := s.Subscriptions("t"); len(subs) != 0 {
		t.Errorf("a detached default is listed: %+v", subs)
	}
	wantErr(t, apply(t, s, subOp(OpEnableSubscription, "t", "default", 5)).Err, ErrSubscriptionNotFound, "detached", "herald subscription create t default")
	if _, err := s.SubscriptionByID("t", 0); err == nil {
		t.Error("a detached default is found by id")
	}

	// Creating it attaches it again, afresh: enabled.
	r = mustApply(t, s, createSub("t", "default", nil, 6))
	if got := r.Subscription; got.Disabled || got.CreatedAt != 6 || got.ID != 0 {
		t.Errorf("re-attached default: %+v", got)
	}
	// Its settings are the topic's, whatever they become.
	mustApply(t, s, set("t", map[string]string{"push_endpoint": "https://h/x"}, 7))
	if sub, _ := s.Subscription("t", "default"); sub.Attributes.Delivery.PushEndpoint != "https://h/x" || sub.UpdatedAt != 7 {
		t.Errorf("default after topic set: %+v", sub)
	}
}

func TestSubscriptionErrorsChangeNothing(t *testing.T) {
	s := New()
	mustApply(t, s, create("t", attrs(t, nil), 1))
	mustApply(t, s, createSub("t", "a", subAttrs(t, map[string]string{"start": "earliest"}), 2))
	before := mustSnapshot(t, s)

	badFilter := topic.DefaultSubscriptionAttributes()
	badFilter.FilterPolicy = `{"price": [{"numeric": ["~", 1]}]}`
	for _, tc := range []struct {
		name   string
		c      Command
		target error
		want   []string
	}{
		{"unknown topic", createSub("nope", "a", subAttrs(t, nil), 3), ErrTopicNotFound, []string{`topic "nope" does not exist`}},
		{"exists", createSub("t", "a", subAttrs(t, nil), 3), ErrSubscriptionExists, []string{`subscription "a" of topic "t" already exists`}},
		{"unknown subscription", subOp(OpEnableSubscription, "t", "b", 3), ErrSubscriptionNotFound, []string{`subscription "b" of topic "t" does not exist`, "herald subscription create t b"}},
		{"set unknown", Command{Op: OpSetSubscription, Name: "t", Subscription: "b", Changes: map[string]string{"key_prefix": "x"}}, ErrSubscriptionNotFound, nil},
		{"delete unknown", subOp(OpDeleteSubscription, "t", "b", 3), ErrSubscriptionNotFound, nil},
		{"bad filter", createSub("t", "b", &badFilter, 3), topic.ErrInvalid, []string{"filter_policy", `key "price"`}},
		{"bad change", Command{Op: OpSetSubscription, Name: "t", Subscription: "a", Changes: map[string]string{"max_in_flight": "-1"}}, topic.ErrInvalid, []string{"max_in_flight"}},
		{"start moved", Command{Op: OpSetSubscription, Name: "t", Subscription: "a", Changes: map[string]string{"start": "now"}}, topic.ErrInvalid, []string{"only when a subscription is created"}},
		{"bad name", createSub("t", "a.b", subAttrs(t, nil), 3), topic.ErrInvalid, []string{"invalid subscription name"}},
		{"no attributes", createSub("t", "b", nil, 3), topic.ErrInvalid, []string{"no attributes"}},
		{"default with attributes", createSub("t", "default", subAttrs(t, nil), 3), topic.ErrInvalid, []string{"takes no attributes"}},
		{"reason on enable", Command{Op: OpEnableSubscription, Name: "t", Subscription: "a", Reason: "x"}, topic.ErrInvalid, []string{"only disable-subscription"}},
		{"long reason", Command{Op: OpDisableSubscription, Name: "t", Subscription: "a", Reason: strings.Repeat("x", MaxReasonLen+1)}, topic.ErrInvalid, []string{"shorten it"}},
		{"subscription on a topic op", Command{Op: OpDelete, Name: "t", Subscription: "a"}, topic.ErrInvalid, []string{"only the subscription ops"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			wantErr(t, apply(t, s, tc.c).Err, tc.target, tc.want...)
			assertUnchangedButApplied(t, s, before)
		})
	}
}

func TestSubscriptionLimit(t *testing.T) {
	s := New()
	mustApply(t, s, create("t", attrs(t, nil), 1))
	for i := range MaxSubscriptions {
		mustApply(t, s, createSub("t", fmt.Sprintf("s%d", i), subAttrs(t, nil), 2))
	}
	before := mustSnapshot(t, s)
	wantErr(t, apply(t, s, createSub("t", "one-more", subAttrs(t, nil), 3)).Err, ErrSubscriptionLimit, "100 subscriptions", "delete one first")
	assertUnchangedButApplied(t, s, before)
}

func TestSubscriptionIDsNeverReused(t *testing.T) {
	s := New()
	mustApply(t, s, create("t", attrs(t, nil), 1))
	seen := make(map[uint64]bool)
	for round := range 3 {
		id := mustApply(t, s, createSub("t", "a", subAttrs(t, nil), 2)).Subscription.ID
		if id == 0 || seen[id] {
			t.Fatalf("round %d: id %d is 0 or was given before", round, id)
		}
		seen[id] = true
		mustApply(t, s, subOp(OpDeleteSubscription, "t", "a", 3))
		// Deleting the topic deletes its subscriptions; its ids stay used.
		mustApply(t, s, del("t"))
		mustApply(t, s, create("t", attrs(t, nil), 4))
		if subs, _ := s.Subscriptions("t"); len(subs) != 1 {
			t.Fatalf("a recreated topic has subscriptions %+v", subs)
		}
		// Across a snapshot too.
		r := New()
		if err := r.Restore(mustSnapshot(t, s)); err != nil {
			t.Fatal(err)
		}
		s = r
	}
}

func TestSubscriptionSnapshot(t *testing.T) {
	s := New()
	mustApply(t, s, create("t", attrs(t, nil), 1))
	mustApply(t, s, createSub("t", "b", subAttrs(t, map[string]string{"signing_secret": "k", "filter_policy": `{"a": ["x"]}`}), 2))
	mustApply(t, s, createSub("t", "a", subAttrs(t, nil), 3))
	mustApply(t, s, Command{Op: OpDisableSubscription, Name: "t", Subscription: "a", Reason: "r", Time: 4})
	mustApply(t, s, subOp(OpDeleteSubscription, "t", "default", 5))

	snap := mustSnapshot(t, s)
	r := New()
	if err := r.Restore(snap); err != nil {
		t.Fatal(err)
	}
	if got := mustSnapshot(t, r); !bytes.Equal(got, snap) {
		t.Errorf("snapshot after restore differs:\n%s\nwant\n%s", got, snap)
	}
	if !reflect.DeepEqual(r.Topics(), s.Topics()) {
		t.Error("restored topics differ")
	}
	for _, want := range []string{`"last_subscription":2`, `"default_subscription":{"detached":true,"updated_at":5}`, `"subscriptions":[{"id":2,"name":"a"`} {
		if !strings.Contains(string(snap), want) {
			t.Errorf("snapshot %s lacks %s", snap, want)
		}
	}
	// The next id follows the restored counter.
	if id := mustApply(t, r, createSub("t", "c", subAttrs(t, nil), 6)).Subscription.ID; id != 3 {
		t.Errorf("first id after restore = %d, want 3", id)
	}
}

// TestRestoreSnapshotWithoutSubscriptions loads a snapshot as herald wrote
// it before subscriptions existed: every topic has its default
// subscription, and ids start at 1.
func TestRestoreSnapshotWithoutSubscriptions(t *testing.T) {
	old := `{"version":1,"applied":7,"next_group":4,"topics":[{"name":"orders","attributes":{"persistent":true,"shards":2,` +
		`"push_endpoint":"https://h/x","max_retries":0},"first_group":2,"created_at":5,"updated_at":6}],"cluster":"c1"}`
	s := New()
	if err := s.Restore([]byte(old)); err != nil {
		t.Fatal(err)
	}
	subs, err := s.Subscriptions("orders")
	if err != nil || len(subs) != 1 || subs[0].Name != "default" || subs[0].Disabled || subs[0].Attributes.Delivery.PushEndpoint != "https://h/x" {
		t.Fatalf("Subscriptions = %+v, %v", subs, err)
	}
	if id := mustApply(t, s, createSub("orders", "a", subAttrs(t, nil), 8)).Subscription.ID; id != 1 {
		t.Errorf("first id = %d, want 1", id)
	}
	// Without subscriptions, the snapshot is written as before.
	r := New()
	if err := r.Restore([]byte(old)); err != nil {
		t.Fatal(err)
	}
	if got := string(mustSnapshot(t, r)); strings.Contains(got, "subscription") {
		t.Errorf("a state without subscriptions snapshots as %s", got)
	}
}

func TestRestoreRejectsBadSubscriptions(t *testing.T) {
	snapWith := func(last int, subs string) string {
		return fmt.Sprintf(`{"version":1,"next_group":20,"last_subscription":%d,"topics":[{"name":"t","first_group":2,"attributes":{"shards":1},"subscriptions":[%s]}]}`, last, subs)
	}
	sub := func(id int, name, topicName string) string {
		return fmt.Sprintf(`{"id":%d,"name":%q,"topic":%q}`, id, name, topicName)
	}
	for data, want := range map[string]string{
		snapWith(2, sub(1, "b", "t")+","+sub(2, "a", "t")): "not sorted",
		snapWith(2, sub(1, "a", "t")+","+sub(1, "b", "t")): "taken",
		snapWith(1, sub(2, "a", "t")):                      "after the last id",
		snapWith(1, sub(0, "a", "t")):                      "id 0",
		snapWith(1, sub(1, "default", "t")):                "subscription \"default\"",
		snapWith(1, sub(1, "a", "u")):                      "of topic \"u\"",
		snapWith(1, sub(1, "a.b", "t")):                    "invalid subscription name",
	} {
		if err := New().Restore([]byte(data)); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Restore(%s) = %v, want an error mentioning %q", data, err, want)
		}
	}
}
