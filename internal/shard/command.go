package shard

import (
	"encoding/binary"
	"math"
	"slices"
	"strconv"
)

// An Op names the operation a Command performs.
type Op uint8

// The operations. The zero Op is invalid, so that a zeroed Command is
// rejected rather than mistaken for one of these.
const (
	OpReserve     Op = 1 + iota // hold Bytes of queue space for a later Commit
	OpCommit                    // append Events into reservation ReservationID
	OpAbort                     // release reservation ReservationID
	OpPublish                   // append Events, without a reservation
	OpAck                       // mark the events at Offsets done
	OpExpire                    // drop reservations created before OlderThan
	OpAttempt                   // count one more failed delivery of each of Offsets
	OpDeadLetter                // move the events of Dead to the dead-letter queue
	OpReplayDead                // append Events again, as new events, in place of the dead letters at Offsets
	OpPurgeDead                 // delete the dead letters at Offsets; all of them if Offsets is empty
	OpSkip                      // mark the events at Offsets done without delivering them: the subscription's filter rejects them
	OpSubscribe                 // start subscription Subscription's cursor at offset From (see FromNow)
	OpUnsubscribe               // drop subscription Subscription's cursor, with its dead letters
	OpRetain                    // retain the events published from OlderThan on; RetainNone stops retaining (see retain.go)
	OpSeek                      // move subscription Subscription's cursor to offset From, making what follows pending again
	OpTierAdvance               // raise the last reconciled (tiered) log index, LRO, to From (see tier.go)
)

var opNames = [...]string{
	OpReserve:     "Reserve",
	OpCommit:      "Commit",
	OpAbort:       "Abort",
	OpPublish:     "Publish",
	OpAck:         "Ack",
	OpExpire:      "Expire",
	OpAttempt:     "Attempt",
	OpDeadLetter:  "DeadLetter",
	OpReplayDead:  "ReplayDead",
	OpPurgeDead:   "PurgeDead",
	OpSkip:        "Skip",
	OpSubscribe:   "Subscribe",
	OpUnsubscribe: "Unsubscribe",
	OpRetain:      "Retain",
	OpSeek:        "Seek",
	OpTierAdvance: "TierAdvance",
}

func (op Op) valid() bool { return op >= OpReserve && op <= OpTierAdvance }

func (op Op) String() string {
	if op.valid() {
		return opNames[op]
	}
	return "Op(" + strconv.Itoa(int(op)) + ")"
}

// A Command is one entry of the shard's replicated log. Each Op reads only
// the fields documented for it; the others should be left zero.
type Command struct {
	Op Op

	// Time is set by the proposer, in Unix nanoseconds. It is the creation
	// time of a reservation, the publish time of committed, published and
	// replayed events, and the dead-letter time of a DeadLetter. A Seek
	// with Time goes to the first event, from From on, published at or
	// after it; 0 means From alone.
	Time int64

	// ReservationID names the reservation of a Commit or Abort.
	ReservationID uint64

	// Bytes is the space a Reserve holds.
	Bytes int64

	// Count is the number of events a Reserve is for; 0 means any number.
	Count int

	// MaxQueueBytes is the topic's per-shard limit, for Reserve and
	// Publish; 0 means unlimited. It travels in the command, rather than
	// being looked up when applied, so that every replica applies the same
	// limit even if the topic's configuration changes meanwhile.
	MaxQueueBytes int64

	// Events are the events of a Commit or Publish, and the copies of the
	// dead letters a ReplayDead puts back, in the order of Offsets.
	Events []Event

	// Offsets are the events an Ack marks done, the events an Attempt
	// counts a failed delivery for, and the dead letters a ReplayDead or
	// PurgeDead acts on.
	Offsets []uint64

	// Dead are the events a DeadLetter gives up on, each with why.
	Dead []DeadInfo

	// OlderThan is the cutoff of an Expire: reservations whose Time is
	// before it are dropped. It is also the cutoff of a Retain: retained
	// events published before it are freed.
	OlderThan int64

	// DedupIDs are the client-chosen de-duplication ids of a Publish's
	// events, in the order of Events; an empty id leaves its event
	// without one. See State.Duplicate for what they do.
	DedupIDs []string

	// DedupWindow is how long, in nanoseconds before Time, a Publish's
	// dedup ids match earlier ones; 0 turns de-duplication off for the
	// command. Like MaxQueueBytes it travels in the command, so that
	// every replica applies the same window.
	DedupWindow int64

	// Subscription is the subscription an Ack, Skip, Attempt,
	// DeadLetter, ReplayDead, PurgeDead, Subscribe, Unsubscribe or Seek
	// is for; 0 is the topic's default subscription.
	Subscription uint64

	// From is the offset a Subscribe starts its cursor at: offsets
	// below the earliest event still held start there, and FromNow (or
	// any offset not yet assigned) starts at the next event published.
	// It is also the offset a Seek moves the cursor to, clamped the same
	// way, and the log index a TierAdvance raises the LRO to: not an
	// offset, but an index at most that of the TierAdvance's own entry.
	From uint64
}

