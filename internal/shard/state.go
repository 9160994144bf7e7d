package shard

import (
	"cmp"
	"fmt"
	"maps"
	"math"
	"slices"
	"sort"
	"strings"
)

// State is the state machine of one shard. The zero value is an empty
// shard, as is the result of New. A State is not safe for concurrent use,
// but the function SnapshotFunc returns may run concurrently with it.
//
// So that SnapshotFunc is cheap however long the queue, everything that
// grows with the queue is kept in memory that a frozen copy of the state
// (see freeze) can share: State copies such memory before it first writes
// it after a freeze, or writes only parts no frozen copy reads.
type State struct {
	applied         uint64 // log index of the last applied command
	nextOffset      uint64 // offset the next appended event gets
	lastReservation uint64 // id of the most recent reservation

	// reservations is shared with a frozen copy if resShared is set, and
	// then copied before it is changed.
	reservations  map[uint64]reservation
	resShared     bool
	reservedBytes int64

	// def is the cursor of the topic's default subscription (id 0), kept
	// in place because most shards have no other. If detached is set the
	// default subscription was deleted: def then holds nothing and its
	// head follows the next offset. subs are the cursors of the other
	// subscriptions, in id order; a frozen copy has copies of its own.
	def      cursor
	detached bool
	subs     []*cursor

	// runs map offsets to the log entries holding them, one run per Commit
	// or Publish, in offset order. They cover exactly [logStart,
	// nextOffset): runs wholly below every cursor's head and every
	// retained event are dropped. A run never changes once appended, and
	// runs are only appended and dropped from the front, so frozen copies
	// share the array as it is.
	runs     []run
	runsDead int // see dropFront

	// keys holds the KeyHash of the event at each offset from keysFrom
	// to nextOffset, so that readers that tell keys apart need not read
	// the events (see KeyHashOf). keysFrom is logStart, the keys of the
	// events no longer held being dropped with their runs, except in a
	// state restored from a snapshot that did not record keys: then it
	// starts at that snapshot's next offset. Like runs, keys is only
	// appended to and dropped from the front.
	keys     keyList
	keysFrom uint64

	// dedup is the de-duplication table: the dedup ids of recent
	// publishes, in the order they were recorded (see dedup.go). Like
	// runs it is only appended to and dropped from the front, so frozen
	// copies share the array as it is. dedupIndex maps an id to the
	// sequence number of its latest entry, dedupFirst being that of
	// dedup[0]; frozen copies do not need it.
	dedup        []dedupEntry
	dedupFirst   uint64
	dedupIndex   map[string]uint64
	dedupDropped int // see dropFront

	// If retaining is set the shard keeps the events published from
	// retainFrom on, whether or not a cursor holds them, for
	// subscriptions that start or seek back there (see retain.go).
	// retained holds, for each offset in [retainFrom, nextOffset), the
	// event's Size, or acked for one that is not retained: an event
	// freed before retention began, or the copy of a dead letter replayed
	// for one subscription since (one pending when retention began cannot
	// be told from an event, and is retained). It is only appended to and
	// dropped from the front, like runs, so it needs no copy on write
	// beyond what pendingList.freeze does.
	retaining  bool
	retainFrom uint64
	retained   pendingList

	// lro is the last reconciled log index: every entry at or below it
	// is in the object store (see tier.go). 0 means none is.
	lro uint64

	// yield, set only on the captures SnapshotFunc encodes, is called
	// between blocks of the lists that grow with the queue as they are
	// encoded (see yieldBlock).
	yield func()
}

// acked marks a done entry of a cursor's pending list: acknowledged,
// skipped or moved to the dead-letter queue, or an event that was never
// the cursor's. Sizes are never negative.
const acked = -1

// A deadLetter is a DeadLetter with the size it counts for.
type deadLetter struct {
	DeadLetter
	size int64
}

// MaxDeadLetterText is the longest Reason or LastError, in bytes, that a
// dead letter keeps; longer ones are cut at the last whole UTF-8 sequence
// that fits. Dead letters live in the shard's snapshots, which must stay
// small however verbose an endpoint's errors are.
const MaxDeadLetterText = 1024

type reservation struct {
	bytes int64
	count int
	time  int64
}

