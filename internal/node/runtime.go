package node

import (
	"fmt"
	"slices"
	"sync"
	"sync/atomic"

	"herald/internal/consume"
	"herald/internal/controller"
	"herald/internal/topic"
)

// controllerMachine is the controller state machine plus a signal that it
// changed, which the node's watcher turns into a reconcile.
type controllerMachine struct {
	*controller.State
	changed chan struct{}
}

func newControllerMachine() *controllerMachine {
	return &controllerMachine{State: controller.New(), changed: make(chan struct{}, 1)}
}

func (m *controllerMachine) Apply(index uint64, data []byte) any {
	r := m.State.Apply(index, data)
	m.signal()
	return r
}

func (m *controllerMachine) Restore(data []byte) error {
	if err := m.State.Restore(data); err != nil {
		return err
	}
	m.signal()
	return nil
}

func (m *controllerMachine) signal() {
	select {
	case m.changed <- struct{}{}:
	default:
	}
}

// topicRuntime is what the request paths need of a topic: its attributes
// and its shards. It is replaced, not mutated, when attributes change.
type topicRuntime struct {
	info   controller.Topic
	shards []*shardRuntime
	events *broadcast // signalled when events are published or leases end
	rr     *atomic.Uint32
}

// newTopicRuntime returns the runtime of topic t on node self, whose
// fetches read the shards' logs through entries.
func newTopicRuntime(t controller.Topic, self uint64, entries *consume.EntryCache) *topicRuntime {
	tr := &topicRuntime{info: t, events: newBroadcast(), rr: new(atomic.Uint32)}
	for i := range t.Attributes.Shards {
		replicas := t.Replicas(i)
		tr.shards = append(tr.shards, &shardRuntime{
			topic: t.Name, index: i, name: topic.ShardName(t.Name, i),
			group: t.Group(i), replicas: replicas, local: slices.Contains(replicas, self),
			leases: consume.NewLeases(entries), stats: new(statsCache),
		})
	}
	return tr
}

// withInfo returns a copy with new attributes and the same shards, but
// for those whose replicas moved, which get new runtimes with the same
// leases (the request paths read a shard's runtime without locks, so it
// is replaced, not changed).
func (tr *topicRuntime) withInfo(t controller.Topic, self uint64) *topicRuntime {
	c := *tr
	c.info = t
	c.shards = slices.Clone(tr.shards)
	for i, s := range c.shards {
		if r := t.Replicas(i); !slices.Equal(r, s.replicas) {
			moved := *s
			moved.replicas, moved.local = r, slices.Contains(r, self)
			if !moved.local {
				moved.open = nil
			}
			c.shards[i] = &moved
		}
	}
	return &c
}

func (tr *topicRuntime) shardFor(key string) *shardRuntime {
	return tr.shards[topic.ShardFor(key, len(tr.shards))]
}

// shardRuntime is one shard as this node serves it.
type shardRuntime struct {
	topic    string
	index    int
	name     string
	group    uint64
	replicas []uint64 // the nodes that hold the shard, the preferred leader first
	local    bool     // this node holds a replica
	// open is the opening of the shard's group on this node, shared by
	// every runtime of the shard; nil for a shard not held here.
	open   *shardOpen
	leases *consume.Leases
	stats  *statsCache // shared by every runtime of the shard
}

// statsCache holds a shard's last counters, and each subscription's,
// and the applied index they are of. The counters change only as the
// group applies entries (or a snapshot), so while that index stays put
// they are read without waking the group: the dashboard reads every
// shard, and every subscription's view of it, every few seconds, and most
// of ten thousand shards are idle. Whatever it holds is of one applied
// index: a read at another replaces it all.
type statsCache struct {
	mu       sync.Mutex
	applied  uint64
	hasShard bool // stats and lro were read at applied
	stats    QueueStats
	lro      uint64                // the shard's LRO (tiering)
	cursors  map[uint64]QueueStats // by subscription ID, read at applied
}

// at makes the cache hold what was read at applied, forgetting anything
// read at another index. The caller holds c.mu.
func (c *statsCache) at(applied uint64) {
	if c.applied != applied {
		c.applied, c.hasShard, c.cursors = applied, false, nil
	}
}

