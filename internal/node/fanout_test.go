package node

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"herald/internal/shard"
)

// typed is a JSON event of key whose "type" header is typ.
func typed(key, typ string, i int) Event {
	return Event{Key: key, Payload: fmt.Appendf(nil, "%q", fmt.Sprint(i)), Headers: map[string]string{"type": typ}}
}

// counting returns want's payloads 0..n-1 of the given parity (all if
// parity < 0), as the receivers record them.
func counting(n, parity int) []string {
	var out []string
	for i := range n {
		if parity < 0 || i%2 == parity {
			out = append(out, fmt.Sprint(i))
		}
	}
	return out
}

func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting until %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// One topic, three webhook subscriptions: each receiver gets exactly what
// its filter admits, in order per key; the one whose endpoint fails holds
// up neither the others nor the topic; when its endpoint answers 410 it
// is disabled, and once enabled again it gets its whole backlog, in order.
func TestFanOutToSubscriptions(t *testing.T) {
	ctx := context.Background()
	n := openNode(t, testConfig(t.TempDir()))
	mustCreate(t, n, "orders", map[string]string{"shards": "3"})
	all, paid, flaky := newReceiver(t), newReceiver(t), newReceiver(t)
	var flakyStatus atomic.Int32
	flakyStatus.Store(http.StatusServiceUnavailable)
	flaky.setStatus(func(string) int { return int(flakyStatus.Load()) })
	for name, attrs := range map[string]map[string]string{
		"all":   {"push_endpoint": all.URL},
		"paid":  {"push_endpoint": paid.URL, "filter_policy": `{"type": ["paid"]}`},
		"flaky": {"push_endpoint": flaky.URL, "retry_sleep_duration": "0"},
	} {
		if _, err := n.CreateSubscription(ctx, "orders", name, attrs); err != nil {
			t.Fatal(err)
		}
	}
	// The default subscription (pull) would hold every event: drop it.
	if err := n.DeleteSubscription(ctx, "orders", "default"); err != nil {
		t.Fatal(err)
	}

	keys := []string{"a", "b", "c", "d"}
	const perKey = 20
	for i := range perKey {
		for _, k := range keys {
			typ := "paid"
			if i%2 == 1 {
				typ = "refunded"
			}
			publish(t, n, "orders", typed(k, typ, i))
		}
	}
	waitUntil(t, "all and paid have their events", func() bool {
		for _, k := range keys {
			if len(all.got(k)) < perKey || len(paid.got(k)) < perKey/2 {
				return false
			}
		}
		return true
	})
	for _, k := range keys {
		if got, want := all.got(k), counting(perKey, -1); !slices.Equal(got, want) {
			t.Errorf("all: key %s got %v, want %v", k, got, want)
		}
		if got, want := paid.got(k), counting(perKey, 0); !slices.Equal(got, want) {
			t.Errorf("paid: key %s got %v, want %v", k, got, want)
		}
	}
	// Deliveries are recorded after they are made: wait for the skips too.
	var st TopicStats
	waitUntil(t, "paid has recorded every event", func() bool {
		var err error
		st, err = n.SubscriptionStats(ctx, "orders", "paid")
		return err == nil && st.Total.Stats.Events == 0
	})
	if st.Total.Stats.Skipped != perKey*2 || st.Total.Stats.Delivered != perKey*2 || st.Total.Stats.Events != 0 {
		t.Errorf("paid's stats %+v: want %d skipped and %d delivered", st.Total.Stats, perKey*2, perKey*2)
	}
	fl, err := n.SubscriptionStats(ctx, "orders", "flaky")
	if err != nil {
		t.Fatal(err)
	}
	if fl.Total.Stats.Events != perKey*4 || fl.Total.Delivery == nil || fl.Total.Delivery.ConsecutiveFailures == 0 {
		t.Errorf("flaky's stats %+v, health %+v: want all %d events pending and failures", fl.Total.Stats, fl.Total.Delivery, perKey*4)
	}

	// 410 Gone: disabled, its events kept.
	flakyStatus.Store(http.StatusGone)
	waitUntil(t, "flaky is disabled", func() bool {
		s, err := n.GetSubscription(ctx, "orders", "flaky")
		return err == nil && s.Disabled
	})
	s, _ := n.GetSubscription(ctx, "orders", "flaky")
	if !strings.Contains(s.DisabledReason, "410") && !strings.Contains(s.DisabledReason, "no longer exists") {
		t.Errorf("disabled for %q; want the reason to say the endpoint is gone", s.DisabledReason)
	}
	publish(t, n, "orders", typed("a", "paid", perKey))
	waitUntil(t, "all gets the event published while flaky is disabled", func() bool { return len(all.got("a")) == perKey+1 })

	flakyStatus.Store(http.StatusOK)
	if _, err := n.EnableSubscription(ctx, "orders", "flaky"); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "flaky gets its backlog", func() bool {
		for _, k := range keys {
			if want := perKey + map[bool]int{true: 1}[k == "a"]; len(flaky.got(k)) < want {
				return false
			}
		}
		return true
	})
	for _, k := range keys {
		want := counting(perKey, -1)
		if k == "a" {
			want = counting(perKey+1, -1)
		}
		if got := flaky.got(k); !slices.Equal(got, want) {
			t.Errorf("flaky: key %s got %v, want %v", k, got, want)
		}
	}
}