// A run is a block of consecutive offsets appended by one log entry.
type run struct {
	first uint64 // offset of the entry's first event
	count uint64 // number of events in the entry
	index uint64 // log index of the entry
	time  int64  // the entry's Command.Time
}

func (r *run) end() uint64 { return r.first + r.count }

// A Result reports the outcome of applying one command.
type Result struct {
	ReservationID uint64 // Reserve: the new reservation's id

	// FirstOffset is, for Commit, Publish and a ReplayDead of at least one
	// event, the offset assigned to the first event; the others follow
	// consecutively, in order. For a Seek it is the offset the cursor
	// went to (before moving past events done for it).
	FirstOffset uint64

	// Count is, for Commit, Publish and ReplayDead, the number of events
	// appended; for Ack, the number of events newly acknowledged; for
	// Abort and Expire, the number of reservations released; for Attempt,
	// the number of failed attempts recorded; for DeadLetter, the number
	// of events moved to the dead-letter queue; for PurgeDead, the number
	// of dead letters deleted; for Retain, the number of offsets no
	// longer retained; for Seek, the number of events made pending again.
	Count int

	// Duplicates are, for a Publish with dedup ids, the events whose ids
	// repeat ones published within the window, with the offsets those
	// got. If every event is a duplicate the Publish succeeds with Count
	// 0; if only some are, it is rejected with ErrPartialDuplicate.
	Duplicates []Duplicate

	// Time is, for a Seek, the publish time of the event at FirstOffset,
	// where the cursor went; 0 if the shard holds no event from there.
	// With it a seek to an event of one shard goes to the same time on
	// the others.
	Time int64

	// Err is non-nil if the command was rejected. The state is then
	// unchanged, except that Applied has advanced to the command's index.
	Err error
}

// New returns an empty shard.
func New() *State {
	return &State{reservations: make(map[uint64]reservation)}
}

// Apply applies cmd, carried by the log entry at index, and reports the
// outcome.
//
// Index must be greater than Applied; otherwise Apply rejects the command
// with ErrInvalidCommand and changes nothing, not even Applied. Any other
// rejection still records index as applied. A nil cmd is a no-op that only
// records index as applied, for log entries that carry no command (such as
// the empty entry a new Raft leader appends).
func (s *State) Apply(index uint64, cmd *Command) Result {
	if index <= s.applied {
		return reject(fmt.Errorf("%w: log index %d is not after applied index %d", ErrInvalidCommand, index, s.applied))
	}
	s.applied = index
	if cmd == nil {
		return Result{}
	}
	switch cmd.Op {
	case OpReserve:
		return s.reserve(cmd)
	case OpCommit:
		return s.commit(index, cmd)
	case OpAbort:
		return s.abort(cmd)
	case OpPublish:
		return s.publish(index, cmd)
	case OpAck:
		return s.ack(cmd)
	case OpExpire:
		return s.expire(cmd)
	case OpAttempt:
		return s.attempt(cmd)
	case OpDeadLetter:
		return s.deadLetter(cmd)
	case OpReplayDead:
		return s.replayDead(index, cmd)
	case OpPurgeDead:
		return s.purgeDead(cmd)
	case OpSkip:
		return s.ack(cmd)
	case OpSubscribe:
		return s.subscribe(cmd)
	case OpUnsubscribe:
		return s.unsubscribe(cmd)
	case OpRetain:
		return s.retain(cmd)
	case OpSeek:
		return s.seek(cmd)
	case OpTierAdvance:
		return s.tierAdvance(index, cmd)
	}
	return reject(fmt.Errorf("%w: unknown op %d", ErrInvalidCommand, cmd.Op))
}

func reject(err error) Result { return Result{Err: err} }

func (s *State) reserve(c *Command) Result {
	switch {
	case c.Bytes < 0:
		return reject(fmt.Errorf("%w: reserve of negative bytes %d", ErrInvalidCommand, c.Bytes))
	case c.Count < 0:
		return reject(fmt.Errorf("%w: reserve of negative count %d", ErrInvalidCommand, c.Count))
	case c.MaxQueueBytes < 0:
		return reject(fmt.Errorf("%w: negative max queue bytes %d", ErrInvalidCommand, c.MaxQueueBytes))
	}
	if err := s.checkSpace(c.Bytes, c.MaxQueueBytes); err != nil {
		return reject(err)
	}
	s.lastReservation++
	id := s.lastReservation
	s.ownReservations()
	s.reservations[id] = reservation{bytes: c.Bytes, count: c.Count, time: c.Time}
	s.reservedBytes += c.Bytes
	return Result{ReservationID: id}
}