// FromNow is the Command.From of a subscription that starts with the next
// event published.
const FromNow = math.MaxUint64

// A DeadInfo names an event a DeadLetter command gives up on.
type DeadInfo struct {
	Offset    uint64
	Reason    string // why, for example "max_retries" or "time_to_live"
	LastError string // the last delivery error, if any
}

// commandVersion is the first byte of every encoded command.
const commandVersion = 2

// A fieldMask says which fields of a command are encoded. A field is
// encoded only when it is non-zero, so that a command pays only for the
// fields its op uses.
type fieldMask uint16

// Bits of the field mask, a varint that follows the version and op bytes.
// The fields of the frequent commands (Publish, Commit, Reserve, Ack,
// Attempt) have the low seven bits, so that their mask takes one byte.
// The order of the bits is not the order of the fields in the encoding:
// that is the order of the fields in Command, except that Events come
// last so that EventAt can reach them without decoding the rest.
const (
	fieldTime fieldMask = 1 << iota
	fieldReservationID
	fieldBytes
	fieldCount
	fieldMaxQueueBytes
	fieldOffsets
	fieldEvents
	fieldOlderThan
	fieldDead
	fieldDedupWindow
	fieldDedupIDs
	fieldSubscription
	fieldFrom

	fieldAll fieldMask = 1<<iota - 1
)

func (c *Command) mask() fieldMask {
	var m fieldMask
	set := func(bit fieldMask, present bool) {
		if present {
			m |= bit
		}
	}
	set(fieldTime, c.Time != 0)
	set(fieldReservationID, c.ReservationID != 0)
	set(fieldBytes, c.Bytes != 0)
	set(fieldCount, c.Count != 0)
	set(fieldMaxQueueBytes, c.MaxQueueBytes != 0)
	set(fieldOlderThan, c.OlderThan != 0)
	set(fieldOffsets, len(c.Offsets) != 0)
	set(fieldDead, len(c.Dead) != 0)
	set(fieldEvents, len(c.Events) != 0)
	set(fieldDedupWindow, c.DedupWindow != 0)
	set(fieldDedupIDs, hasDedupID(c.DedupIDs))
	set(fieldSubscription, c.Subscription != 0)
	set(fieldFrom, c.From != 0)
	return m
}

// hasDedupID reports whether any of ids is set: a list of empty ids is
// not encoded, so that it has one encoding, none.
func hasDedupID(ids []string) bool {
	for _, id := range ids {
		if id != "" {
			return true
		}
	}
	return false
}

