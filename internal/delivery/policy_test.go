package delivery

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"herald/internal/endpoint"
	"herald/internal/topic"
)

// offsetClock is real time moved forward by what the test adds, so that
// retries still come due while a test skips hours.
type offsetClock struct{ off atomic.Int64 }

func (c *offsetClock) now() time.Time          { return time.Now().Add(time.Duration(c.off.Load())) }
func (c *offsetClock) advance(d time.Duration) { c.off.Add(int64(d)) }

// disables records the calls of Config.OnDisable.
type disables struct {
	mu      sync.Mutex
	reasons []string
}

func (d *disables) record(reason string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.reasons = append(d.reasons, reason)
}

func (d *disables) get() []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]string(nil), d.reasons...)
}

// sendLog records when each send started, and counts them.
type sendLog struct {
	mu    sync.Mutex
	times []time.Time
}

func (s *sendLog) add() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.times = append(s.times, time.Now())
}

func (s *sendLog) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.times)
}

func (s *sendLog) get() []time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]time.Time(nil), s.times...)
}

// TestGoneDisablesAndKeepsTheEvents: a 410 calls OnDisable once, although
// every key's send is refused; nothing is acknowledged, counted as an
// attempt or dead-lettered, and nothing more is sent. A new dispatcher,
// started when the endpoint is back, delivers the backlog in order.
func TestGoneDisablesAndKeepsTheEvents(t *testing.T) {
	l := newMemLog()
	ep := newFakeEndpoint()
	var sends sendLog
	ep.fail = func(*endpoint.Message) error {
		sends.add()
		return endpoint.Gone(errors.New("endpoint answered 410 Gone"))
	}
	var off disables
	l.publish(t, time.Now(), events(3, 4)...)
	d := startDispatcher(t, l, ep, topic.Defaults(), func(c *Config) { c.OnDisable = off.record })
	waitUntil(t, "OnDisable is called", func() bool { return len(off.get()) > 0 })

	time.Sleep(100 * time.Millisecond) // time for sends that should not happen
	d.Notify()
	time.Sleep(100 * time.Millisecond)
	if got := off.get(); len(got) != 1 || !strings.Contains(got[0], "410 Gone") || !strings.Contains(got[0], endpoint.ErrGone.Error()) {
		t.Fatalf("OnDisable called with %q, want once, saying the endpoint is gone", got)
	}
	if n := sends.count(); n > 3 {
		t.Fatalf("%d sends; after the first 410 only those already in flight (one per key, 3) may happen", n)
	}
	if st := l.stats(); st.Delivered != 0 || st.DeadLetters != 0 || st.Retried != 0 || st.Events != 12 {
		t.Fatalf("stats %+v: want all 12 events pending, none delivered, dead or counted as attempts", st)
	}
	if h := d.Health(); !h.Disabled || !strings.Contains(h.DisabledReason, "410") || h.FailingSince.IsZero() {
		t.Fatalf("health %+v: want disabled with the reason and the run's start", h)
	}

	d.Stop()
	back := newFakeEndpoint()
	startDispatcher(t, l, back, topic.Defaults(), func(c *Config) { c.OnDisable = off.record })
	waitUntil(t, "the backlog is delivered", func() bool { return l.stats().Delivered == 12 })
	for k := range 3 {
		if got := strings.Join(back.delivered(fmt.Sprint("k", k)), ","); got != "0,1,2,3" {
			t.Fatalf("key k%d delivered %s, want 0,1,2,3", k, got)
		}
	}
	if n := len(off.get()); n != 1 {
		t.Fatalf("OnDisable called %d times", n)
	}
}

// TestGoneWithoutPolicyIsRejected: with no OnDisable, a 410 is what it was
// before the disable policy existed, a permanent refusal of the event.
func TestGoneWithoutPolicyIsRejected(t *testing.T) {
	l := newMemLog()
	ep := newFakeEndpoint()
	ep.fail = func(*endpoint.Message) error { return endpoint.Gone(errors.New("endpoint answered 410 Gone")) }
	l.publish(t, time.Now(), events(1, 2)...)
	startDispatcher(t, l, ep, topic.Defaults(), nil)
	waitUntil(t, "both events are dead-lettered", func() bool { return l.stats().DeadLetters == 2 })
	if dl := l.deadLetters()[0]; dl.Reason != ReasonRejected || !strings.Contains(dl.LastError, "410") {
		t.Fatalf("dead letter %+v, want rejected with the 410", dl)
	}
}

