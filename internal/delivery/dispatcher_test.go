package delivery

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"herald/internal/endpoint"
	"herald/internal/shard"
	"herald/internal/topic"
)

// memLog is a shard kept in memory: the real state machine, with entries
// stored by index so events can be read back, as the Raft log does.
type memLog struct {
	mu      sync.Mutex
	m       *shard.Machine
	entries map[uint64][]byte
	index   uint64
	fail    error // Propose fails with this when set
	seeks   uint64
	sought  chan struct{} // closed at the next seek
}

func newMemLog() *memLog { return &memLog{m: shard.NewMachine(), entries: map[uint64][]byte{}} }

func (l *memLog) Propose(_ context.Context, cmd *shard.Command) (shard.Result, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.fail != nil {
		return shard.Result{}, l.fail
	}
	l.index++
	if cmd.Op == shard.OpSeek {
		l.seeks++
		if l.sought != nil {
			close(l.sought)
			l.sought = nil
		}
	}
	data := cmd.AppendBinary(nil)
	l.entries[l.index] = data
	r := l.m.Apply(l.index, data).(shard.Result)
	return r, r.Err
}

func (l *memLog) Read(_ context.Context, from uint64, max int) ([]Event, uint64, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []Event
	o := from
	if h := l.m.Head(); o < h {
		o = h
	}
	for ; o < l.m.NextOffset() && len(out) < max; o++ {
		if l.m.IsAcked(o) {
			continue
		}
		idx, slot, _ := l.m.Locate(o)
		cmd, err := shard.UnmarshalCommand(l.entries[idx])
		if err != nil {
			return nil, from, err
		}
		out = append(out, Event{Offset: o, Event: cmd.Events[slot], Time: time.Unix(0, cmd.Time), Attempts: l.m.Attempts(o)})
	}
	return out, o, nil
}

func (l *memLog) Seeks() (uint64, <-chan struct{}) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.sought == nil {
		l.sought = make(chan struct{})
	}
	return l.seeks, l.sought
}

func (l *memLog) publish(t *testing.T, at time.Time, events ...shard.Event) {
	t.Helper()
	if _, err := l.Propose(context.Background(), &shard.Command{Op: shard.OpPublish, Time: at.UnixNano(), Events: events}); err != nil {
		t.Fatal(err)
	}
}

func (l *memLog) stats() shard.Stats {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.m.Stats()
}

func (l *memLog) deadLetters() []shard.DeadLetter {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.m.DeadLetters(0, -1)
}

// fakeEndpoint records deliveries and fails as told.
type fakeEndpoint struct {
	mu        sync.Mutex
	got       map[string][]string // key → payloads in delivery order
	inFlight  map[string]int
	maxPerKey int
	total     int
	maxTotal  int
	fail      func(m *endpoint.Message) error
	delay     time.Duration
}

func newFakeEndpoint() *fakeEndpoint {
	return &fakeEndpoint{got: map[string][]string{}, inFlight: map[string]int{}}
}

func (f *fakeEndpoint) Send(ctx context.Context, m *endpoint.Message) error {
	f.mu.Lock()
	f.inFlight[m.Key]++
	f.total++
	f.maxPerKey = max(f.maxPerKey, f.inFlight[m.Key])
	f.maxTotal = max(f.maxTotal, f.total)
	fail := f.fail
	f.mu.Unlock()
	defer func() {
		f.mu.Lock()
		f.inFlight[m.Key]--
		f.total--
		f.mu.Unlock()
	}()
	if f.delay > 0 {
		time.Sleep(f.delay)
	}
	if fail != nil {
		if err := fail(m); err != nil {
			return err
		}
	}
	f.mu.Lock()
	f.got[m.Key] = append(f.got[m.Key], string(m.Payload))
	f.mu.Unlock()
	return nil
}

func (f *fakeEndpoint) Close() error { return nil }

func (f *fakeEndpoint) delivered(key string) []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.got[key]...)
}