// AppendBinary appends the encoding of c to b and returns the extended
// buffer.
//
// The encoding is a version byte, the op, a varint bit mask of the
// non-zero fields, then those fields in a fixed order: integers as varints
// (signed ones zig-zag encoded), Offsets as a count and zig-zag deltas
// from the previous offset, Dead as a count and, for each, the zig-zag
// offset delta and the length-prefixed reason and last error, DedupIDs as
// a count and length-prefixed strings, and Events
// last as a count followed by each event's length-prefixed body (key,
// payload, header count, header names and values, each string
// length-prefixed). Encoding is deterministic: equal commands, treating
// nil and empty slices alike, encode to equal bytes.
func (c *Command) AppendBinary(b []byte) []byte {
	m := c.mask()
	b = slices.Grow(b, c.encodedLen(m))
	b = append(b, commandVersion, byte(c.Op))
	b = binary.AppendUvarint(b, uint64(m))
	if m&fieldTime != 0 {
		b = binary.AppendVarint(b, c.Time)
	}
	if m&fieldReservationID != 0 {
		b = binary.AppendUvarint(b, c.ReservationID)
	}
	if m&fieldBytes != 0 {
		b = binary.AppendVarint(b, c.Bytes)
	}
	if m&fieldCount != 0 {
		b = binary.AppendVarint(b, int64(c.Count))
	}
	if m&fieldMaxQueueBytes != 0 {
		b = binary.AppendVarint(b, c.MaxQueueBytes)
	}
	if m&fieldOlderThan != 0 {
		b = binary.AppendVarint(b, c.OlderThan)
	}
	if m&fieldOffsets != 0 {
		b = binary.AppendUvarint(b, uint64(len(c.Offsets)))
		var prev uint64
		for _, o := range c.Offsets {
			// Wrapping subtraction: the delta is exact modulo 2^64, and
			// acks tend to be ascending, so it is usually small.
			b = binary.AppendVarint(b, int64(o-prev))
			prev = o
		}
	}
	if m&fieldDead != 0 {
		b = binary.AppendUvarint(b, uint64(len(c.Dead)))
		var prev uint64
		for _, d := range c.Dead {
			b = binary.AppendVarint(b, int64(d.Offset-prev))
			b = appendString(b, d.Reason)
			b = appendString(b, d.LastError)
			prev = d.Offset
		}
	}
	if m&fieldDedupWindow != 0 {
		b = binary.AppendVarint(b, c.DedupWindow)
	}
	if m&fieldDedupIDs != 0 {
		b = binary.AppendUvarint(b, uint64(len(c.DedupIDs)))
		for _, id := range c.DedupIDs {
			b = appendString(b, id)
		}
	}
	if m&fieldSubscription != 0 {
		b = binary.AppendUvarint(b, c.Subscription)
	}
	if m&fieldFrom != 0 {
		b = binary.AppendUvarint(b, c.From)
	}
	if m&fieldEvents != 0 {
		b = binary.AppendUvarint(b, uint64(len(c.Events)))
		for i := range c.Events {
			b = appendEvent(b, &c.Events[i])
		}
	}
	return b
}

// encodedLen returns the length of c's encoding, so that AppendBinary can
// allocate once.
func (c *Command) encodedLen(m fieldMask) int {
	n := 2 + uvarintLen(uint64(m))
	if m&fieldTime != 0 {
		n += varintLen(c.Time)
	}
	if m&fieldReservationID != 0 {
		n += uvarintLen(c.ReservationID)
	}
	if m&fieldBytes != 0 {
		n += varintLen(c.Bytes)
	}
	if m&fieldCount != 0 {
		n += varintLen(int64(c.Count))
	}
	if m&fieldMaxQueueBytes != 0 {
		n += varintLen(c.MaxQueueBytes)
	}
	if m&fieldOlderThan != 0 {
		n += varintLen(c.OlderThan)
	}
	if m&fieldOffsets != 0 {
		n += uvarintLen(uint64(len(c.Offsets)))
		var prev uint64
		for _, o := range c.Offsets {
			n += varintLen(int64(o - prev))
			prev = o
		}
	}
	if m&fieldDead != 0 {
		n += uvarintLen(uint64(len(c.Dead)))
		var prev uint64
		for _, d := range c.Dead {
			n += varintLen(int64(d.Offset-prev)) + stringLen(len(d.Reason)) + stringLen(len(d.LastError))
			prev = d.Offset
		}
	}
	if m&fieldDedupWindow != 0 {
		n += varintLen(c.DedupWindow)
	}
	if m&fieldDedupIDs != 0 {
		n += uvarintLen(uint64(len(c.DedupIDs)))
		for _, id := range c.DedupIDs {
			n += stringLen(len(id))
		}
	}
	if m&fieldSubscription != 0 {
		n += uvarintLen(c.Subscription)
	}
	if m&fieldFrom != 0 {
		n += uvarintLen(c.From)
	}
	if m&fieldEvents != 0 {
		n += uvarintLen(uint64(len(c.Events)))
		for i := range c.Events {
			body := eventBodyLen(&c.Events[i])
			n += uvarintLen(uint64(body)) + body
		}
	}
	return n
}