// TestDisableAfterContinuousFailures: OnDisable is called once pushes have
// failed without a success for DisableAfter, counted from the first
// failure of the run; a success in between starts the count again. The
// test moves the dispatcher's clock instead of waiting hours.
func TestDisableAfterContinuousFailures(t *testing.T) {
	l := newMemLog()
	ep := newFakeEndpoint()
	var sends atomic.Int64
	var succeedOnce atomic.Bool
	ep.fail = func(*endpoint.Message) error {
		sends.Add(1)
		if succeedOnce.CompareAndSwap(true, false) {
			return nil
		}
		return errors.New("receiver error 503")
	}
	a := topic.Defaults()
	a.RetrySleepDuration = 0 // retries within 10ms to 600ms
	var clock offsetClock
	var off disables
	l.publish(t, time.Now(), events(1, 10)...)
	d := startDispatcher(t, l, ep, a, func(c *Config) {
		c.now = clock.now
		c.DisableAfter = time.Hour
		c.OnDisable = off.record
	})
	failures := func() uint64 { return d.Health().ConsecutiveFailures }
	// failAfter moves the clock by by, then waits for a failure seen at
	// the new time.
	failAfter := func(by time.Duration) {
		t.Helper()
		clock.advance(by)
		seen := failures()
		waitUntil(t, "another failure", func() bool { return failures() > seen || len(off.get()) > 0 })
	}

	waitUntil(t, "pushes fail", func() bool { return failures() >= 2 })
	firstRun := d.Health().FailingSince
	failAfter(40 * time.Minute)
	if got := off.get(); len(got) != 0 {
		t.Fatalf("disabled after 40 minutes of failures: %q", got)
	}

	succeedOnce.Store(true)
	waitUntil(t, "one push succeeds", func() bool { return l.stats().Delivered == 1 })
	waitUntil(t, "pushes fail again", func() bool { return failures() >= 1 })
	if since := d.Health().FailingSince; !since.After(firstRun.Add(40 * time.Minute)) {
		t.Fatalf("the new run started at %v, before the success that ended the first (%v + 40m)", since, firstRun)
	}
	failAfter(40 * time.Minute) // 80 minutes since the first run began, 40 since this one did
	if got := off.get(); len(got) != 0 {
		t.Fatalf("disabled 40 minutes into a run; the success before it should have reset the count: %q", got)
	}
	failAfter(30 * time.Minute)
	waitUntil(t, "OnDisable is called", func() bool { return len(off.get()) > 0 })
	if got := off.get(); len(got) != 1 || !strings.Contains(got[0], "503") || !strings.Contains(got[0], "1h0m0s") {
		t.Fatalf("OnDisable called with %q, want once, with the limit and the last error", got)
	}

	atDisable := sends.Load()
	clock.advance(2 * time.Hour) // every retry is due
	d.Notify()
	time.Sleep(300 * time.Millisecond)
	if n := sends.Load(); n != atDisable {
		t.Fatalf("%d sends after OnDisable", n-atDisable)
	}
	if n := len(off.get()); n != 1 {
		t.Fatalf("OnDisable called %d times", n)
	}
	if st := l.stats(); st.Events != 9 || st.DeadLetters != 0 {
		t.Fatalf("stats %+v: want 9 events pending and none dead", st)
	}
	if h := d.Health(); !h.Disabled || h.DisabledReason != off.get()[0] {
		t.Fatalf("health %+v: want disabled, with OnDisable's reason", h)
	}
}

// TestDisableAfterNeedsFailures: a dispatcher whose endpoint has never
// failed is not disabled, however long it runs.
func TestDisableAfterNeedsFailures(t *testing.T) {
	l := newMemLog()
	ep := newFakeEndpoint()
	var clock offsetClock
	var off disables
	l.publish(t, time.Now(), events(2, 2)...)
	d := startDispatcher(t, l, ep, topic.Defaults(), func(c *Config) {
		c.now = clock.now
		c.DisableAfter = time.Minute
		c.OnDisable = off.record
	})
	waitUntil(t, "delivered", func() bool { return l.stats().Delivered == 4 })
	clock.advance(time.Hour)
	l.publish(t, time.Now(), events(2, 1)...)
	d.Notify()
	waitUntil(t, "delivered", func() bool { return l.stats().Delivered == 6 })
	if got := off.get(); len(got) != 0 || d.Health().Disabled {
		t.Fatalf("a healthy endpoint was disabled: %q", got)
	}
}

