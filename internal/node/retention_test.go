package node

import (
	"context"
	"slices"
	"testing"
	"time"

	"herald/internal/controller"
	"herald/internal/shard"
	"herald/internal/topic"
)

// fakeRetention is a node's shards as the retention trim sees them.
type fakeRetention struct {
	topics    []*topicRuntime
	shards    map[uint64]*shardRuntime
	led       map[uint64]bool
	retaining map[uint64]bool
	oldest    map[uint64]int64 // by group; absent: nothing retained beyond the cursors
	proposed  map[uint64]shard.Command
	set       *groupSet // the retaining set, which the View updates
}

func (f *fakeRetention) topicList() []*topicRuntime { return f.topics }

func (f *fakeRetention) shard(group uint64) (*shardRuntime, bool) {
	s, ok := f.shards[group]
	return s, ok
}

func (f *fakeRetention) lookup(name string) (*topicRuntime, error) {
	for _, tr := range f.topics {
		if tr.info.Name == name {
			return tr, nil
		}
	}
	return nil, controller.NotFoundError(name)
}

func (f *fakeRetention) leads(s *shardRuntime) bool { return f.led[s.group] }

func (f *fakeRetention) retention(_ context.Context, s *shardRuntime) (bool, int64, bool) {
	if !f.retaining[s.group] {
		f.set.remove(s.group)
		return false, 0, false
	}
	o, ok := f.oldest[s.group]
	return true, o, ok
}

func (f *fakeRetention) proposeShard(_ context.Context, s *shardRuntime, cmd *shard.Command) (shard.Result, error) {
	f.proposed[s.group] = *cmd
	return shard.Result{}, nil
}

// topicWith is a topic whose shards are the given serving shards.
func topicWith(name string, retention int64, shards ...*shardRuntime) *topicRuntime {
	for _, s := range shards {
		s.topic = name
	}
	return &topicRuntime{info: controller.Topic{Name: name, Attributes: topic.Attributes{Retention: retention}}, shards: shards}
}

// The trim proposes the cutoff, now less the retention, to the shards it
// leads of topics with retention that do not retain yet or retain
// something older; RetainNone to those that retain though their topic's
// retention is 0; nothing else. A group whose topic is gone, or that no
// longer retains, leaves the set.
func TestRetentionTrimProposesOnlyWhereDue(t *testing.T) {
	now := time.Unix(10_000, 0)
	cutoff := now.Add(-time.Hour).UnixNano()
	s := map[uint64]*shardRuntime{}
	for g := uint64(1); g <= 8; g++ {
		s[g] = servingShard(g)
	}
	set := newGroupSet()
	for _, g := range []uint64{2, 3, 6, 7, 9} { // 9: its topic was deleted
		set.add(g)
	}
	f := &fakeRetention{
		// orders keeps an hour: 1 does not retain yet, 2 retains
		// something older than the cutoff, 3 nothing older, 4 is led
		// elsewhere. audit keeps nothing: 6 still retains, 7 no longer
		// does, 8 never did.
		topics: []*topicRuntime{
			topicWith("orders", 3600, s[1], s[2], s[3], s[4]),
			topicWith("audit", 0, s[6], s[7], s[8]),
		},
		shards:    s,
		led:       map[uint64]bool{1: true, 2: true, 3: true, 6: true, 7: true, 8: true},
		retaining: map[uint64]bool{2: true, 3: true, 4: true, 6: true},
		oldest:    map[uint64]int64{2: cutoff - 1, 3: cutoff, 4: 0, 6: 0},
		proposed:  map[uint64]shard.Command{},
		set:       set,
	}
	r := &retentionTrim{retaining: set, shards: f, log: quietLog(), now: func() time.Time { return now }}
	r.check()

	want := map[uint64]shard.Command{
		1: {Op: shard.OpRetain, OlderThan: cutoff},
		2: {Op: shard.OpRetain, OlderThan: cutoff},
		6: {Op: shard.OpRetain, OlderThan: shard.RetainNone},
	}
	if len(f.proposed) != len(want) {
		t.Errorf("proposed to groups %v, want %v", f.proposed, want)
	}
	for g, cmd := range want {
		if got, ok := f.proposed[g]; !ok || got.Op != cmd.Op || got.OlderThan != cmd.OlderThan {
			t.Errorf("group %d: proposed %+v, want %+v", g, got, cmd)
		}
	}
	if got := slices.Sorted(slices.Values(set.list())); !slices.Equal(got, []uint64{2, 3, 6}) {
		t.Errorf("retaining groups %v, want 2 3 6 (7 retains no more, 9's topic is gone)", got)
	}
}

// TestRetentionTrimRunStopsOnStop: run returns once stop is closed.
func TestRetentionTrimRunStopsOnStop(t *testing.T) {
	r := &retentionTrim{retaining: newGroupSet(), shards: &fakeRetention{}, now: time.Now}
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		r.run(stop)
	}()
	close(stop)
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("run did not return after stop")
	}
}