func stringLen(n int) int { return uvarintLen(uint64(n)) + n }

func eventBodyLen(e *Event) int {
	n := stringLen(len(e.Key)) + stringLen(len(e.Payload)) + uvarintLen(uint64(len(e.Headers)))
	for _, h := range e.Headers {
		n += stringLen(len(h.Name)) + stringLen(len(h.Value))
	}
	return n
}

func appendEvent(b []byte, e *Event) []byte {
	b = binary.AppendUvarint(b, uint64(eventBodyLen(e)))
	b = appendString(b, e.Key)
	b = binary.AppendUvarint(b, uint64(len(e.Payload)))
	b = append(b, e.Payload...)
	b = binary.AppendUvarint(b, uint64(len(e.Headers)))
	for _, h := range e.Headers {
		b = appendString(b, h.Name)
		b = appendString(b, h.Value)
	}
	return b
}

// UnmarshalCommand decodes a command encoded by AppendBinary. It rejects,
// with an error wrapping ErrInvalidCommand, any input that AppendBinary
// could not have produced, and never panics.
//
// Event payloads alias data, so data must not be modified while the
// command is in use. Keys, header strings, reasons and errors are copied.
// Empty payloads, header lists and event, offset and dead lists decode as
// nil.
func UnmarshalCommand(data []byte) (Command, error) {
	var c Command
	d := decoder{buf: data, kind: ErrInvalidCommand}
	m := decodeHead(&d, &c, true)
	if m&fieldEvents != 0 {
		n := d.count("event count", 1)
		if d.err == nil && n == 0 {
			d.fail("empty event list")
		}
		if d.err == nil {
			c.Events = make([]Event, n)
			for i := range c.Events {
				decodeEvent(&d, &c.Events[i])
			}
		}
	}
	d.end("command")
	if d.err != nil {
		return Command{}, d.err
	}
	return c, nil
}

// EventAt decodes only the event at position slot of the encoded Commit,
// Publish or ReplayDead command in data, skipping over the events before
// it without decoding them. Events after slot are not validated. As with
// UnmarshalCommand, the payload aliases data.
func EventAt(data []byte, slot int) (Event, error) {
	var c Command
	d := decoder{buf: data, kind: ErrInvalidCommand}
	m := decodeHead(&d, &c, false)
	if d.err != nil {
		return Event{}, d.err
	}
	if m&fieldEvents == 0 {
		d.fail("%v command has no events", c.Op)
		return Event{}, d.err
	}
	n := d.count("event count", 1)
	if d.err == nil && (slot < 0 || slot >= n) {
		d.fail("event slot %d out of range [0, %d)", slot, n)
	}
	for range slot {
		d.bytes("event")
	}
	var e Event
	decodeEvent(&d, &e)
	if d.err != nil {
		return Event{}, d.err
	}
	return e, nil
}