// A subscription starting from the earliest event gets what the topic
// still holds; one starting now gets only what is published after; and
// deleting a subscription frees what only it held.
func TestSubscriptionStartAndDelete(t *testing.T) {
	ctx := context.Background()
	n := openNode(t, testConfig(t.TempDir()))
	mustCreate(t, n, "t", map[string]string{"shards": "2"})
	publish(t, n, "t", jsonEvents("k", 0, 5)...) // held by the default (pull) subscription
	early, late := newReceiver(t), newReceiver(t)
	if _, err := n.CreateSubscription(ctx, "t", "early", map[string]string{"push_endpoint": early.URL, "start": "earliest"}); err != nil {
		t.Fatal(err)
	}
	if _, err := n.CreateSubscription(ctx, "t", "late", map[string]string{"push_endpoint": late.URL}); err != nil {
		t.Fatal(err)
	}
	publish(t, n, "t", jsonEvents("k", 5, 3)...)
	waitUntil(t, "both have what they should", func() bool { return len(early.got("k")) == 8 && len(late.got("k")) == 3 })
	if got := late.got("k"); !slices.Equal(got, []string{"5", "6", "7"}) {
		t.Errorf("late got %v, want only what was published after it", got)
	}
	if got := early.got("k"); !slices.Equal(got, counting(8, -1)) {
		t.Errorf("early got %v", got)
	}
	// The default subscription still holds all 8; delete it and every
	// shard's log is free.
	if st, _ := n.TopicStats(ctx, "t"); st.Total.Stats.Events != 8 {
		t.Fatalf("default subscription holds %d events, want 8", st.Total.Stats.Events)
	}
	if err := n.DeleteSubscription(ctx, "t", "default"); err != nil {
		t.Fatal(err)
	}
	tr, _ := n.reg.lookup("t")
	for _, s := range tr.shards {
		var compact, applied uint64
		n.viewShard(ctx, s, func(m *shard.Machine) { compact, applied = m.CompactIndex(), m.Applied() })
		if compact != applied+1 {
			t.Errorf("shard %s still needs log entries from %d (applied %d)", s.name, compact, applied)
		}
	}
}

// A subscription starting from the earliest event gets the backlog on
// every shard with nothing published after it: its dispatchers may start
// before their shards have its cursor, and must then be woken when the
// cursor comes, not by the next event.
func TestEarliestSubscriptionGetsBacklogWithoutNewEvents(t *testing.T) {
	ctx := context.Background()
	n := openNode(t, testConfig(t.TempDir()))
	mustCreate(t, n, "t", map[string]string{"shards": "4"})
	keys := []string{"a", "b", "c", "d", "e", "f", "g", "h"}
	for _, k := range keys {
		publish(t, n, "t", jsonEvents(k, 0, 3)...)
	}
	early := newReceiver(t)
	if _, err := n.CreateSubscription(ctx, "t", "early", map[string]string{"push_endpoint": early.URL, "start": "earliest"}); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "early has the backlog of every key", func() bool {
		for _, k := range keys {
			if len(early.got(k)) < 3 {
				return false
			}
		}
		return true
	})
	for _, k := range keys {
		if got := early.got(k); !slices.Equal(got, counting(3, -1)) {
			t.Errorf("early: key %s got %v", k, got)
		}
	}
}