// TestRetryAfterPausesTheWholeDispatcher: after a 429 with Retry-After on
// one key, no key is sent to until the pause is over; then everything is
// delivered, in order per key, and the refused send counts as an attempt.
func TestRetryAfterPausesTheWholeDispatcher(t *testing.T) {
	l := newMemLog()
	ep := newFakeEndpoint()
	const after = 400 * time.Millisecond
	var sends sendLog
	var refusedAt time.Time
	ep.fail = func(m *endpoint.Message) error {
		sends.add()
		if sends.count() == 1 {
			refusedAt = time.Now() // before the dispatcher hears of it
			return &endpoint.RetryAfterError{Err: errors.New("429 Too Many Requests"), After: after}
		}
		return nil
	}
	a := topic.Defaults()
	a.RetrySleepDuration = 0 // 10ms, far below Retry-After
	l.publish(t, time.Now(), events(2, 2)...)
	// One send at a time: with a pause of the refused key only, k1 would
	// go at once.
	d := startDispatcher(t, l, ep, a, func(c *Config) { c.MaxInFlight = 1 })
	waitUntil(t, "everything is delivered", func() bool { return l.stats().Delivered == 4 })

	times := sends.get()
	if len(times) != 5 {
		t.Fatalf("%d sends, want 5 (one refused)", len(times))
	}
	for i, at := range times[1:] {
		if gap := at.Sub(refusedAt); gap < after {
			t.Fatalf("send %d started %v after the 429, within the %v pause it asked for", i+2, gap, after)
		}
	}
	for k := range 2 {
		if got := strings.Join(ep.delivered(fmt.Sprint("k", k)), ","); got != "0,1" {
			t.Fatalf("key k%d delivered %s, want 0,1", k, got)
		}
	}
	if st := l.stats(); st.Retried != 1 {
		t.Fatalf("%d attempts recorded, want the refused one", st.Retried)
	}
	if h := d.Health(); h.PausedUntil.IsZero() || h.Disabled {
		t.Fatalf("health %+v: want the pause shown, and not disabled", h)
	}
}

// TestMaxPerSecondLimitsTheRate: 20 events at 10 a second take at least
// 1.9 s from the first send to the last (a burst of one, then one every
// 100ms). Only a lower bound is checked: a loaded machine is slower, never
// faster.
func TestMaxPerSecondLimitsTheRate(t *testing.T) {
	l := newMemLog()
	ep := newFakeEndpoint()
	var sends sendLog
	ep.fail = func(*endpoint.Message) error { sends.add(); return nil }
	l.publish(t, time.Now(), events(20, 1)...)
	startDispatcher(t, l, ep, topic.Defaults(), func(c *Config) { c.MaxPerSecond = 10 })
	waitUntil(t, "everything is delivered", func() bool { return l.stats().Delivered == 20 })
	times := sends.get()
	if took := times[len(times)-1].Sub(times[0]); took < 1500*time.Millisecond {
		t.Fatalf("20 sends at 10 a second took %v, want at least 1.5s", took)
	}
}

// TestWaitForTokenEndsOnStop: a dispatcher waiting for a token of a very
// low rate stops at once.
func TestWaitForTokenEndsOnStop(t *testing.T) {
	l := newMemLog()
	ep := newFakeEndpoint()
	l.publish(t, time.Now(), events(3, 1)...)
	d := Start(t.Context(), l, Config{Topic: "t", Attributes: topic.Defaults(), Endpoint: ep, MaxPerSecond: 0.001})
	waitUntil(t, "the first event is delivered", func() bool { return l.stats().Delivered == 1 })
	stopped := make(chan struct{})
	go func() { d.Stop(); close(stopped) }()
	select {
	case <-stopped:
	case <-time.After(10 * time.Second): // the next token is 1000 s away
		t.Fatal("Stop did not end the wait for a token")
	}
	if st := l.stats(); st.Delivered != 1 {
		t.Fatalf("%d delivered; the rate allows one", st.Delivered)
	}
}

func TestBucket(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	b := newBucket(10, t0) // burst 1
	take := func(at time.Duration, wantOK bool, wantWait time.Duration) {
		t.Helper()
		wait, ok := b.take(t0.Add(at))
		if ok != wantOK || wait != wantWait {
			t.Fatalf("take at %v = %v, %v; want %v, %v", at, wait, ok, wantWait, wantOK)
		}
	}
	take(0, true, 0)
	take(0, false, 100*time.Millisecond)
	take(60*time.Millisecond, false, 40*time.Millisecond)
	take(100*time.Millisecond, true, 0)
	take(50*time.Millisecond, false, 100*time.Millisecond) // a clock that steps back adds nothing
	take(10*time.Second, true, 0)                          // idle time fills only the burst
	take(10*time.Second, false, 100*time.Millisecond)

	b = newBucket(100, t0) // burst 10
	for i := range 10 {
		if _, ok := b.take(t0); !ok {
			t.Fatalf("take %d of a burst of 10 failed", i+1)
		}
	}
	if wait, ok := b.take(t0); ok || wait != 10*time.Millisecond {
		t.Fatalf("take past the burst = %v, %v; want a wait of 10ms", wait, ok)
	}

	// Over a simulated minute, takes every millisecond get the rate.
	b, n := newBucket(50, t0), 0
	for ms := range 60_000 {
		if _, ok := b.take(t0.Add(time.Duration(ms) * time.Millisecond)); ok {
			n++
		}
	}
	if n < 2995 || n > 3005 {
		t.Fatalf("%d sends in a minute at 50 a second", n)
	}

	b = newBucket(1e-9, t0)
	b.take(t0)
	if wait, _ := b.take(t0.Add(time.Nanosecond)); wait != maxTokenWait {
		t.Fatalf("wait at a rate of one in 30 years = %v, want %v", wait, maxTokenWait)
	}
}
