package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	"herald/client"
	"herald/internal/testkit"
	"herald/tests/framework"
)

// TestE2ESeekAfterARestart pushes a topic with retention to a webhook,
// SIGKILLs and restarts the server, and seeks the subscription back to
// the first of the events it had delivered: it gets each of them again,
// the retained events having survived the restart.
func TestE2ESeekAfterARestart(t *testing.T) {
	h := framework.NewWebhook(t)
	h.Open()
	dataDir := t.TempDir()
	addr := testkit.FreeAddr(t)
	srv := framework.StartServer(t, dataDir, addr)
	c := client.New("http://"+addr, client.WithTimeout(10*time.Second))
	ctx := context.Background()
	if _, err := c.CreateTopic(ctx, "orders", map[string]string{"shards": "3", "retention": "3600"}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.CreateSubscription(ctx, "orders", "all", map[string]string{"push_endpoint": h.URL}); err != nil {
		t.Fatal(err)
	}
	if err := c.DeleteSubscription(ctx, "orders", "default"); err != nil {
		t.Fatal(err)
	}

	// The shards retain from the topic's creation, or, one that did not
	// take it then, from the trim's next round: until a delivered probe
	// can be sought back to, publish another.
	probes := 0
	framework.WaitFor(t, "the shards retain delivered events", func() bool {
		if _, err := c.Publish(ctx, "orders", client.Event{Key: fmt.Sprint("probe", probes), Payload: []byte("0")}); err != nil {
			t.Fatal(err)
		}
		probes++
		time.Sleep(100 * time.Millisecond)
		n, err := c.SeekSubscription(ctx, "orders", "all", client.SeekTarget{Earliest: true})
		if err != nil {
			t.Fatal(err)
		}
		return n > 0
	})

	// One publish: every event has the same publish time, on every shard.
	const n = 60
	evs := make([]client.Event, n)
	for i := range evs {
		evs[i] = client.Event{Key: fmt.Sprint("k", i%6), Payload: fmt.Append(nil, i/6)}
	}
	ids, err := c.Publish(ctx, "orders", evs...)
	if err != nil {
		t.Fatal(err)
	}
	delivered := func(times int) func() bool {
		return func() bool {
			for _, id := range ids {
				if h.Times(id) < times {
					return false
				}
			}
			return true
		}
	}
	framework.WaitFor(t, "every event is delivered", delivered(1))

	srv.Kill()
	framework.StartServer(t, dataDir, addr)
	var replayed int64
	framework.WaitFor(t, "the seek is taken by every shard", func() bool {
		replayed, err = c.SeekSubscription(ctx, "orders", "all", client.SeekTarget{EventID: ids[0]})
		return err == nil
	})
	// Events still pending at the kill (their acks lost with it) are
	// pending anyway, so not counted.
	if replayed > n {
		t.Errorf("the seek replayed %d events, more than the %d published since", replayed, n)
	}
	framework.WaitFor(t, "every event is delivered again", delivered(2))
	for k := range 6 {
		want := make([]int, n/6)
		for i := range want {
			want[i] = i
		}
		if got := h.Order(fmt.Sprint("k", k)); fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("key k%d arrived first in the order %v, want %v", k, got, want)
		}
	}
}