// ownReservations makes s.reservations a map that s may change.
func (s *State) ownReservations() {
	switch {
	case s.reservations == nil:
		s.reservations = make(map[uint64]reservation)
	case s.resShared:
		s.reservations = maps.Clone(s.reservations)
	}
	s.resShared = false
}

// checkSpace reports whether n more bytes may be held under limit.
// Pending events, reservations and dead letters all take space: a shard
// whose endpoint is dead fills up with dead letters and then refuses new
// events until they are purged or replayed. With several subscriptions
// the one furthest behind counts: the shard holds the events until it has
// them, so one stalled subscription fills the shard for all.
//
// It also keeps pendingBytes+reservedBytes+deadBytes from overflowing,
// which only absurd requests against an unlimited queue could cause;
// everything else relies on that sum fitting in an int64.
func (s *State) checkSpace(n, limit int64) error {
	var pending, dead int64
	for c := range s.active {
		if c.pendingBytes+c.deadBytes > pending+dead {
			pending, dead = c.pendingBytes, c.deadBytes
		}
	}
	used := pending + s.reservedBytes + dead
	if limit > 0 && n > limit-used {
		return &queueFullError{pending: pending, reserved: s.reservedBytes, dead: dead, requested: n, limit: limit}
	}
	if n > math.MaxInt64-used {
		return fmt.Errorf("%w: %d more bytes overflow the shard's byte count of %d", ErrInvalidCommand, n, used)
	}
	return nil
}

func (s *State) commit(index uint64, c *Command) Result {
	if len(c.Events) == 0 {
		return reject(fmt.Errorf("%w: commit of no events to reservation %d", ErrInvalidCommand, c.ReservationID))
	}
	r, ok := s.reservations[c.ReservationID]
	if !ok {
		return reject(fmt.Errorf("%w: reservation %d", ErrUnknownReservation, c.ReservationID))
	}
	if r.count > 0 && len(c.Events) > r.count {
		return reject(fmt.Errorf("%w: %d events for reservation %d of %d events",
			ErrReservationTooSmall, len(c.Events), c.ReservationID, r.count))
	}
	if size := eventsSize(c.Events); size > r.bytes {
		return reject(fmt.Errorf("%w: %d bytes of events for reservation %d of %d bytes",
			ErrReservationTooSmall, size, c.ReservationID, r.bytes))
	}
	// The reservation's bytes were already counted against the limit, so
	// moving the events into the queue needs no further check: their size
	// is at most what is released here.
	s.ownReservations()
	delete(s.reservations, c.ReservationID)
	s.reservedBytes -= r.bytes
	return s.appendEvents(index, c.Time, c.Events, nil)
}

func (s *State) abort(c *Command) Result {
	r, ok := s.reservations[c.ReservationID]
	if !ok {
		// Aborting is idempotent: a retried abort, or one racing an
		// expiry, must not fail.
		return Result{}
	}
	s.ownReservations()
	delete(s.reservations, c.ReservationID)
	s.reservedBytes -= r.bytes
	return Result{Count: 1}
}

func (s *State) publish(index uint64, c *Command) Result {
	if len(c.Events) == 0 {
		return reject(fmt.Errorf("%w: publish of no events", ErrInvalidCommand))
	}
	if c.MaxQueueBytes < 0 {
		return reject(fmt.Errorf("%w: negative max queue bytes %d", ErrInvalidCommand, c.MaxQueueBytes))
	}
	dups, err := s.checkDedup(c)
	switch {
	case err != nil:
		return reject(err)
	case len(dups) == len(c.Events):
		// A retry of a publish that was committed: nothing to append.
		s.pruneDedup(c.Time - c.DedupWindow)
		return Result{Duplicates: dups}
	case len(dups) > 0:
		return Result{Duplicates: dups, Err: fmt.Errorf("%w: %d of %d events repeat dedup ids; publish the others without them",
			ErrPartialDuplicate, len(dups), len(c.Events))}
	}
	if err := s.checkSpace(eventsSize(c.Events), c.MaxQueueBytes); err != nil {
		return reject(err)
	}
	r := s.appendEvents(index, c.Time, c.Events, nil)
	s.recordDedup(c, r.FirstOffset)
	return r
}

