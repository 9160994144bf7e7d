package consume

import (
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"herald/internal/shard"
)

// Leases holds a shard's pull leases: a table for each subscription that
// pull consumers fetch from, made at its first fetch or ack. Each
// subscription reads the shard through its own cursor, so its leases, and
// the index of its pending events, are its own: one subscription's
// leases never hide or hold back another's events.
//
// Leases live in the memory of the node that leads the shard: after a
// restart or a change of leader they are gone and the events are handed
// out again (at-least-once). Acks, which are what must not be lost, go
// through the shard's log, and every replica drops the leases of the
// events an ack names as it applies it (Applied), wherever the ack was
// made: the leader's table holds no lease on an acknowledged event.
//
// Each lease has a number, which the delivery's receipt carries with the
// subscription (topic.SubscriptionReceipt). An ack of a receipt is checked
// here, on the leader, before it is proposed (HoldForAck): it may end only
// its own lease, or no lease at all, never the lease of a consumer the
// event was handed to since. An ack that named the event id alone would end any lease, and the
// key's next event could then go to another consumer while the earlier
// one is still on its way to its current holder.
type Leases struct {
	mu     sync.Mutex
	tables map[uint64]*table // by subscription

	// seeks counts the seeks applied here, by subscription, and restores
	// the snapshots restored, which may hold seeks this replica never
	// applied; seeked holds, by subscription, a channel closed at its next
	// seek or restore. See Seeks.
	seeks    map[uint64]uint64
	restores uint64
	seeked   map[uint64]chan struct{}

	// entries, if not nil, caches the log entries the shard's fetches
	// read, with other shards' of the node.
	entries *EntryCache
	// leading is whether this node leads the shard, as the node last
	// told (Lead): only a leader's fetches read the entries it applies.
	leading atomic.Bool
	// needed is the shard's CompactIndex as Cached last saw it; only the
	// group's loop uses it.
	needed uint64
}

// NewLeases returns a shard's lease tables, none made yet. Its fetches
// read the shard's log through entries, the node's cache, unless it is
// nil.
func NewLeases(entries *EntryCache) *Leases {
	return &Leases{tables: make(map[uint64]*table), entries: entries}
}

// table returns subscription sub's table, made empty if it has none.
func (l *Leases) table(sub uint64) *table {
	l.mu.Lock()
	defer l.mu.Unlock()
	t, ok := l.tables[sub]
	if !ok {
		t = newTable()
		l.tables[sub] = t
	}
	return t
}

// existing returns subscription sub's table, or nil: what an applied
// command changes in a table that holds no lease is nothing, so it needs
// none made (followers make none).
func (l *Leases) existing(sub uint64) *table {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.tables[sub]
}

// all returns every table.
func (l *Leases) all() []*table {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make([]*table, 0, len(l.tables))
	for _, t := range l.tables {
		out = append(out, t)
	}
	return out
}

// drop forgets subscription sub's table: its cursor started or ended, and
// what the table holds is of a cursor that is no more. A fetch running
// meanwhile leases from the table it holds, whose leases are then lost,
// as with a change of leader.
func (l *Leases) drop(sub uint64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.tables, sub)
}

// DropIdle forgets the tables that hold no lease beyond now: what is
// left in them is the index, which a fetch builds again, and the attempt
// counts of leases that lapsed. The node calls it on a shard it stopped
// leading, whose consumers fetch from the new leader now: the tables of
// a shard it no longer leads would only hold memory, for as long as their
// subscriptions live. Tables with live leases stay, so that a leader
// elected again still keeps its consumers' events from others. It drops
// the shard's entries from the node's cache too, for the same reason.
func (l *Leases) DropIdle(now time.Time) {
	l.DropEntries()
	l.mu.Lock()
	defer l.mu.Unlock()
	for sub, t := range l.tables {
		if t.count(now) == 0 {
			delete(l.tables, sub)
		}
	}
}

