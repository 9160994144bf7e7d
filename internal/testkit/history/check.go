package history

import (
	"fmt"
	"slices"
	"time"
)

// Result is what Check found.
type Result struct {
	PublishedOK, PublishedUnknown, PublishedFailed int
	// Consumed counts distinct events handed out; Deliveries every
	// hand-out; Duplicates the hand-outs beyond an event's first.
	Consumed, Deliveries, Duplicates int
	// AckCalls counts ack calls, AckFailed those that returned an error;
	// AckLapsed counts receipts not acted on because the event had been
	// handed out again.
	AckCalls, AckFailed, AckLapsed int
	// Lost counts acknowledged publishes never consumed; Reordered the
	// events handed out after a later event of their key whose publish
	// had been acknowledged. Both must be 0.
	Lost, Reordered int
	// UnknownLate counts events of publishes with an unknown outcome
	// that came after a later event of their key: allowed, since their
	// publisher never learned that they were committed, let alone when.
	UnknownLate int
	// LateCopies counts copies of in-flight events that reached their
	// consumer after a later event of their key, from a fetch that had
	// started before that later event was received: allowed. The copy's
	// lease ended while the fetch carrying it was on its way: an ack by
	// event id of an earlier copy ends any lease, and a lease can expire.
	// The key's next event is then free, and a faster fetch can return it
	// first. Acks by receipt never end another copy's lease, which leaves
	// only expiry. A consumer that skips ids it has already handled still
	// sees each key in order.
	LateCopies int
	// Rewound counts events handed out again after later events of their
	// key that came in the same fetch, none of whose acks had been
	// confirmed: a fetch leases a run of a key's events, and a run whose
	// lease ended unacknowledged (its consumer's ack failed, its leader
	// died) is handed out again from its first event, in order. Allowed:
	// the consumer sees the key go back to its first unacknowledged event,
	// never skip ahead.
	Rewound int
	// Violations says what broke a guarantee, one line per case.
	Violations []string
}

func (r *Result) violate(format string, args ...any) {
	r.Violations = append(r.Violations, fmt.Sprintf(format, args...))
}

// String is the counts on one line.
func (r Result) String() string {
	return fmt.Sprintf("published ok %d / unknown %d / failed %d; consumed %d (%d deliveries, %d duplicates); acks %d (%d failed, %d receipts lapsed); lost %d, reordered %d, unknown-outcome events that came late %d, in-flight copies that came late %d, runs handed out again %d; %d violations",
		r.PublishedOK, r.PublishedUnknown, r.PublishedFailed, r.Consumed, r.Deliveries, r.Duplicates,
		r.AckCalls, r.AckFailed, r.AckLapsed, r.Lost, r.Reordered, r.UnknownLate, r.LateCopies, r.Rewound, len(r.Violations))
}

type keySeq struct {
	key string
	seq int
}