// decodeHead decodes everything before the events into c and returns the
// field mask. Offsets and Dead are skipped rather than stored unless keep
// is set.
func decodeHead(d *decoder, c *Command, keep bool) fieldMask {
	if v := d.u8("version"); d.err == nil && v != commandVersion {
		d.fail("unsupported encoding version %d", v)
	}
	c.Op = Op(d.u8("op"))
	if d.err == nil && !c.Op.valid() {
		d.fail("unknown op %d", c.Op)
	}
	rawMask := d.uvarint("field mask")
	if d.err == nil && rawMask&^uint64(fieldAll) != 0 {
		d.fail("unknown fields in mask %#x", rawMask)
	}
	m := fieldMask(rawMask)
	// A field present in the mask must be non-zero; otherwise a command
	// would have two encodings.
	nonZero := func(what string, zero bool) {
		if zero {
			d.fail("zero %s encoded", what)
		}
	}
	if m&fieldTime != 0 {
		c.Time = d.varint("time")
		nonZero("time", c.Time == 0)
	}
	if m&fieldReservationID != 0 {
		c.ReservationID = d.uvarint("reservation id")
		nonZero("reservation id", c.ReservationID == 0)
	}
	if m&fieldBytes != 0 {
		c.Bytes = d.varint("bytes")
		nonZero("bytes", c.Bytes == 0)
	}
	if m&fieldCount != 0 {
		n := d.varint("count")
		if n < math.MinInt || n > math.MaxInt {
			d.fail("count %d out of range", n)
		}
		c.Count = int(n)
		nonZero("count", c.Count == 0)
	}
	if m&fieldMaxQueueBytes != 0 {
		c.MaxQueueBytes = d.varint("max queue bytes")
		nonZero("max queue bytes", c.MaxQueueBytes == 0)
	}
	if m&fieldOlderThan != 0 {
		c.OlderThan = d.varint("older than")
		nonZero("older than", c.OlderThan == 0)
	}
	if m&fieldOffsets != 0 {
		n := d.count("offset count", 1)
		if d.err == nil && n == 0 {
			d.fail("empty offset list")
		}
		if keep && d.err == nil {
			c.Offsets = make([]uint64, n)
		}
		var prev uint64
		for i := 0; i < n && d.err == nil; i++ {
			prev += uint64(d.varint("offset"))
			if keep {
				c.Offsets[i] = prev
			}
		}
	}
	if m&fieldDead != 0 {
		// An entry takes at least three bytes: offset, reason and error.
		n := d.count("dead count", 3)
		if d.err == nil && n == 0 {
			d.fail("empty dead list")
		}
		if keep && d.err == nil {
			c.Dead = make([]DeadInfo, n)
		}
		var prev uint64
		for i := 0; i < n && d.err == nil; i++ {
			prev += uint64(d.varint("dead offset"))
			reason := d.bytes("dead reason")
			lastErr := d.bytes("dead last error")
			if keep && d.err == nil {
				c.Dead[i] = DeadInfo{Offset: prev, Reason: string(reason), LastError: string(lastErr)}
			}
		}
	}
	if m&fieldDedupWindow != 0 {
		c.DedupWindow = d.varint("dedup window")
		nonZero("dedup window", c.DedupWindow == 0)
	}
	if m&fieldDedupIDs != 0 {
		// An id takes at least its length byte.
		n := d.count("dedup id count", 1)
		if keep && d.err == nil {
			c.DedupIDs = make([]string, n)
		}
		set := false
		for i := 0; i < n && d.err == nil; i++ {
			id := d.bytes("dedup id")
			set = set || len(id) > 0
			if keep {
				c.DedupIDs[i] = string(id)
			}
		}
		nonZero("dedup id list", d.err == nil && !set)
	}
	if m&fieldSubscription != 0 {
		c.Subscription = d.uvarint("subscription")
		nonZero("subscription", c.Subscription == 0)
	}
	if m&fieldFrom != 0 {
		c.From = d.uvarint("from")
		nonZero("from", c.From == 0)
	}
	if d.err != nil {
		return 0
	}
	return m
}

// decodeEvent decodes one length-prefixed event body into e.
func decodeEvent(d *decoder, e *Event) {
	body := d.bytes("event")
	if d.err != nil {
		return
	}
	ed := decoder{buf: body, kind: d.kind}
	e.Key = string(ed.bytes("event key"))
	if p := ed.bytes("event payload"); len(p) > 0 {
		e.Payload = p
	}
	// A header takes at least two bytes: the lengths of name and value.
	if n := ed.count("header count", 2); n > 0 {
		e.Headers = make([]Header, n)
		for i := range e.Headers {
			e.Headers[i].Name = string(ed.bytes("header name"))
			e.Headers[i].Value = string(ed.bytes("header value"))
		}
	}
	ed.end("event")
	if ed.err != nil {
		d.err = ed.err
		*e = Event{}
	}
}