// HoldForAck decides which receipts an ack in subscription sub may act
// on: receipt i names the event at offsets[i] and its lease numbers[i].
// An ack may act on a receipt whose lease is still the event's, and on one
// of an event that no consumer holds now (its lease expired, or was lost
// with a former leader); those events are held for the ack until it
// applies (Applied), so that no fetch hands one out meanwhile, and their
// offsets are returned, the ones that were not held by that receipt's
// lease before in fresh. The others lapsed: the event was handed out
// again, and its holder acks it; their positions are returned.
func (l *Leases) HoldForAck(sub uint64, offsets, numbers []uint64, now time.Time) (held, fresh []uint64, lapsed []int) {
	return l.table(sub).holdForAck(offsets, numbers, now)
}

// Nack ends the leases of offsets in subscription sub early. numbers, if
// not nil, holds the lease numbers of the receipts that named them (0 for
// an event id): a receipt ends its own lease only.
func (l *Leases) Nack(sub uint64, offsets, numbers []uint64) {
	if t := l.existing(sub); t != nil {
		t.nack(offsets, numbers)
	}
}

// Count returns how many events are leased beyond now, in all
// subscriptions.
func (l *Leases) Count(now time.Time) int {
	n := 0
	for _, t := range l.all() {
		n += t.count(now)
	}
	return n
}

// DropEntries drops the shard's entries from the node's cache. The node
// calls it when it removes the shard (its topic was deleted, or its
// replica moved off the node): nothing reads them there any more.
func (l *Leases) DropEntries() {
	if l.entries != nil {
		l.entries.drop(l)
	}
}

// Lead tells the leases whether this node leads the shard now, which
// decides whether Cached caches the entries it applies. A node that
// stops leading drops the shard's entries with DropIdle.
func (l *Leases) Lead(leading bool) { l.leading.Store(leading) }

// Cached tells the node's cache of entries of the entry the shard
// applied at index, decoded as cmd, and of the lowest index worth
// caching, needed: the shard's CompactIndex (below it, every
// subscription has read the entries), or higher (see the node's
// shardMachine.cachedFrom). On the leader, it caches an entry of events
// while the cache has room without pushing others out: the fetches of a
// consumer that keeps up read them moments later, and those of a backlog
// read its oldest first, which are cached first. It drops the shard's
// entries below needed, so that the room they took goes to the entries
// still to be read. It runs on the group's loop.
func (l *Leases) Cached(index uint64, cmd shard.Command, r shard.Result, needed uint64) {
	if l.entries == nil {
		return
	}
	if needed > l.needed {
		l.needed = needed
		l.entries.dropBelow(l, needed)
	}
	if r.Err == nil && len(cmd.Events) > 0 && index >= needed && l.leading.Load() {
		l.entries.put(entryKey{l, index}, cmd, false)
	}
}

// Applied tells the leases of a command the shard applied with result r.
// An ack, a skip or a dead letter drops the leases of the events it made
// done for its subscription. A subscription whose cursor starts, ends or
// seeks loses its table: a cursor started again (a default subscription
// attached again) starts where the old table's index knows nothing of. It
// runs on the group's loop.
func (l *Leases) Applied(cmd *shard.Command, r shard.Result) {
	if r.Err != nil {
		return // a rejected command changes nothing
	}
	switch cmd.Op {
	case shard.OpAck, shard.OpSkip:
		if t := l.existing(cmd.Subscription); t != nil {
			t.acked(cmd.Offsets)
		}
	case shard.OpDeadLetter:
		if t := l.existing(cmd.Subscription); t != nil {
			offsets := make([]uint64, len(cmd.Dead))
			for i, d := range cmd.Dead {
				offsets[i] = d.Offset
			}
			t.acked(offsets)
		}
	case shard.OpSubscribe, shard.OpUnsubscribe:
		if r.Count > 0 {
			l.drop(cmd.Subscription)
		}
	case shard.OpSeek:
		// The cursor moved, perhaps backwards past events the index
		// counts as acknowledged: the subscription starts over with a
		// table of its events as they are now, and an ack of a lease
		// handed out before the seek finds no lease to end.
		l.mu.Lock()
		delete(l.tables, cmd.Subscription)
		if l.seeks == nil {
			l.seeks = make(map[uint64]uint64)
		}
		l.seeks[cmd.Subscription]++
		if ch, ok := l.seeked[cmd.Subscription]; ok {
			close(ch)
			delete(l.seeked, cmd.Subscription)
		}
		l.mu.Unlock()
	}
}

