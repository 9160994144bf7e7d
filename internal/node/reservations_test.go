package node

import (
	"context"
	"slices"
	"testing"
	"time"
)

// waitReservations waits until the topic holds want reservations.
func waitReservations(t *testing.T, n *Node, topicName string, want int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		st, err := n.TopicStats(context.Background(), topicName)
		if err == nil && st.Total.Stats.Reservations == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("topic %s holds %+v reservations (err %v), want %d", topicName, st.Total.Stats.Reservations, err, want)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestOnlyShardsHoldingReservationsAreChecked(t *testing.T) {
	cfg := testConfig(t.TempDir())
	cfg.ReservationTimeout = 300 * time.Millisecond
	n := openNode(t, cfg)
	mustCreate(t, n, "outbox", map[string]string{"shards": "4"})
	publish(t, n, "outbox", ev("a", "1"), ev("b", "2"), ev("c", "3"))
	if got := n.reserving.list(); len(got) != 0 {
		t.Fatalf("shards checked for expired reservations before any was made: %v", got)
	}
	r, err := n.Reserve(context.Background(), "outbox", "user-1", 100, 1)
	if err != nil {
		t.Fatal(err)
	}
	s, _, err := n.reg.reservationShard(r.ID)
	if err != nil {
		t.Fatal(err)
	}
	// The reservation may already have expired; if not, its shard alone is
	// in the set.
	if got := n.reserving.list(); len(got) > 1 || (len(got) == 1 && got[0] != s.rt.group) {
		t.Fatalf("shards checked: %v, want at most the reserved one, group %d", got, s.rt.group)
	}
	waitReservations(t, n, "outbox", 0)
	deadline := time.Now().Add(10 * time.Second)
	for len(n.reserving.list()) != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("shards still checked after their reservations expired: %v", n.reserving.list())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestReservationsExpireAfterARestart(t *testing.T) {
	dir := t.TempDir()
	cfg := testConfig(dir)
	cfg.ReservationTimeout = time.Hour
	n, err := Open(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	mustCreate(t, n, "outbox", map[string]string{"shards": "4"})
	r, err := n.Reserve(context.Background(), "outbox", "user-1", 100, 1)
	if err != nil {
		t.Fatal(err)
	}
	s, _, err := n.reg.reservationShard(r.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got := n.reserving.list(); !slices.Equal(got, []uint64{s.rt.group}) {
		t.Fatalf("shards checked: %v, want the reserved one, group %d", got, s.rt.group)
	}
	if err := n.Close(); err != nil {
		t.Fatal(err)
	}
	// The reopened shard learns of its reservation from its log or
	// snapshot, not from a Reserve call, and must still expire it.
	cfg.ReservationTimeout = 300 * time.Millisecond
	n = openNode(t, cfg)
	waitReservations(t, n, "outbox", 0)
}
