package history

import (
	"errors"
	"strings"
	"testing"
)

// A hand-made history: builders for publishes, fetches and acks in the
// order they happened.

func ok(h *History, key string, seq int, id string) {
	h.Published(Publish{Key: key, Seq: seq, Outcome: OK, ID: id, Node: 1})
}

func unknown(h *History, key string, seq int) {
	h.Published(Publish{Key: key, Seq: seq, Outcome: Unknown, Node: 2, Err: errors.New("deadline exceeded")})
}

func failed(h *History, key string, seq int) {
	h.Published(Publish{Key: key, Seq: seq, Outcome: Failed, Node: 3, Err: errors.New("invalid argument")})
}

// ev is a delivered event: id, key, seq.
type ev struct {
	id, key string
	seq     int
}

func fetch(h *History, evs ...ev) {
	at := h.Now()
	ds := make([]Delivery, len(evs))
	for i, e := range evs {
		ds[i] = Delivery{ID: e.id, Key: e.key, Payload: Payload(e.key, e.seq), Node: 1}
	}
	h.Delivered(at, ds...)
}

func ack(h *History, ids ...string) { h.Acked(ids, nil) }

func wantClean(t *testing.T, r Result) {
	t.Helper()
	if len(r.Violations) > 0 {
		t.Errorf("violations in a correct history:\n%s", strings.Join(r.Violations, "\n"))
	}
}

func wantViolation(t *testing.T, r Result, says string) {
	t.Helper()
	for _, v := range r.Violations {
		if strings.Contains(v, says) {
			return
		}
	}
	t.Errorf("no violation says %q; got %q", says, r.Violations)
}

func TestCleanHistoryCounts(t *testing.T) {
	h := New()
	ok(h, "a", 0, "t/0/0")
	ok(h, "b", 0, "t/1/0")
	ok(h, "a", 1, "t/0/1")
	unknown(h, "b", 1) // committed after all
	failed(h, "a", 2)
	unknown(h, "a", 3) // never committed
	fetch(h, ev{"t/0/0", "a", 0}, ev{"t/1/0", "b", 0})
	ack(h, "t/0/0", "t/1/0")
	fetch(h, ev{"t/0/1", "a", 1}, ev{"t/1/1", "b", 1})
	h.Acked([]string{"t/0/1", "t/1/1"}, errors.New("unavailable"))
	ack(h, "t/0/1", "t/1/1")

	r := h.Check()
	wantClean(t, r)
	want := Result{PublishedOK: 3, PublishedUnknown: 2, PublishedFailed: 1, Consumed: 4, Deliveries: 4, AckCalls: 3, AckFailed: 1}
	if r.String() != want.String() {
		t.Errorf("counts:\n got %s\nwant %s", r, want)
	}
}

func TestLostAcknowledgedPublish(t *testing.T) {
	h := New()
	ok(h, "a", 0, "t/0/0")
	ok(h, "a", 1, "t/0/1")
	fetch(h, ev{"t/0/0", "a", 0})
	r := h.Check()
	if r.Lost != 1 {
		t.Errorf("Lost = %d, want 1", r.Lost)
	}
	wantViolation(t, r, "t/0/1 (key a seq 1), acknowledged by node 1, was never consumed")
}

func TestConsumedButNeverPublished(t *testing.T) {
	h := New()
	ok(h, "a", 0, "t/0/0")
	fetch(h, ev{"t/0/0", "a", 0}, ev{"t/0/1", "a", 7})
	h.Delivered(h.Now(), Delivery{ID: "t/0/2", Key: "a", Payload: []byte("garbage")})
	r := h.Check()
	wantViolation(t, r, "t/0/1 (key a seq 7) was never published")
	wantViolation(t, r, "t/0/2 (through node 0): payload \"garbage\"")
}

func TestConsumedAfterAFailedPublish(t *testing.T) {
	h := New()
	failed(h, "a", 0)
	fetch(h, ev{"t/0/0", "a", 0})
	wantViolation(t, h.Check(), "its publish through node 3 failed for good")
}

func TestKeyMismatch(t *testing.T) {
	h := New()
	ok(h, "a", 0, "t/0/0")
	h.Delivered(h.Now(), Delivery{ID: "t/0/0", Key: "b", Payload: Payload("a", 0)})
	wantViolation(t, h.Check(), `has key "b" but its payload says "a 0"`)
}

func TestReorderOfAcknowledgedPublishes(t *testing.T) {
	h := New()
	ok(h, "a", 0, "t/0/0")
	ok(h, "a", 1, "t/0/1")
	fetch(h, ev{"t/0/1", "a", 1})
	fetch(h, ev{"t/0/0", "a", 0})
	r := h.Check()
	if r.Reordered != 1 {
		t.Errorf("Reordered = %d, want 1", r.Reordered)
	}
	wantViolation(t, r, "key a: event t/0/0 (seq 0) came after seq 1, for the first time, through node 1")
}

// A publish whose outcome is unknown may be committed late, after the
// key's next event: its publisher never learned it was committed.
func TestUnknownPublishMayComeLate(t *testing.T) {
	h := New()
	unknown(h, "a", 0)
	ok(h, "a", 1, "t/0/0")
	fetch(h, ev{"t/0/0", "a", 1})
	fetch(h, ev{"t/0/1", "a", 0})
	r := h.Check()
	wantClean(t, r)
	if r.UnknownLate != 1 || r.Reordered != 0 {
		t.Errorf("UnknownLate = %d, Reordered = %d; want 1, 0", r.UnknownLate, r.Reordered)
	}
}