// get returns the counters and the LRO if they are of applied.
func (c *statsCache) get(applied uint64) (QueueStats, uint64, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.stats, c.lro, c.hasShard && c.applied == applied
}

func (c *statsCache) put(applied uint64, st QueueStats, lro uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.at(applied)
	c.hasShard, c.stats, c.lro = true, st, lro
}

// getCursors fills out[i].Stats with the counters of subscription ids[i]
// and reports true if it holds them all as of applied; otherwise it
// leaves out alone.
func (c *statsCache) getCursors(applied uint64, ids []uint64, out []ShardStats) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.applied != applied {
		return false
	}
	for _, id := range ids {
		if _, ok := c.cursors[id]; !ok {
			return false
		}
	}
	for i, id := range ids {
		out[i].Stats = c.cursors[id]
	}
	return true
}

// putCursors records the counters of the subscriptions ids, read at
// applied, where out[i] are those of ids[i].
func (c *statsCache) putCursors(applied uint64, ids []uint64, out []ShardStats) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.at(applied)
	if c.cursors == nil {
		c.cursors = make(map[uint64]QueueStats, len(ids))
	}
	for i, id := range ids {
		if out[i].Err == nil {
			c.cursors[id] = out[i].Stats
		}
	}
}

// shardOpen is the opening of a local shard's group, which runs in the
// background (at boot, that of every shard, a few at a time): until it
// has finished, requests to the shard are refused as still opening rather
// than made to wait.
type shardOpen struct {
	done     atomic.Bool
	err      error // why the group could not be opened; written before done
	progress *openProgress
}

// openProgress counts the local shards and those whose opening has
// finished, for /readyz and for the errors of shards still opening.
type openProgress struct {
	finished, total atomic.Int64
	failed          atomic.Int64 // finished with an error
}

func (p *openProgress) start() *shardOpen {
	p.total.Add(1)
	return &shardOpen{progress: p}
}

// finish ends the opening of a shard: it serves, or, with err, it cannot.
func (o *shardOpen) finish(err error) {
	o.err = err
	o.done.Store(true)
	if err != nil {
		o.progress.failed.Add(1)
	}
	o.progress.finished.Add(1)
}

// forget stops counting a shard that is no longer held here.
func (o *shardOpen) forget() {
	o.progress.total.Add(-1)
	if o.done.Load() {
		o.progress.finished.Add(-1)
		if o.err != nil {
			o.progress.failed.Add(-1)
		}
	}
}

// openErr returns why the shard's group could not be opened: nil if it
// was, or if it is still opening.
func (s *shardRuntime) openErr() error {
	if s.open == nil || !s.open.done.Load() {
		return nil
	}
	return s.open.err
}

// serves reports whether this node runs the shard's group: it holds a
// replica, which has opened.
func (s *shardRuntime) serves() bool {
	return s.local && s.open != nil && s.open.done.Load() && s.open.err == nil
}

// unservable returns why a local shard cannot serve now: it is still
// opening, or could not be opened. nil if it serves.
func (s *shardRuntime) unservable() error {
	if !s.local || s.open == nil || s.serves() {
		return nil
	}
	if !s.open.done.Load() {
		p := s.open.progress
		return fmt.Errorf("%w: shard %s is still opening (%d of %d open); retry shortly",
			ErrUnavailable, s.name, p.finished.Load(), p.total.Load())
	}
	return fmt.Errorf("%w: shard %s could not be opened when the node started, and is not served until a restart finds it repaired: %v",
		ErrUnavailable, s.name, s.open.err)
}

// broadcast wakes every waiter at once: long-polling fetches wait on it.
type broadcast struct {
	mu     sync.Mutex
	ch     chan struct{}
	waited bool // ch was handed out since the last signal
}

func newBroadcast() *broadcast { return &broadcast{ch: make(chan struct{})} }

// wait returns a channel closed at the next signal.
func (b *broadcast) wait() <-chan struct{} {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.waited = true
	return b.ch
}

// signal wakes the waiters. With none (the usual case while publishers
// outpace consumers) it changes nothing: every publish signals, and a
// new channel each time would be an allocation per publish.
func (b *broadcast) signal() {
	b.mu.Lock()
	if b.waited {
		close(b.ch)
		b.ch = make(chan struct{})
		b.waited = false
	}
	b.mu.Unlock()
}