// Seeks returns a number that changes whenever subscription sub's cursor
// may have been moved by a seek (OpSeek) on this replica, and a channel
// closed when it next changes: a reader that reads ahead of the cursor,
// such as a push dispatcher, compares the number with the one it read
// before to know that it must read again from the head, and waits on the
// channel to learn of a seek however it was proposed. The number is of
// this node's memory alone, not replicated: compare it only with earlier
// values from the same Leases.
func (l *Leases) Seeks(sub uint64) (n uint64, changed <-chan struct{}) {
	l.mu.Lock()
	defer l.mu.Unlock()
	ch, ok := l.seeked[sub]
	if !ok {
		if l.seeked == nil {
			l.seeked = make(map[uint64]chan struct{})
		}
		ch = make(chan struct{})
		l.seeked[sub] = ch
	}
	return l.seeks[sub] + l.restores, ch
}

// Restored tells the leases that the shard's state was replaced by a
// snapshot: the acks it brought dropped no lease, so every index, which
// learns of acknowledged fronts from ended leases, is rebuilt before the
// next fetch reads it. The shard's entries are dropped from the node's
// cache as well: being of committed events, none can differ from the log
// restored, but nothing read before a restore then needs to be reasoned
// about after it. It runs on the group's loop.
func (l *Leases) Restored() {
	l.DropEntries()
	l.mu.Lock()
	l.restores++
	for _, ch := range l.seeked {
		close(ch)
	}
	clear(l.seeked)
	l.mu.Unlock()
	for _, t := range l.all() {
		t.restored()
	}
}

// A table holds one subscription's leases on a shard, and the index of
// its pending events that fetches read (see keyIndex).
type table struct {
	// indexing serializes the reads of the log that extend the index; see
	// Shard.Fetch. It is held across reads of the group's state, which is
	// why the group's loop, applying acks, takes only mu.
	indexing sync.Mutex

	mu sync.Mutex
	// events holds, by offset, what the table knows of each event it
	// leased and that is not done: one map rather than one for each of
	// the lease's expiry, number, run and attempts, since a fetch and the
	// ack of each event it hands out reach all of them.
	events map[uint64]eventLease
	// last is the number of the latest lease. It starts at random, so that
	// the numbers of leases handed out by different leaders of the shard
	// do not meet.
	last uint64
	// index finds the events a fetch may lease (see keyIndex).
	index *keyIndex
	// swept is the head below which no lease is held, as of the last
	// sweep (see forgetBelow).
	swept uint64
	// epoch is an hour before the table was made: lease expiries are kept
	// as nanoseconds since (clock), on the monotonic clock, so that a step
	// of the wall clock neither ends leases early nor prolongs them. The
	// hour puts after it the times taken just before the table was made,
	// such as the now of the fetch or ack that makes it.
	epoch time.Time
}

// clock returns the time at as the table keeps expiries: nanoseconds
// since its epoch, by the monotonic clock. Every time the table is given
// is after the epoch, so 0 is never an expiry, and no lease looks held
// beyond a now.
func (t *table) clock(at time.Time) int64 { return int64(at.Sub(t.epoch)) }

// An eventLease is what a table knows of an event: its lease, if it has
// one (expired or not), and how many times it was handed out, which
// outlives the leases.
type eventLease struct {
	until    int64  // when the lease expires (table.clock); 0: no lease
	number   uint64 // the lease's number
	attempts uint32 // times handed out
	// run is the run the lease is of, and i its place there; nil if none.
	run *run
	i   int
}

// leased reports whether e holds a lease beyond now (table.clock).
func (e eventLease) leased(now int64) bool { return e.until > now }

func newTable() *table {
	return &table{
		events: make(map[uint64]eventLease),
		last:   rand.Uint64() >> 2, // room for 2^62 leases before wrapping
		index:  newKeyIndex(0),
		epoch:  time.Now().Add(-time.Hour),
	}
}

// A run is the events of one key that one fetch leased together, in
// offset order, under one expiry: its consumer has the key's events from
// the first of them to the last. A nack of one of them ends the leases of
// the later ones too (table.nack), so that they go out again together, in
// order, never to another consumer while an earlier one is out.
type run struct {
	offsets []uint64
	// numbers are the numbers of their leases; 0 for an event that left
	// the run, held for its ack (table.holdForAck).
	numbers []uint64
}