// Each subscription has its own dead letters: listed, replayed (for it
// alone) and purged by its name.
func TestDeadLettersPerSubscription(t *testing.T) {
	ctx := context.Background()
	n := openNode(t, testConfig(t.TempDir()))
	mustCreate(t, n, "t", map[string]string{"shards": "1"})
	hook := newReceiver(t)
	hook.setStatus(func(string) int { return http.StatusServiceUnavailable })
	if _, err := n.CreateSubscription(ctx, "t", "hook", map[string]string{"push_endpoint": hook.URL,
		"max_retries": "1", "retry_sleep_duration": "0"}); err != nil {
		t.Fatal(err)
	}
	publish(t, n, "t", jsonEvents("k", 0, 3)...)
	var dls []DeadLetter
	waitUntil(t, "the hook's events are dead-lettered", func() bool {
		dls, _ = n.ListDeadLetters(ctx, "t", "hook", 10)
		return len(dls) == 3
	})
	if dls[0].Reason != "max_retries" {
		t.Errorf("dead letter %+v: want reason max_retries", dls[0])
	}
	if def, err := n.ListDeadLetters(ctx, "t", "", 10); err != nil || len(def) != 0 {
		t.Fatalf("the default subscription's dead letters: %v, %v; want none", def, err)
	}
	if _, err := n.ListDeadLetters(ctx, "t", "nope", 10); !errors.Is(err, ErrNotFound) {
		t.Errorf("dead letters of an unknown subscription: %v, want ErrNotFound", err)
	}
	hook.setStatus(nil)
	if got, err := n.ReplayDeadLetters(ctx, "t", "hook", []string{dls[0].ID, dls[1].ID}); err != nil || got != 2 {
		t.Fatalf("replay: %d, %v", got, err)
	}
	waitUntil(t, "the replayed events arrive", func() bool { return len(hook.got("k")) == 2 })
	if got := hook.got("k"); !slices.Equal(got, []string{"0", "1"}) {
		t.Errorf("the hook got %v after the replay, want [0 1]", got)
	}
	// The replay was the hook's alone: the default (pull) subscription
	// holds the three events it always had, no copies.
	if st, _ := n.TopicStats(ctx, "t"); st.Total.Stats.Events != 3 {
		t.Errorf("the default subscription holds %d events, want 3", st.Total.Stats.Events)
	}
	if got, err := n.PurgeDeadLetters(ctx, "t", "hook", nil); err != nil || got != 1 {
		t.Fatalf("purge: %d, %v; want the one left", got, err)
	}
}

// A subscription whose endpoint fails without a break for its
// disable_after is disabled, and the operator's webhook is told, as it is
// when one is enabled again.
func TestDisableAfterContinuousFailureAlertsTheOperator(t *testing.T) {
	ctx := context.Background()
	alerts := make(chan map[string]string, 10)
	op := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var a map[string]string
		if err := json.NewDecoder(r.Body).Decode(&a); err == nil {
			alerts <- a
		}
	}))
	t.Cleanup(op.Close)
	cfg := testConfig(t.TempDir())
	cfg.AlertWebhook = op.URL
	n := openNode(t, cfg)
	mustCreate(t, n, "t", map[string]string{"shards": "1"})
	down := newReceiver(t)
	down.setStatus(func(string) int { return http.StatusInternalServerError })
	if _, err := n.CreateSubscription(ctx, "t", "down", map[string]string{"push_endpoint": down.URL,
		"retry_sleep_duration": "0", "disable_after": "1"}); err != nil {
		t.Fatal(err)
	}
	publish(t, n, "t", jsonEvents("k", 0, 2)...)
	waitUntil(t, "the subscription is disabled", func() bool {
		s, err := n.GetSubscription(ctx, "t", "down")
		return err == nil && s.Disabled
	})
	next := func() map[string]string {
		t.Helper()
		select {
		case a := <-alerts:
			return a
		case <-time.After(20 * time.Second):
			t.Fatal("no alert reached the operator's webhook")
			return nil
		}
	}
	if a := next(); a["type"] != "subscription.disabled" || a["topic"] != "t" || a["subscription"] != "down" || a["reason"] == "" {
		t.Errorf("alert %v: want subscription.disabled of t/down with a reason", a)
	}
	down.setStatus(nil)
	if _, err := n.EnableSubscription(ctx, "t", "down"); err != nil {
		t.Fatal(err)
	}
	if a := next(); a["type"] != "subscription.enabled" || a["subscription"] != "down" {
		t.Errorf("alert %v: want subscription.enabled of t/down", a)
	}
	waitUntil(t, "the backlog is delivered after the enable", func() bool { return len(down.got("k")) == 2 })
	if got := down.got("k"); !slices.Equal(got, []string{"0", "1"}) {
		t.Errorf("delivered %v after the enable, want [0 1]", got)
	}
}
