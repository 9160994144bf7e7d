// Package history records what the clients of a fault test saw — every
// publish and its outcome, every event a fetch handed out, every ack —
// and checks the record against herald's guarantees: no acknowledged
// publish is lost, nothing is consumed that was never published, each
// key's events come in the order they were published, and an event is
// handed out again only while it was still in flight (leased, its ack
// not yet confirmed). A copy of an in-flight event may reach its consumer
// after its key's next event only from a fetch that overlapped the one
// that returned the next event (see Result.LateCopies).
//
// Events carry their key and a per-key sequence number in the payload
// ("k3 17"), so the checker can tell which publish a delivered event
// came from. Each key must be published by one goroutine at a time, in
// sequence order, each publish finishing (with whatever outcome) before
// the next of that key starts: that is what makes "in order" mean
// something.
package history

import (
	"bytes"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Outcome is what a publish call returned.
type Outcome int

const (
	// OK: the call returned the event's id; the event is committed.
	OK Outcome = iota
	// Unknown: the call failed in a way that leaves the event committed
	// or not (a timeout, a lost connection, a leader that changed).
	Unknown
	// Failed: the server refused the event; it is not committed.
	Failed
)

func (o Outcome) String() string {
	switch o {
	case OK:
		return "ok"
	case Unknown:
		return "unknown"
	case Failed:
		return "failed"
	}
	return fmt.Sprintf("Outcome(%d)", int(o))
}

// Tick is a point in a History's own order of events: a later Tick was
// taken after an earlier one returned.
type Tick int64

// Publish is one publish call of one event.
type Publish struct {
	Key     string
	Seq     int
	Outcome Outcome
	ID      string // for OK
	Node    int    // the node the call went to, for messages
	Err     error  // for Unknown and Failed
}

// Delivery is one event handed out by a fetch.
type Delivery struct {
	ID      string
	Key     string
	Payload []byte
	Node    int
}

// History is the record of a test's client operations. It is safe for
// concurrent use.
type History struct {
	mu         sync.Mutex
	began      time.Time
	now        Tick
	publishes  []Publish
	deliveries []delivery
	acked      map[string]Tick // event id → when its ack was first confirmed
	ackCalls   int
	ackFailed  int
	ackLapsed  int
}

type delivery struct {
	Delivery
	fetched  Tick // when the fetch that handed it out started
	received Tick // when the fetch returned it
	// at is how long after the history began it was received: for
	// messages only, to line a violation up with the nodes' logs.
	at time.Duration
}

// New returns an empty History.
func New() *History { return &History{began: time.Now(), acked: make(map[string]Tick)} }

// Now returns the current Tick. Take it right before a fetch starts and
// pass it to Delivered.
func (h *History) Now() Tick {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.tick()
}

func (h *History) tick() Tick {
	h.now++
	return h.now
}

// Published records a publish call once it has returned.
func (h *History) Published(p Publish) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.tick()
	h.publishes = append(h.publishes, p)
}

// Delivered records the events a fetch that started at fetched handed
// out. Record them as soon as the fetch returns, before acking any.
func (h *History) Delivered(fetched Tick, ds ...Delivery) {
	h.mu.Lock()
	defer h.mu.Unlock()
	received := h.tick()
	for _, d := range ds {
		h.deliveries = append(h.deliveries, delivery{Delivery: d, fetched: fetched, received: received, at: time.Since(h.began)})
	}
}

// Acked records an ack call of ids once it has returned with err.
func (h *History) Acked(ids []string, err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	at := h.tick()
	h.ackCalls++
	if err != nil {
		h.ackFailed++
		return
	}
	for _, id := range ids {
		if _, ok := h.acked[id]; !ok {
			h.acked[id] = at
		}
	}
}

// Lapsed records that an ack call's receipts, n of them, lapsed: the
// events had been handed out again, so those acks did not count. The ack
// call itself is recorded with Acked, naming only the ids acknowledged.
func (h *History) Lapsed(n int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.ackLapsed += n
}

// Payload is the payload of the event with key's sequence number seq.
func Payload(key string, seq int) []byte { return fmt.Appendf(nil, "%s %d", key, seq) }

// PaddedPayload is Payload padded to size bytes (when shorter), for tests
// that need the log to grow.
func PaddedPayload(key string, seq, size int) []byte {
	p := fmt.Appendf(nil, "%s %d ", key, seq)
	if n := size - len(p); n > 0 {
		p = append(p, bytes.Repeat([]byte{'.'}, n)...)
	}
	return p
}

func parsePayload(p []byte) (key string, seq int, err error) {
	key, rest, ok := strings.Cut(string(p), " ")
	n, _, _ := strings.Cut(rest, " ") // a padded payload goes on
	if ok {
		seq, err = strconv.Atoi(n)
	}
	if !ok || err != nil {
		return "", 0, fmt.Errorf("payload %q is not \"KEY SEQ\"", p[:min(len(p), 64)])
	}
	return key, seq, nil
}