func startDispatcher(t *testing.T, l *memLog, ep endpoint.Endpoint, a topic.Attributes, mod func(*Config)) *Dispatcher {
	t.Helper()
	cfg := Config{Topic: "t", Shard: 0, Attributes: a, Endpoint: ep, Scheme: "fake", MaxInFlight: 8}
	if mod != nil {
		mod(&cfg)
	}
	d := Start(context.Background(), l, cfg)
	t.Cleanup(d.Stop)
	return d
}

func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting until %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func events(keys, perKey int) []shard.Event {
	var out []shard.Event
	for i := range perKey {
		for k := range keys {
			out = append(out, shard.Event{Key: fmt.Sprint("k", k), Payload: []byte(fmt.Sprint(i))})
		}
	}
	return out
}

func TestDeliversEverythingInOrderPerKey(t *testing.T) {
	l := newMemLog()
	ep := newFakeEndpoint()
	ep.delay = time.Millisecond
	l.publish(t, time.Now(), events(10, 20)...)
	d := startDispatcher(t, l, ep, topic.Defaults(), nil)
	l.publish(t, time.Now(), events(10, 5)...)
	d.Notify()
	waitUntil(t, "250 events are delivered and recorded", func() bool { return l.stats().Delivered == 250 })
	for k := range 10 {
		got := ep.delivered(fmt.Sprint("k", k))
		want := make([]string, 0, 25)
		for i := range 20 {
			want = append(want, fmt.Sprint(i))
		}
		for i := range 5 {
			want = append(want, fmt.Sprint(i))
		}
		if strings.Join(got, ",") != strings.Join(want, ",") {
			t.Fatalf("key k%d delivered %v, want %v", k, got, want)
		}
	}
	ep.mu.Lock()
	defer ep.mu.Unlock()
	if ep.maxPerKey != 1 {
		t.Fatalf("%d events of one key were in flight at once; order per key needs one", ep.maxPerKey)
	}
	if ep.maxTotal > 8 || ep.maxTotal < 2 {
		t.Fatalf("max concurrent sends %d; want parallelism across keys bounded by MaxInFlight 8", ep.maxTotal)
	}
	if st := l.stats(); st.Events != 0 {
		t.Fatalf("%d events still pending", st.Events)
	}
}

func TestFailingKeyDoesNotHoldUpOthersAndDeadLettersAfterMaxRetries(t *testing.T) {
	l := newMemLog()
	ep := newFakeEndpoint()
	ep.fail = func(m *endpoint.Message) error {
		if m.Key == "k0" {
			return errors.New("receiver error 503")
		}
		return nil
	}
	a := topic.Defaults()
	a.RetrySleepDuration = 0
	a.MaxRetries = 3
	l.publish(t, time.Now(), events(5, 4)...)
	startDispatcher(t, l, ep, a, nil)
	waitUntil(t, "the healthy keys are delivered", func() bool { return l.stats().Delivered == 16 })
	waitUntil(t, "k0's events are dead-lettered", func() bool { return l.stats().DeadLetters == 4 })
	dls := l.deadLetters()
	for i, dl := range dls {
		if dl.Reason != ReasonMaxRetries || !strings.Contains(dl.LastError, "503") || dl.Attempts != 3 {
			t.Fatalf("dead letter %d = %+v, want max_retries after 3 attempts with the last error", i, dl)
		}
	}
	if st := l.stats(); st.Retried < 12 {
		t.Fatalf("retried %d times, want at least 3 per k0 event", st.Retried)
	}
}

func TestPermanentFailureIsDeadLetteredAtOnce(t *testing.T) {
	l := newMemLog()
	ep := newFakeEndpoint()
	ep.fail = func(m *endpoint.Message) error {
		if string(m.Payload) == "bad" {
			return endpoint.Permanent(errors.New("HTTP 400: malformed"))
		}
		return nil
	}
	l.publish(t, time.Now(), shard.Event{Key: "a", Payload: []byte("bad")}, shard.Event{Key: "a", Payload: []byte("good")})
	startDispatcher(t, l, ep, topic.Defaults(), nil)
	waitUntil(t, "one delivered, one dead", func() bool { s := l.stats(); return s.Delivered == 1 && s.DeadLetters == 1 })
	dl := l.deadLetters()[0]
	if dl.Reason != ReasonRejected || !strings.Contains(dl.LastError, "400") || dl.Attempts != 0 {
		t.Fatalf("dead letter = %+v", dl)
	}
	if got := ep.delivered("a"); len(got) != 1 || got[0] != "good" {
		t.Fatalf("delivered %v", got)
	}
}

