package node

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"herald/internal/topic"
)

// keyFor returns a key that routes to shard idx of a topic of n shards.
func keyFor(idx, n int) string {
	for i := 0; ; i++ {
		if k := fmt.Sprint("key-", i); topic.ShardFor(k, n) == idx {
			return k
		}
	}
}

// TestShardsServeAsTheyOpen restarts a node whose shard "slow.3" takes
// until the test lets it open: meanwhile the node reports how far it is,
// the other shards serve, and requests to the slow one are refused as
// still opening rather than left waiting.
func TestShardsServeAsTheyOpen(t *testing.T) {
	dir := t.TempDir()
	n := openNode(t, testConfig(dir))
	mustCreate(t, n, "slow", map[string]string{"shards": "4"})
	mustCreate(t, n, "other", map[string]string{"shards": "4"})
	publish(t, n, "slow", ev(keyFor(3, 4), "before"))
	tr, lerr := n.reg.lookup("slow")
	if lerr != nil {
		t.Fatal(lerr)
	}
	slowGroup := tr.shards[3].group
	if err := n.Close(); err != nil {
		t.Fatal(err)
	}

	release := make(chan struct{})
	cfg := testConfig(dir)
	cfg.BootParallelism = 2 // the slow shard holds one worker; the other opens the rest
	cfg.BeforeShardOpen = func(group uint64) {
		if group == slowGroup {
			<-release
		}
	}
	n, err := Open(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Close() })
	defer close(release)

	deadline := time.Now().Add(30 * time.Second)
	for n.Readiness().ShardsOpen < 7 {
		if time.Now().After(deadline) {
			t.Fatalf("readiness %+v: the seven fast shards did not open", n.Readiness())
		}
		time.Sleep(10 * time.Millisecond)
	}
	if r := n.Readiness(); r != (Readiness{Ready: false, ShardsOpen: 7, Shards: 8}) {
		t.Fatalf("readiness while one shard opens = %+v, want 7 of 8 open, not ready", r)
	}
	// A shard that opened serves, in the topic of the slow one too.
	publish(t, n, "other", ev("a", "1"), ev("b", "2"), ev("c", "3"))
	publish(t, n, "slow", ev(keyFor(0, 4), "fast shard"))

	// The slow shard is refused at once, saying why.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err = n.Publish(ctx, "slow", []Event{ev(keyFor(3, 4), "x")})
	if !errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), "shard slow.3 is still opening (7 of 8 open)") {
		t.Fatalf("publish to the shard still opening: err %v, want ErrUnavailable saying it is still opening, 7 of 8 open", err)
	}
	if _, err := n.Reserve(ctx, "slow", keyFor(3, 4), 10, 1); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("reserve in the shard still opening: err %v, want ErrUnavailable", err)
	}
	st, err := n.TopicStats(ctx, "slow")
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Shards[3].Err; err == nil || !strings.Contains(err.Error(), "still opening") {
		t.Fatalf("stats of the shard still opening: err %v, want one saying it is still opening", err)
	}
	select {
	case <-n.Opened():
		t.Fatal("Opened is closed while a shard is still opening")
	default:
	}

	release <- struct{}{}
	<-n.Opened()
	if r := n.Readiness(); r != (Readiness{Ready: true, ShardsOpen: 8, Shards: 8}) {
		t.Fatalf("readiness once every shard opened = %+v, want 8 of 8, ready", r)
	}
	publish(t, n, "slow", ev(keyFor(3, 4), "after"))
	st, err = n.TopicStats(ctx, "slow")
	if err != nil {
		t.Fatal(err)
	}
	if sh := st.Shards[3]; sh.Err != nil || sh.Stats.Events != 2 {
		t.Fatalf("the slow shard once open: %d events, err %v; want the one from before the restart and the one after", sh.Stats.Events, sh.Err)
	}
}

// TestCloseWhileShardsOpen closes a node whose boot has not finished: the
// boot stops and Close returns.
func TestCloseWhileShardsOpen(t *testing.T) {
	dir := t.TempDir()
	n := openNode(t, testConfig(dir))
	mustCreate(t, n, "t", map[string]string{"shards": "4"})
	n.Close()

	release := make(chan struct{})
	cfg := testConfig(dir)
	cfg.BeforeShardOpen = func(uint64) { <-release }
	n, err := Open(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	closed := make(chan error, 1)
	go func() { closed <- n.Close() }()
	close(release) // the shards being opened finish; the boot stops
	if err := <-closed; err != nil {
		t.Fatal(err)
	}
	<-n.Opened()
	if n.Readiness().Ready {
		t.Fatal("a node closed before its shards opened says it is ready")
	}
}