// lease leases the event at offset until then, as the i-th of run r
// (none if nil), and returns the lease's number and the times the event
// has been handed out, this one included. The caller holds t.mu.
func (t *table) lease(offset uint64, then time.Time, r *run, i int) (number uint64, attempts uint32) {
	t.last++
	if t.last == 0 {
		t.last++ // 0 means no lease in a receipt
	}
	e := t.events[offset]
	e.until, e.number, e.run, e.i = t.clock(then), t.last, r, i
	e.attempts++
	t.events[offset] = e
	return e.number, e.attempts
}

// holdForAck is Leases.HoldForAck in the table.
func (t *table) holdForAck(offsets, numbers []uint64, now time.Time) (held, fresh []uint64, lapsed []int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	// Long enough for the ack to commit, short enough that an ack that
	// never does only delays the event's next delivery.
	nowNs, hold := t.clock(now), t.clock(now.Add(DefaultVisibility))
	for i, o := range offsets {
		e := t.events[o]
		own := e.until != 0 && e.number == numbers[i]
		if e.leased(nowNs) && !own {
			lapsed = append(lapsed, i)
			continue
		}
		if !own {
			fresh = append(fresh, o)
		}
		// Held for its ack now, the event leaves its run: a nack of an
		// earlier event of the run must not end that hold.
		if e.run != nil {
			e.run.numbers[e.i] = 0
			e.run = nil
		}
		if !own || e.until < hold {
			e.until = hold
		}
		e.number = numbers[i]
		t.events[o] = e
		held = append(held, o)
	}
	return held, fresh, lapsed
}

// nack is Leases.Nack in the table. A lease of a run ends with the
// leases of the run's later events still held by it: they are handed out
// again together, in order.
func (t *table) nack(offsets, numbers []uint64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for i, o := range offsets {
		e := t.events[o]
		if numbers != nil && numbers[i] != 0 && e.number != numbers[i] {
			continue
		}
		t.end(o)
		if e.run == nil {
			continue
		}
		r := e.run
		for j := e.i + 1; j < len(r.offsets); j++ {
			if later := r.offsets[j]; r.numbers[j] != 0 && t.events[later].number == r.numbers[j] {
				t.end(later)
			}
		}
	}
}

// end ends the lease of the event at offset, if it has one. The caller
// holds t.mu.
func (t *table) end(offset uint64) {
	if e, ok := t.events[offset]; ok {
		if e.attempts == 0 {
			delete(t.events, offset)
		} else {
			t.events[offset] = eventLease{attempts: e.attempts}
		}
	}
	t.index.released(offset)
}

// unlease takes back leases a fetch could not hand out: as if they had
// not been made, but for the numbers they used.
func (t *table) unlease(picks []pick) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, p := range picks {
		o := p.offset
		e := t.events[o]
		if e.until == 0 || e.number != p.number {
			continue // ended, or replaced, since
		}
		t.events[o] = eventLease{attempts: e.attempts - 1}
		t.end(o)
	}
}

// count returns how many events are leased beyond now.
func (t *table) count(now time.Time) int {
	t.mu.Lock()
	defer t.mu.Unlock()
	nowNs := t.clock(now)
	n := 0
	for _, e := range t.events {
		if e.leased(nowNs) {
			n++
		}
	}
	return n
}

// forgetBelow drops the leases of events below head, which are done:
// those that no ack dropped, such as the acks a snapshot brought. It
// looks at every lease, so it does so once the head has moved on by as
// many events since it last did. The caller holds t.mu.
func (t *table) forgetBelow(head uint64) {
	if head < t.swept+uint64(len(t.events)) {
		return
	}
	for o := range t.events {
		if o < head {
			delete(t.events, o)
		}
	}
	t.swept = head
}

// acked drops the leases of the events an applied ack acknowledged, a
// skip passed over or a dead letter gave up on. It runs on the group's
// goroutine.
func (t *table) acked(offsets []uint64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, o := range offsets {
		delete(t.events, o)
		t.index.released(o)
	}
}

// restored marks the index stale: see Leases.Restored.
func (t *table) restored() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.index.stale = true
}