// An event whose ack was not confirmed when it was fetched again (its
// lease ended with its leader) is a duplicate, not a violation.
func TestRedeliveryOfWhatWasInFlight(t *testing.T) {
	h := New()
	ok(h, "a", 0, "t/0/0")
	ok(h, "a", 1, "t/0/1")
	fetch(h, ev{"t/0/0", "a", 0})
	h.Acked([]string{"t/0/0"}, errors.New("outcome unknown"))
	fetch(h, ev{"t/0/0", "a", 0}) // the new leader hands it out again
	ack(h, "t/0/0")
	fetch(h, ev{"t/0/1", "a", 1})
	ack(h, "t/0/1")
	r := h.Check()
	wantClean(t, r)
	if r.Duplicates != 1 || r.Consumed != 2 || r.Deliveries != 3 {
		t.Errorf("Duplicates %d, Consumed %d, Deliveries %d; want 1, 2, 3", r.Duplicates, r.Consumed, r.Deliveries)
	}
}

// A fetch that started before the ack was confirmed may still return the
// event: the ack and the fetch raced.
func TestRedeliveryRacingTheAck(t *testing.T) {
	h := New()
	ok(h, "a", 0, "t/0/0")
	fetch(h, ev{"t/0/0", "a", 0})
	started := h.Now()
	ack(h, "t/0/0")
	h.Delivered(started, Delivery{ID: "t/0/0", Key: "a", Payload: Payload("a", 0)})
	wantClean(t, h.Check())
}

// A new leader hands out again an event its dead predecessor had leased;
// the first copy's ack then frees the key's next event, which a fast
// fetch returns before the slow fetch returns the copy. Allowed, and
// counted; the same copy from a fetch that started after the next event
// had been received is a violation.
func TestLateCopyOfAnEventInFlight(t *testing.T) {
	for _, overlapping := range []bool{true, false} {
		h := New()
		ok(h, "a", 0, "t/0/0")
		ok(h, "a", 1, "t/0/1")
		fetch(h, ev{"t/0/0", "a", 0})
		slow := h.Now()
		h.Acked([]string{"t/0/0"}, errors.New("outcome unknown"))
		fetch(h, ev{"t/0/1", "a", 1})
		if !overlapping {
			slow = h.Now()
		}
		h.Delivered(slow, Delivery{ID: "t/0/0", Key: "a", Payload: Payload("a", 0), Node: 2})
		r := h.Check()
		if overlapping {
			wantClean(t, r)
			if r.LateCopies != 1 || r.Reordered != 0 {
				t.Errorf("LateCopies = %d, Reordered = %d; want 1, 0", r.LateCopies, r.Reordered)
			}
		} else {
			wantViolation(t, r, "key a: event t/0/0 (seq 0) came after seq 1, again, through node 2")
		}
	}
}

func TestRedeliveryAfterAConfirmedAck(t *testing.T) {
	h := New()
	ok(h, "a", 0, "t/0/0")
	fetch(h, ev{"t/0/0", "a", 0})
	ack(h, "t/0/0")
	fetch(h, ev{"t/0/0", "a", 0})
	wantViolation(t, h.Check(), "t/0/0 (key a seq 0) was handed out again through node 1 after its ack had been confirmed")
}

func TestPublishedTwice(t *testing.T) {
	h := New()
	ok(h, "a", 0, "t/0/0")
	unknown(h, "a", 1)
	fetch(h, ev{"t/0/0", "a", 0}, ev{"t/0/1", "a", 1}, ev{"t/0/2", "a", 1}, ev{"t/0/3", "a", 0})
	r := h.Check()
	wantViolation(t, r, "key a seq 1 was appended twice, as t/0/1 and t/0/2")
	wantViolation(t, r, "key a seq 0 was acknowledged as t/0/0 but also appended as t/0/3")
}

func TestTestBugPublishingOneSequenceTwice(t *testing.T) {
	h := New()
	ok(h, "a", 0, "t/0/0")
	ok(h, "a", 0, "t/0/1")
	wantViolation(t, h.Check(), "the test published key a seq 0 twice")
}

func TestPaddedPayloads(t *testing.T) {
	h := New()
	ok(h, "a", 0, "t/0/0")
	p := PaddedPayload("a", 0, 1000)
	if len(p) != 1000 {
		t.Fatalf("PaddedPayload is %d bytes, want 1000", len(p))
	}
	h.Delivered(h.Now(), Delivery{ID: "t/0/0", Key: "a", Payload: p})
	wantClean(t, h.Check())
	if got := PaddedPayload("a", 12, 1); string(got) != "a 12 " {
		t.Errorf("PaddedPayload shorter than its text: %q", got)
	}
}

// A run of a key's events whose ack failed is handed out again from its
// first event: allowed, and counted; a run handed out again after the
// ack of one of its later events was confirmed is a violation.
func TestRunHandedOutAgain(t *testing.T) {
	for _, laterAcked := range []bool{false, true} {
		h := New()
		ok(h, "a", 0, "t/0/0")
		ok(h, "a", 1, "t/0/1")
		fetch(h, ev{"t/0/0", "a", 0}, ev{"t/0/1", "a", 1})
		if laterAcked {
			ack(h, "t/0/1")
		} else {
			h.Acked([]string{"t/0/0", "t/0/1"}, errors.New("the leader died"))
		}
		fetch(h, ev{"t/0/0", "a", 0}, ev{"t/0/1", "a", 1})
		ack(h, "t/0/0", "t/0/1")
		r := h.Check()
		if laterAcked {
			wantViolation(t, r, "key a: event t/0/0 (seq 0) came after seq 1, again")
			continue
		}
		wantClean(t, r)
		if r.Rewound != 1 {
			t.Errorf("Rewound = %d, want 1", r.Rewound)
		}
	}
}