// appendEvents assigns the next offsets to events, carried by the log
// entry at index with the given publish time, and queues them for every
// subscription, or only for the cursor only if it is not nil.
func (s *State) appendEvents(index uint64, time int64, events []Event, only *cursor) Result {
	first := s.nextOffset
	n := uint64(len(events))
	held := false
	for c := range s.active {
		if only != nil && c != only {
			for range events {
				c.push(acked)
			}
			continue
		}
		held = true
		for i := range events {
			c.push(events[i].Size())
		}
	}
	if s.retaining {
		for i := range events {
			if only != nil {
				// A replayed dead letter is its subscription's alone: the
				// original is what others start or seek back to.
				s.retained.push(acked)
			} else {
				s.retained.push(events[i].Size())
			}
		}
		held = true
	}
	s.nextOffset += n
	if held {
		s.runs = append(s.runs, run{first: first, count: n, index: index, time: time})
		s.pushKeys(events)
	} else {
		// Nothing holds the events: the shard keeps neither their runs
		// nor their keys, of which it held none before them either.
		s.keysFrom = s.nextOffset
	}
	if s.detached {
		s.def.head, s.def.excluded = s.nextOffset, s.nextOffset
	}
	if only != nil {
		for c := range s.active {
			c.advance()
		}
		s.dropRuns()
	}
	return Result{FirstOffset: first, Count: len(events)}
}

// ack marks the events at c.Offsets done for c's subscription: delivered
// (Ack) or rejected by its filter (Skip).
func (s *State) ack(c *Command) Result {
	cur, err := s.cursorFor(c.Subscription)
	if err != nil {
		return reject(err)
	}
	// Validate everything first: a rejected command must change nothing.
	for _, o := range c.Offsets {
		if o >= s.nextOffset {
			return reject(fmt.Errorf("%w: offset %d (next offset is %d)", ErrUnknownOffset, o, s.nextOffset))
		}
	}
	n := 0
	l := &cur.pending
	for _, o := range c.Offsets {
		if o < cur.head {
			continue // acknowledged long ago
		}
		i := int(o - cur.head)
		// l.ack(i), by hand: this loop is hot.
		ch, j := l.locate(i)
		size := ch.size[j]
		if size == acked {
			continue // a repeated ack, within this command or across them
		}
		if ch.gen != l.gen {
			l.own(ch)
		}
		ch.size[j] = acked
		cur.pendingEvents--
		cur.pendingBytes -= size
		if l.natt != 0 {
			l.setAttempts(i, 0)
		}
		n++
	}
	if c.Op == OpSkip {
		cur.skipped += uint64(n)
	}
	s.advance(cur)
	return Result{Count: n}
}

// runOf returns the run holding offset, which must be in [logStart,
// nextOffset).
func (s *State) runOf(offset uint64) *run {
	i := sort.Search(len(s.runs), func(i int) bool { return s.runs[i].end() > offset })
	return &s.runs[i]
}

func (s *State) attempt(c *Command) Result {
	cur, err := s.cursorFor(c.Subscription)
	if err != nil {
		return reject(err)
	}
	n := 0
	for _, o := range c.Offsets {
		if !cur.isPending(o, s.nextOffset) {
			continue // done already, or never assigned: nothing to retry
		}
		i := int(o - cur.head)
		if a := cur.pending.attempts(i); a < math.MaxUint32 {
			cur.pending.setAttempts(i, a+1)
		}
		n++
	}
	cur.retried += uint64(n)
	return Result{Count: n}
}

func (s *State) deadLetter(c *Command) Result {
	cur, err := s.cursorFor(c.Subscription)
	if err != nil {
		return reject(err)
	}
	var add []deadLetter
	for _, d := range c.Dead {
		o := d.Offset
		if !cur.isPending(o, s.nextOffset) {
			continue // done already (perhaps earlier in this command), or never assigned
		}
		r := s.runOf(o)
		i := int(o - cur.head)
		a := cur.pending.attempts(i)
		size := cur.markDone(i)
		cur.deadBytes += size
		add = append(add, deadLetter{DeadLetter: DeadLetter{
			Offset: o, Index: r.index, Slot: int(o - r.first),
			Reason: clipText(d.Reason), LastError: clipText(d.LastError),
			Attempts: a, Time: c.Time, PublishTime: r.time,
		}, size: size})
	}
	if len(add) == 0 {
		return Result{}
	}
	cur.deadLettered += uint64(len(add))
	cur.insertDead(add)
	s.advance(cur)
	return Result{Count: len(add)}
}