func TestExpiredEventsAreDeadLettered(t *testing.T) {
	l := newMemLog()
	ep := newFakeEndpoint()
	a := topic.Defaults()
	a.TimeToLive = 60
	l.publish(t, time.Now().Add(-2*time.Minute), shard.Event{Key: "old", Payload: []byte("stale")})
	l.publish(t, time.Now(), shard.Event{Key: "new", Payload: []byte("fresh")})
	startDispatcher(t, l, ep, a, nil)
	waitUntil(t, "the old event expires and the new one is delivered", func() bool {
		s := l.stats()
		return s.DeadLetters == 1 && s.Delivered == 1
	})
	if dl := l.deadLetters()[0]; dl.Reason != ReasonExpired {
		t.Fatalf("dead letter reason %q, want %q", dl.Reason, ReasonExpired)
	}
	if len(ep.delivered("old")) != 0 {
		t.Fatal("an expired event was delivered")
	}
}

func TestEndpointDownThenBackDeliversEverythingInOrder(t *testing.T) {
	l := newMemLog()
	ep := newFakeEndpoint()
	var mu sync.Mutex
	down := true
	ep.fail = func(*endpoint.Message) error {
		mu.Lock()
		defer mu.Unlock()
		if down {
			return errors.New("connection refused")
		}
		return nil
	}
	a := topic.Defaults()
	a.RetrySleepDuration = 0
	l.publish(t, time.Now(), events(4, 10)...)
	startDispatcher(t, l, ep, a, nil)
	waitUntil(t, "failed attempts are recorded", func() bool { return l.stats().Retried >= 8 })
	mu.Lock()
	down = false
	mu.Unlock()
	waitUntil(t, "everything is delivered", func() bool { return l.stats().Delivered == 40 })
	for k := range 4 {
		got := ep.delivered(fmt.Sprint("k", k))
		for i, p := range got {
			if p != fmt.Sprint(i) {
				t.Fatalf("key k%d delivered %v: out of order or duplicated", k, got)
			}
		}
	}
	if l.stats().DeadLetters != 0 {
		t.Fatal("events were dead-lettered though retries are unlimited")
	}
}

// TestRetryAfterIsHonoured: an endpoint that answers 429 or 503 with
// Retry-After is not tried again sooner, even when the topic's own pause
// is shorter.
func TestRetryAfterIsHonoured(t *testing.T) {
	l := newMemLog()
	ep := newFakeEndpoint()
	const after = 300 * time.Millisecond
	var mu sync.Mutex
	var sends []time.Time
	ep.fail = func(*endpoint.Message) error {
		mu.Lock()
		defer mu.Unlock()
		sends = append(sends, time.Now())
		if len(sends) == 1 {
			return &endpoint.RetryAfterError{Err: errors.New("503 Service Unavailable"), After: after}
		}
		return nil
	}
	a := topic.Defaults()
	a.RetrySleepDuration = 0 // 10ms, far below Retry-After
	l.publish(t, time.Now(), events(1, 1)...)
	startDispatcher(t, l, ep, a, nil)
	waitUntil(t, "the event is delivered", func() bool { return l.stats().Delivered == 1 })
	mu.Lock()
	defer mu.Unlock()
	if len(sends) != 2 {
		t.Fatalf("%d sends, want 2", len(sends))
	}
	if gap := sends[1].Sub(sends[0]); gap < after {
		t.Fatalf("retried after %v, before the %v the endpoint asked for", gap, after)
	}
}

func TestRecordingFailureRedeliversFromTheLog(t *testing.T) {
	l := newMemLog()
	ep := newFakeEndpoint()
	l.publish(t, time.Now(), events(2, 3)...)
	l.mu.Lock()
	l.fail = errors.New("no leader")
	l.mu.Unlock()
	d := startDispatcher(t, l, ep, topic.Defaults(), nil)
	waitUntil(t, "sends happen", func() bool { return len(ep.delivered("k0")) > 0 })
	l.mu.Lock()
	l.fail = nil
	l.mu.Unlock()
	d.Notify()
	waitUntil(t, "everything is recorded as delivered", func() bool { return l.stats().Delivered == 6 })
	// Deliveries whose recording failed were sent again: at least once.
	if got := ep.delivered("k0"); len(got) < 3 || got[0] != "0" {
		t.Fatalf("k0 delivered %v", got)
	}
}

