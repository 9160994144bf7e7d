package node

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"herald/internal/shard"
)

// fakeReserving is a node's shards as the reservation expiry sees them.
type fakeReserving struct {
	shards   map[uint64]*shardRuntime
	led      map[uint64]bool
	oldest   map[uint64]int64 // by group; absent: no reservation
	proposed map[uint64]shard.Command
	err      error // of every proposal
}

func (f *fakeReserving) shard(group uint64) (*shardRuntime, bool) {
	s, ok := f.shards[group]
	return s, ok
}

func (f *fakeReserving) leads(s *shardRuntime) bool { return f.led[s.group] }

func (f *fakeReserving) oldestReservation(_ context.Context, s *shardRuntime) (int64, bool) {
	o, ok := f.oldest[s.group]
	return o, ok
}

func (f *fakeReserving) proposeShard(_ context.Context, s *shardRuntime, cmd *shard.Command) (shard.Result, error) {
	f.proposed[s.group] = *cmd
	return shard.Result{}, f.err
}

// servingShard is a local shard of group that has opened.
func servingShard(group uint64) *shardRuntime {
	var p openProgress
	s := &shardRuntime{name: "t", group: group, local: true, open: p.start()}
	s.open.finish(nil)
	return s
}

// TestExpiryProposesOnlyWhereDue: the expiry proposes the cutoff (now
// less the timeout) to the shards this node leads whose oldest
// reservation is older, and to no other; a group whose topic is gone
// leaves the set.
func TestExpiryProposesOnlyWhereDue(t *testing.T) {
	now := time.Unix(1000, 0)
	timeout := 30 * time.Second
	cutoff := now.Add(-timeout).UnixNano()
	f := &fakeReserving{
		shards: map[uint64]*shardRuntime{1: servingShard(1), 2: servingShard(2), 3: servingShard(3), 4: servingShard(4)},
		led:    map[uint64]bool{1: true, 2: true, 4: true},
		// 1 is due; 2 is not yet; 3 is due but led elsewhere; 4 holds none.
		oldest:   map[uint64]int64{1: cutoff - 1, 2: cutoff, 3: cutoff - 1},
		proposed: make(map[uint64]shard.Command),
	}
	reserving := newGroupSet()
	for _, g := range []uint64{1, 2, 3, 4, 5} { // 5: its topic was deleted
		reserving.add(g)
	}
	e := &reservationExpiry{timeout: timeout, reserving: reserving, shards: f,
		log: quietLog(), now: func() time.Time { return now }}
	e.check()

	if len(f.proposed) != 1 {
		t.Fatalf("proposed to groups %v, want group 1 alone", f.proposed)
	}
	if cmd := f.proposed[1]; cmd.Op != shard.OpExpire || cmd.OlderThan != cutoff {
		t.Errorf("proposed %+v, want OpExpire older than %d", cmd, cutoff)
	}
	if got := reserving.list(); slices.Contains(got, 5) || len(got) != 4 {
		t.Errorf("groups holding reservations: %v, want 1 to 4 (5's topic is gone)", got)
	}
}

// TestExpirySkipsShardsThatDoNotServe: a shard still opening is not
// asked, and a failed proposal does not stop the others.
func TestExpirySkipsShardsThatDoNotServe(t *testing.T) {
	now := time.Unix(1000, 0)
	var p openProgress
	opening := &shardRuntime{name: "opening", group: 1, local: true, open: p.start()}
	f := &fakeReserving{
		shards:   map[uint64]*shardRuntime{1: opening, 2: servingShard(2), 3: servingShard(3)},
		led:      map[uint64]bool{1: true, 2: true, 3: true},
		oldest:   map[uint64]int64{1: 0, 2: 0, 3: 0},
		proposed: make(map[uint64]shard.Command),
		err:      errors.New("no quorum"),
	}
	reserving := newGroupSet()
	for _, g := range []uint64{1, 2, 3} {
		reserving.add(g)
	}
	e := &reservationExpiry{timeout: time.Second, reserving: reserving, shards: f,
		log: quietLog(), now: func() time.Time { return now }}
	e.check()
	if _, ok := f.proposed[1]; ok || len(f.proposed) != 2 {
		t.Errorf("proposed to groups %v, want 2 and 3", f.proposed)
	}
}

// TestExpiryRunStopsOnStop: run returns once stop is closed.
func TestExpiryRunStopsOnStop(t *testing.T) {
	e := &reservationExpiry{timeout: time.Millisecond, reserving: newGroupSet(), now: time.Now}
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		e.run(stop)
	}()
	time.Sleep(5 * time.Millisecond)
	close(stop)
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("run did not return after stop")
	}
}