// clipText cuts t to at most MaxDeadLetterText bytes, at the start of a
// rune as a range loop sees them (so invalid bytes count one each).
func clipText(t string) string {
	if len(t) <= MaxDeadLetterText {
		return t
	}
	cut := 0
	for i := range t {
		if i > MaxDeadLetterText {
			break
		}
		cut = i
	}
	// Copy, so that the state does not keep the whole of t alive.
	return strings.Clone(t[:cut])
}

func compareDead(d deadLetter, offset uint64) int { return cmp.Compare(d.Offset, offset) }

// findDead returns the position of the dead letter at offset in c.dead,
// or where it would go.
func (c *cursor) findDead(offset uint64) (int, bool) {
	return slices.BinarySearchFunc(c.dead, offset, compareDead)
}

// insertDead adds new dead letters, none of which is in c.dead yet.
func (c *cursor) insertDead(add []deadLetter) {
	slices.SortFunc(add, func(a, b deadLetter) int { return cmp.Compare(a.Offset, b.Offset) })
	if len(c.dead) == 0 || c.dead[len(c.dead)-1].Offset < add[0].Offset {
		// The usual case: events are given up on roughly in offset order.
		c.dead = append(c.dead, add...)
		return
	}
	merged := make([]deadLetter, 0, len(c.dead)+len(add)+len(c.dead)/2)
	i, j := 0, 0
	for i < len(c.dead) && j < len(add) {
		if c.dead[i].Offset < add[j].Offset {
			merged = append(merged, c.dead[i])
			i++
		} else {
			merged = append(merged, add[j])
			j++
		}
	}
	merged = append(merged, c.dead[i:]...)
	c.dead = append(merged, add[j:]...)
	c.deadDropped = 0
	c.deadShared = false
}

// removeDead deletes the dead letters at the given positions of c.dead,
// which must be ascending and distinct.
func (c *cursor) removeDead(pos []int) {
	for _, p := range pos {
		c.deadBytes -= c.dead[p].size
	}
	if pos[len(pos)-1] == len(pos)-1 {
		// A prefix: replaying or purging the oldest dead letters first is
		// the usual order, and costs no copying.
		k := len(pos)
		if !c.deadShared {
			clear(c.dead[:k]) // let go of the strings
		}
		c.dead = dropFront(c.dead, &c.deadDropped, k)
		if c.deadDropped == 0 {
			c.deadShared = false // dropFront moved them to a new array
		}
		return
	}
	w, dst := pos[0], c.dead
	if c.deadShared {
		// A frozen copy may be reading the array: compact into a new one.
		dst = make([]deadLetter, len(c.dead)-len(pos))
		copy(dst, c.dead[:w])
		c.deadDropped = 0
		c.deadShared = false
	}
	next := 0
	for r := pos[0]; r < len(c.dead); r++ {
		if next < len(pos) && pos[next] == r {
			next++
			continue
		}
		dst[w] = c.dead[r]
		w++
	}
	clear(dst[w:]) // when compacting in place, let go of the strings
	c.dead = dst[:w]
}

func (s *State) replayDead(index uint64, c *Command) Result {
	cur, err := s.cursorFor(c.Subscription)
	if err != nil {
		return reject(err)
	}
	if len(c.Events) != len(c.Offsets) {
		return reject(fmt.Errorf("%w: replay of %d dead letters with %d events", ErrInvalidCommand, len(c.Offsets), len(c.Events)))
	}
	if len(c.Offsets) == 0 {
		return Result{}
	}
	// Validate everything first: a rejected command must change nothing.
	pos := make([]int, len(c.Offsets))
	for i, o := range c.Offsets {
		j, ok := cur.findDead(o)
		if !ok {
			return reject(fmt.Errorf("%w: offset %d is not a dead letter", ErrUnknownOffset, o))
		}
		if i > 0 && o <= c.Offsets[i-1] {
			return reject(fmt.Errorf("%w: replay of dead letters out of offset order: %d after %d", ErrInvalidCommand, o, c.Offsets[i-1]))
		}
		if size := c.Events[i].Size(); size != cur.dead[j].size {
			return reject(fmt.Errorf("%w: replayed event %d has %d bytes, dead letter %d has %d: not a copy",
				ErrInvalidCommand, i, size, o, cur.dead[j].size))
		}
		pos[i] = j
	}
	// The events' sizes equal the dead letters', so the cursor's bytes do
	// not change and the limit needs no check: the space is already held.
	// The replayed events are the subscription's alone: the others had
	// them once already.
	cur.removeDead(pos)
	return s.appendEvents(index, c.Time, c.Events, cur)
}

