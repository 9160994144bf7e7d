package node

import (
	"context"
	"reflect"
	"testing"
)

// SubscriptionsStats reads every subscription's stats at once and gives
// what SubscriptionStats gives each: a pull subscription holding its
// backlog, one created later holding only what came after it, and the
// default subscription matching TopicStats.
func TestSubscriptionsStatsMatchOneByOne(t *testing.T) {
	ctx := context.Background()
	n := openNode(t, testConfig(t.TempDir()))
	mustCreate(t, n, "t", map[string]string{"shards": "3"})
	publish(t, n, "t", jsonEvents("k", 0, 4)...)
	if _, err := n.CreateSubscription(ctx, "t", "audit", nil); err != nil {
		t.Fatal(err)
	}
	publish(t, n, "t", jsonEvents("j", 0, 2)...)

	subs, err := n.ListSubscriptions(ctx, "t")
	if err != nil {
		t.Fatal(err)
	}
	var all []TopicStats
	waitUntil(t, "every shard has started audit", func() bool {
		all, err = n.SubscriptionsStats(ctx, "t", subs)
		return err == nil && all[1].Total.Err == nil
	})
	if len(all) != 2 || subs[0].Name != "default" || subs[1].Name != "audit" {
		t.Fatalf("subscriptions %v, stats %d", subs, len(all))
	}
	for i, sub := range subs {
		one, err := n.SubscriptionStats(ctx, "t", sub.Name)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(one, all[i]) {
			t.Errorf("%s: SubscriptionsStats %+v, SubscriptionStats %+v", sub.Name, all[i], one)
		}
		if len(all[i].Shards) != 3 {
			t.Errorf("%s: %d shards, want 3", sub.Name, len(all[i].Shards))
		}
	}
	if got := all[0].Total.Stats.Events; got != 6 {
		t.Errorf("default holds %d events, want 6", got)
	}
	if got := all[1].Total.Stats.Events; got != 2 {
		t.Errorf("audit holds %d events, want the 2 published after it", got)
	}
	topic, err := n.TopicStats(ctx, "t")
	if err != nil {
		t.Fatal(err)
	}
	if topic.Total.Stats != all[0].Total.Stats {
		t.Errorf("default's stats %+v, TopicStats %+v", all[0].Total.Stats, topic.Total.Stats)
	}
}
