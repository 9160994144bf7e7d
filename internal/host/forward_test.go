package host

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	pb "go.etcd.io/raft/v3/raftpb"
)

// A follower's forward lost on the way, while later forwards reach the
// leader, is answered as soon as a later one is in the follower's log:
// its proposer learns that the outcome is unknown without waiting out two
// election timeouts (here 20 s, past the test's deadline).
func TestAForwardOvertakenFailsAtOnce(t *testing.T) {
	w, hosts, machines := wireLedByNode1(t, func(c *Config) {
		c.ElectionTicks = 1000
		c.TickInterval = 10 * time.Millisecond
	})
	eventually(t, "node 2 follows node 1", func() bool { l, _ := hosts[2].Leader(1); return l == 1 })

	dropped := false
	w.mu.Lock()
	w.drop = func(m *pb.Message) bool {
		if m.Type != pb.MsgProp || m.From != 2 || dropped {
			return false
		}
		dropped = true // the first forward only
		return true
	}
	w.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	lost := hosts[2].Start(ctx, 1, Bytes("lost on the way"))
	eventually(t, "the first forward is dropped", func() bool {
		w.mu.Lock()
		defer w.mu.Unlock()
		return dropped
	})
	if _, err := hosts[2].Propose(ctx, 1, Bytes("overtakes it")); err != nil {
		t.Fatalf("the forward after the lost one: %v", err)
	}
	if _, err := lost.Wait(ctx); !errors.Is(err, ErrOutcomeUnknown) {
		t.Fatalf("an overtaken forward: %v; want ErrOutcomeUnknown", err)
	}
	for id := uint64(1); id <= 3; id++ {
		eventually(t, fmt.Sprintf("node %d applies the second forward", id), func() bool {
			return len(applied(t, hosts, machines, id)) == 1
		})
		if got := applied(t, hosts, machines, id); got[0] != "overtakes it" {
			t.Fatalf("node %d applied %q", id, got)
		}
	}
}

// Forwards that take longer than two election timeouts to commit, behind
// forwards that keep committing (a cluster under more load than it can
// take), are answered with their results, not with an unknown outcome:
// the leader is alive and has them.
func TestSlowForwardsBehindArrivingEntriesWait(t *testing.T) {
	const (
		tick  = 10 * time.Millisecond
		limit = 2 * 10 * tick // two election timeouts
	)
	w, hosts, machines := wireLedByNode1(t, func(c *Config) {
		c.ElectionTicks = 10
		c.TickInterval = tick
	})
	eventually(t, "node 2 follows node 1", func() bool { l, _ := hosts[2].Leader(1); return l == 1 })

	// Node 2's forwards reach node 1 in order, each later than the one
	// before, up to twice the limit; everything else flows at once, so
	// nobody campaigns.
	type delayed struct {
		m   *pb.Message
		due time.Time
	}
	line := make(chan delayed, 1024)
	var delivery sync.WaitGroup
	delivery.Go(func() {
		for d := range line {
			time.Sleep(time.Until(d.due))
			hosts[1].Receive(1, *d.m)
		}
	})
	forwards := 0
	w.mu.Lock()
	w.drop = func(m *pb.Message) bool {
		if m.Type != pb.MsgProp || m.From != 2 {
			return false
		}
		forwards++
		line <- delayed{m: m, due: time.Now().Add(min(time.Duration(forwards)*8*time.Millisecond, 2*limit))}
		return true
	}
	w.mu.Unlock()
	defer func() {
		w.mu.Lock()
		w.drop = nil
		w.mu.Unlock()
		close(line)
		delivery.Wait()
	}()

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	const n = 80
	took := make([]time.Duration, n)
	errs := make([]error, n)
	var waits sync.WaitGroup
	for i := range n {
		begun := time.Now()
		pr := hosts[2].Start(ctx, 1, Bytes(fmt.Sprint("c", i)))
		waits.Go(func() {
			_, errs[i] = pr.Wait(ctx)
			took[i] = time.Since(begun)
		})
		time.Sleep(20 * time.Millisecond)
	}
	waits.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("forward %d: %v", i, err)
		}
	}
	if slowest := slices.Max(took); slowest <= limit {
		t.Fatalf("the slowest forward took %v: the test needs some to take longer than %v", slowest, limit)
	}
	if got := applied(t, hosts, machines, 2); len(got) != n {
		t.Fatalf("node 2 applied %d commands, want %d", len(got), n)
	}
}