func (s *State) purgeDead(c *Command) Result {
	cur, err := s.cursorFor(c.Subscription)
	if err != nil {
		return reject(err)
	}
	n := len(cur.dead)
	if n == 0 {
		return Result{}
	}
	if len(c.Offsets) == 0 {
		if !cur.deadShared {
			clear(cur.dead) // let go of the strings
		}
		cur.dead = nil
		cur.deadShared = false
		cur.deadBytes = 0
		cur.deadDropped = 0
		return Result{Count: n}
	}
	var pos []int
	for _, o := range c.Offsets {
		if j, ok := cur.findDead(o); ok {
			pos = append(pos, j)
		}
	}
	if len(pos) == 0 {
		return Result{}
	}
	slices.Sort(pos)
	pos = slices.Compact(pos)
	cur.removeDead(pos)
	return Result{Count: len(pos)}
}

// dropFront drops the first k elements of x, a slice that is appended to
// at the back and consumed from the front. Reslicing alone would keep the
// dropped elements' memory for as long as appends fit in the backing
// array, which after a large backlog drains can be a long time. So *dead
// counts the elements dropped since x was last copied, and once they
// outnumber the live ones twice over, the live ones move to a fresh array.
// Each copy costs less than the drops since the previous one, and the
// memory held stays within a small multiple of the live elements.
func dropFront[T any](x []T, dead *int, k int) []T {
	x = x[k:]
	*dead += k
	if *dead < max(2*len(x), 64) {
		return x
	}
	*dead = 0
	return append(make([]T, 0, len(x)+len(x)/2+8), x...)
}

func (s *State) expire(c *Command) Result {
	n := 0
	// Map order does not matter: the outcome is the same set of deletions.
	// If the map is shared, the first deletion replaces it with a copy;
	// the loop goes on over the original, which does not change.
	for id, r := range s.reservations {
		if r.time < c.OlderThan {
			s.ownReservations()
			delete(s.reservations, id)
			s.reservedBytes -= r.bytes
			n++
		}
	}
	return Result{Count: n}
}

// Applied returns the log index of the last applied command, or 0 if none.
func (s *State) Applied() uint64 { return s.applied }

// NextOffset returns the offset the next appended event will get, which is
// also the number of events ever appended.
func (s *State) NextOffset() uint64 { return s.nextOffset }

// Head returns the default subscription's delivery head: the lowest
// offset still pending, that is neither acknowledged nor dead-lettered.
// Every offset below it is done. Head equals NextOffset when nothing is
// pending. The State methods that read one subscription's progress —
// Head, IsAcked, Attempts, DeadLetter, DeadLetters and Stats — read the
// default one's; Cursor reads the others'.
func (s *State) Head() uint64 { return s.def.head }

// Locate returns the log index of the entry holding the event at offset,
// and the event's position among that entry's Events. It locates every
// offset from Earliest on (the lowest head of the shard's subscriptions,
// or the first retained event) that has been assigned, including those
// done out of order, and every dead letter, wherever it is. It reports
// ok=false for offsets not yet assigned and for other offsets below
// Earliest, whose entries the log may already have dropped.
func (s *State) Locate(offset uint64) (index uint64, slot int, ok bool) {
	if offset >= s.logStart() && offset < s.nextOffset {
		r := s.runOf(offset)
		return r.index, int(offset - r.first), true
	}
	for c := range s.active {
		if j, ok := c.findDead(offset); ok {
			return c.dead[j].Index, c.dead[j].Slot, true
		}
	}
	return 0, 0, false
}