func TestRetryDelay(t *testing.T) {
	for _, c := range []struct {
		sleep    int64
		attempts uint32
		want     time.Duration
	}{
		{1, 1, time.Second}, {1, 2, 2 * time.Second}, {1, 4, 8 * time.Second},
		{1, 20, time.Minute}, {5, 1, 5 * time.Second}, {0, 1, 10 * time.Millisecond},
	} {
		if got := retryDelay(c.sleep, c.attempts); got != c.want {
			t.Errorf("retryDelay(%d, %d) = %v, want %v", c.sleep, c.attempts, got, c.want)
		}
	}
}

// TestRetryDelayOfYears: 60 times the largest retry_sleep_duration does
// not fit a Duration; the delay must stay positive rather than wrap around
// into retrying at once.
func TestRetryDelayOfYears(t *testing.T) {
	first := time.Duration(topic.MaxSeconds) * time.Second
	if got := retryDelay(topic.MaxSeconds, 1); got != first {
		t.Errorf("retryDelay(MaxSeconds, 1) = %v, want %v", got, first)
	}
	if got := retryDelay(topic.MaxSeconds, 10); got < first {
		t.Errorf("retryDelay(MaxSeconds, 10) = %v, want at least %v", got, first)
	}
}

func TestAdmitSkipsWhatTheFilterRejects(t *testing.T) {
	l := newMemLog()
	ep := newFakeEndpoint()
	// Every other event of each key is for the subscription; the others
	// are skipped, recorded done, and hold up nothing behind them.
	admit := func(e *shard.Event) bool { return len(e.Payload) > 0 && (e.Payload[len(e.Payload)-1]-'0')%2 == 0 }
	l.publish(t, time.Now(), events(4, 10)...)
	startDispatcher(t, l, ep, topic.Defaults(), func(c *Config) { c.Admit = admit })
	waitUntil(t, "every event is delivered or skipped", func() bool { return l.stats().Events == 0 })
	for k := range 4 {
		got := ep.delivered(fmt.Sprint("k", k))
		if want := "0,2,4,6,8"; strings.Join(got, ",") != want {
			t.Fatalf("key k%d delivered %v, want %s in order", k, got, want)
		}
	}
	if st := l.stats(); st.Skipped != 20 || st.Delivered != 20 {
		t.Fatalf("skipped %d, delivered %d; want 20 of each", st.Skipped, st.Delivered)
	}
}

// After a seek back, the dispatcher drops its window and delivers again,
// in order, what it had delivered from the seek's offset on.
func TestSeekDeliversAgain(t *testing.T) {
	l := newMemLog()
	if _, err := l.Propose(context.Background(), &shard.Command{Op: shard.OpRetain}); err != nil {
		t.Fatal(err)
	}
	ep := newFakeEndpoint()
	l.publish(t, time.Now(), events(2, 5)...)
	startDispatcher(t, l, ep, topic.Defaults(), nil)
	waitUntil(t, "10 events are delivered", func() bool { return l.stats().Delivered == 10 })
	// No Notify: the seek wakes the dispatcher, as one proposed through
	// another node does.
	if _, err := l.Propose(context.Background(), &shard.Command{Op: shard.OpSeek, From: 4}); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "the 6 events from offset 4 are delivered again", func() bool {
		st := l.stats()
		return st.Events == 0 && len(ep.delivered("k0"))+len(ep.delivered("k1")) == 16
	})
	// events(2, 5) alternates keys: offsets 4-9 are the last three of each.
	for k := range 2 {
		got := strings.Join(ep.delivered(fmt.Sprint("k", k)), ",")
		if want := "0,1,2,3,4,2,3,4"; got != want {
			t.Errorf("key k%d delivered %s, want %s", k, got, want)
		}
	}
}