// Check checks the history of a finished test, after the test drained
// every event and acknowledged it.
func (h *History) Check() Result {
	h.mu.Lock()
	defer h.mu.Unlock()
	var r Result
	r.AckCalls, r.AckFailed, r.AckLapsed = h.ackCalls, h.ackFailed, h.ackLapsed

	published := make(map[keySeq]Publish, len(h.publishes))
	for _, p := range h.publishes {
		ks := keySeq{p.Key, p.Seq}
		if _, dup := published[ks]; dup {
			r.violate("the test published key %s seq %d twice: each publish needs its own sequence number", p.Key, p.Seq)
		}
		published[ks] = p
		switch p.Outcome {
		case OK:
			r.PublishedOK++
		case Unknown:
			r.PublishedUnknown++
		case Failed:
			r.PublishedFailed++
		}
	}

	ds := slices.Clone(h.deliveries)
	slices.SortStableFunc(ds, func(a, b delivery) int { return int(a.received - b.received) })
	idOf := make(map[keySeq]string) // the id each delivered publish got
	seen := make(map[string]bool)
	maxSeq := make(map[string]int)       // the highest seq of each key handed out so far
	maxAt := make(map[string]Tick)       // when the fetch that handed out maxSeq returned
	maxFetch := make(map[string]Tick)    // when the fetch that handed out maxSeq started: it names the fetch
	fetchesOf := make(map[keySeq][]Tick) // the fetches that handed out each event, by their start
	for _, d := range ds {
		r.Deliveries++
		key, seq, err := parsePayload(d.Payload)
		if err != nil {
			r.violate("event %s (through node %d): %v: herald handed out an event nobody published", d.ID, d.Node, err)
			continue
		}
		if key != d.Key {
			r.violate("event %s has key %q but its payload says %q", d.ID, d.Key, d.Payload)
		}
		ks := keySeq{key, seq}
		p, ok := published[ks]
		switch {
		case !ok:
			r.violate("event %s (key %s seq %d) was never published", d.ID, key, seq)
			continue
		case p.Outcome == Failed:
			r.violate("event %s (key %s seq %d) was consumed, but its publish through node %d failed for good: %v", d.ID, key, seq, p.Node, p.Err)
		case p.Outcome == OK && p.ID != d.ID:
			r.violate("key %s seq %d was acknowledged as %s but also appended as %s: a retry published it twice", key, seq, p.ID, d.ID)
		}
		if first, ok := idOf[ks]; ok && first != d.ID {
			r.violate("key %s seq %d was appended twice, as %s and %s: a retry published it twice", key, seq, first, d.ID)
		}
		idOf[ks] = d.ID

		dup := seen[d.ID]
		if dup {
			r.Duplicates++
			if at, acked := h.acked[d.ID]; acked && at < d.fetched {
				r.violate("event %s (key %s seq %d) was handed out again through node %d after its ack had been confirmed", d.ID, key, seq, d.Node)
			}
		}
		seen[d.ID] = true

		if last, ok := maxSeq[key]; ok && seq < last {
			switch {
			case p.Outcome != OK:
				r.UnknownLate++
			case dup && d.fetched < maxAt[key]:
				// A copy of an event in flight (one whose ack was
				// confirmed before the fetch is a violation above).
				r.LateCopies++
			case dup && slices.Contains(fetchesOf[ks], maxFetch[key]) && !h.ackedBetween(idOf, key, seq, last, d.fetched):
				// The run that took the key furthest held this event too:
				// handed out again, the run starts over from it.
				r.Rewound++
			default:
				r.Reordered++
				again := "for the first time"
				if dup {
					again = "again"
				}
				r.violate("key %s: event %s (seq %d) came after seq %d, %s, through node %d, %v after the history began",
					key, d.ID, seq, last, again, d.Node, d.at.Round(time.Millisecond))
			}
		}
		if last, ok := maxSeq[key]; !ok || seq > last {
			maxSeq[key], maxAt[key], maxFetch[key] = seq, d.received, d.fetched
		}
		fetchesOf[ks] = append(fetchesOf[ks], d.fetched)
	}
	r.Consumed = len(seen)

	for _, p := range h.publishes {
		if p.Outcome == OK && !seen[p.ID] {
			r.Lost++
			r.violate("event %s (key %s seq %d), acknowledged by node %d, was never consumed", p.ID, p.Key, p.Seq, p.Node)
		}
	}
	return r
}

// ackedBetween reports whether the ack of an event of key after seq, up
// to last, was confirmed before the tick before: a run handed out again
// from seq after that would take the key back past an event its consumer
// was told was done.
func (h *History) ackedBetween(idOf map[keySeq]string, key string, seq, last int, before Tick) bool {
	for s := seq + 1; s <= last; s++ {
		if id, ok := idOf[keySeq{key, s}]; ok {
			if at, acked := h.acked[id]; acked && at < before {
				return true
			}
		}
	}
	return false
}