// IsAcked reports whether the event at offset is done for the default
// subscription: acknowledged, or given up on and dead-lettered. It reports
// false for pending events and for offsets not yet assigned; an assigned
// offset is pending exactly when IsAcked reports false. DeadLetter tells
// the two kinds of done apart while the dead letter is held.
func (s *State) IsAcked(offset uint64) bool { return s.defaultCursor().IsAcked(offset) }

// CompactIndex returns the lowest log index still needed to read a
// pending event or a dead letter of any subscription, or a retained
// event, or Applied()+1 if there is none. Entries below it are no longer needed by the queue; the
// host may truncate the log below the smaller of this and its latest
// snapshot's index.
func (s *State) CompactIndex() uint64 {
	index := s.applied + 1
	if len(s.runs) > 0 {
		index = s.runs[0].index
	}
	// Offsets grow with log indexes, so a cursor's first dead letter has
	// the lowest index among its dead letters.
	for c := range s.active {
		if len(c.dead) > 0 {
			index = min(index, c.dead[0].Index)
		}
	}
	return index
}

// Attempts returns the number of failed delivery attempts recorded for
// the default subscription's pending event at offset; 0 for events not
// pending.
func (s *State) Attempts(offset uint64) uint32 { return s.defaultCursor().Attempts(offset) }

// defaultCursor is the view of the default subscription's cursor, which
// holds nothing if the subscription was deleted.
func (s *State) defaultCursor() Cursor { return Cursor{s, &s.def} }

// A DeadLetter describes an event in the shard's dead-letter queue.
type DeadLetter struct {
	Offset      uint64
	Index       uint64 // log index of the entry holding the event, as for Locate
	Slot        int    // the event's position among that entry's Events
	Reason      string // why it was given up on (at most MaxDeadLetterText bytes)
	LastError   string // the last delivery error (at most MaxDeadLetterText bytes)
	Attempts    uint32 // failed attempts recorded before it was given up on
	Time        int64  // when it was dead-lettered: Command.Time of the DeadLetter
	PublishTime int64  // the event's publish time
}

// DeadLetter returns the default subscription's dead letter at offset,
// if there is one.
func (s *State) DeadLetter(offset uint64) (DeadLetter, bool) {
	return s.defaultCursor().DeadLetter(offset)
}

// DeadLetters returns the default subscription's dead letters at offsets
// from on, in offset order, at most max of them; max <= 0 means all. To
// page through them, pass the last offset returned plus one as the next
// from.
func (s *State) DeadLetters(from uint64, max int) []DeadLetter {
	return s.defaultCursor().DeadLetters(from, max)
}

// A Reservation describes a held reservation.
type Reservation struct {
	ID    uint64
	Bytes int64 // bytes held
	Count int   // events it is for; 0 means any number
	Time  int64 // Command.Time of the Reserve
}

// Reservation returns the reservation with the given id, if it is held.
func (s *State) Reservation(id uint64) (Reservation, bool) {
	r, ok := s.reservations[id]
	if !ok {
		return Reservation{}, false
	}
	return Reservation{ID: id, Bytes: r.bytes, Count: r.count, Time: r.time}, true
}

// Stats summarizes a shard.
type Stats struct {
	Events          int64  // pending (committed, neither acknowledged nor dead-lettered) events
	Bytes           int64  // total Size of the pending events
	ReservedBytes   int64  // bytes held by reservations
	Reservations    int    // reservations held
	OldestEventTime int64  // publish time of the event at Head; 0 if none is pending
	Published       uint64 // events ever appended, replayed ones included
	Acked           uint64 // events ever acknowledged by Ack (a subscription's: since it started)
	NextOffset      uint64
	Head            uint64

	DeadLetters     int64  // dead letters held
	DeadLetterBytes int64  // their total Size; they count towards max_queue_bytes
	Delivered       uint64 // events ever delivered, that is acknowledged by Ack: equal to Acked
	DeadLettered    uint64 // events ever dead-lettered, including those since replayed or purged
	Retried         uint64 // failed delivery attempts ever recorded
	Skipped         uint64 // events ever skipped: the subscription's filter rejected them
}

// Stats returns a summary of the shard as its default subscription sees
// it.
func (s *State) Stats() Stats { return s.defaultCursor().Stats() }
