package node

import (
	"context"
	"errors"
	"testing"
)

func TestSubscriptionsSurviveRestartAndGoWithTheirTopic(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	n := openNode(t, testConfig(dir))
	mustCreate(t, n, "orders", map[string]string{"shards": "1"})
	sub, err := n.CreateSubscription(ctx, "orders", "billing", map[string]string{"filter_policy": `{"type": ["paid"]}`, "signing_secret": "k"})
	if err != nil {
		t.Fatal(err)
	}
	if sub.ID != 1 || sub.Topic != "orders" || sub.Attributes["signing_secret"] != "(set)" || sub.CreatedAt.IsZero() {
		t.Errorf("created %+v", sub)
	}
	if _, err := n.DisableSubscription(ctx, "orders", "billing", "paused"); err != nil {
		t.Fatal(err)
	}
	if err := n.DeleteSubscription(ctx, "orders", "default"); err != nil {
		t.Fatal(err)
	}
	n.Close()

	n2 := openNode(t, testConfig(dir))
	subs, err := n2.ListSubscriptions(ctx, "orders")
	if err != nil || len(subs) != 1 {
		t.Fatalf("after restart: %+v, %v", subs, err)
	}
	if s := subs[0]; s.Name != "billing" || !s.Disabled || s.DisabledReason != "paused" || s.DisabledAt.IsZero() || s.Attributes["filter_policy"] == "" {
		t.Errorf("after restart: %+v", s)
	}

	// Deleting the topic deletes its subscriptions; ids are not reused.
	if err := n2.DeleteTopic(ctx, "orders"); err != nil {
		t.Fatal(err)
	}
	mustCreate(t, n2, "orders", map[string]string{"shards": "1"})
	if _, err := n2.GetSubscription(ctx, "orders", "billing"); !errors.Is(err, ErrNotFound) {
		t.Errorf("a subscription of the deleted topic: %v, want ErrNotFound", err)
	}
	sub, err = n2.CreateSubscription(ctx, "orders", "billing", nil)
	if err != nil || sub.ID != 2 {
		t.Errorf("recreated subscription = %+v, %v; want id 2", sub, err)
	}
}

func TestSubscriptionErrorKinds(t *testing.T) {
	ctx := context.Background()
	n := openNode(t, testConfig(t.TempDir()))
	mustCreate(t, n, "t", map[string]string{"shards": "1"})
	if _, err := n.CreateSubscription(ctx, "t", "a", nil); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		err  error
		kind error
	}{
		{"unknown topic", errOf(n.CreateSubscription(ctx, "nope", "a", nil)), ErrNotFound},
		{"exists", errOf(n.CreateSubscription(ctx, "t", "a", nil)), ErrExists},
		{"bad filter", errOf(n.CreateSubscription(ctx, "t", "b", map[string]string{"filter_policy": "[1]"})), ErrInvalid},
		{"bad name", errOf(n.CreateSubscription(ctx, "t", "a.b", nil)), ErrInvalid},
		{"unknown subscription", errOf(n.GetSubscription(ctx, "t", "zz")), ErrNotFound},
		{"nothing to set", errOf(n.SetSubscriptionAttributes(ctx, "t", "a", nil)), ErrInvalid},
		{"start moved", errOf(n.SetSubscriptionAttributes(ctx, "t", "a", map[string]string{"start": "earliest"})), ErrInvalid},
		{"set the default", errOf(n.SetSubscriptionAttributes(ctx, "t", "default", map[string]string{"key_prefix": "x"})), ErrFailedPrecondition},
		{"attributes for the default", errOf(n.CreateSubscription(ctx, "t", "default", map[string]string{"key_prefix": "x"})), ErrInvalid},
		// The guard refuses what push endpoints may not reach, as for topics.
		{"guarded endpoint", errOf(n.CreateSubscription(ctx, "t", "c", map[string]string{"push_endpoint": "http://169.254.169.254/latest"})), ErrInvalid},
	} {
		if !errors.Is(tc.err, tc.kind) {
			t.Errorf("%s: %v, want %v", tc.name, tc.err, tc.kind)
		}
	}
}
