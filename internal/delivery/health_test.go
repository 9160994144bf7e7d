package delivery

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"herald/internal/endpoint"
	"herald/internal/topic"
)

// logRecorder is a Config.Logger that keeps its lines.
type logRecorder struct {
	mu    sync.Mutex
	lines []string
}

func (l *logRecorder) Warn(msg string, args ...any) { l.add("WARN", msg, args) }
func (l *logRecorder) Info(msg string, args ...any) { l.add("INFO", msg, args) }

func (l *logRecorder) add(level, msg string, args []any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lines = append(l.lines, level+" "+msg+" "+fmt.Sprint(args...))
}

func (l *logRecorder) get() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.lines...)
}

// clockFrom is a clock that starts at base and runs with real time, so
// that retries come due, without the test depending on today's date.
func clockFrom(base time.Time) func() time.Time {
	start := time.Now()
	return func() time.Time { return base.Add(time.Since(start)) }
}

// TestHealthOfAFailingEndpoint: while the endpoint refuses connections the
// dispatcher's health shows the error, when it happened and the failures
// since the last success; once it is back, the last success. The log has
// one line for the run of failures and one for the recovery, not one per
// retry.
func TestHealthOfAFailingEndpoint(t *testing.T) {
	l := newMemLog()
	ep := newFakeEndpoint()
	var mu sync.Mutex
	down := true
	ep.fail = func(*endpoint.Message) error {
		mu.Lock()
		defer mu.Unlock()
		if down {
			return errors.New("dial tcp 127.0.0.1:9: connect: connection refused")
		}
		return nil
	}
	a := topic.Defaults()
	a.RetrySleepDuration = 0 // retries from 10ms; max_retries 0: forever
	base := time.Date(2031, 1, 2, 3, 4, 5, 0, time.UTC)
	logs := &logRecorder{}
	l.publish(t, base, events(4, 5)...)
	d := startDispatcher(t, l, ep, a, func(c *Config) { c.now, c.Logger = clockFrom(base), logs })

	waitUntil(t, "failures are counted", func() bool { return d.Health().ConsecutiveFailures >= 12 })
	h := d.Health()
	if !strings.Contains(h.LastError, "connection refused") || h.LastErrorTime.Before(base) || !h.LastSuccess.IsZero() {
		t.Fatalf("health while the endpoint is down = %+v, want its error, its time, no success", h)
	}
	mu.Lock()
	down = false
	mu.Unlock()
	waitUntil(t, "everything is delivered", func() bool { return l.stats().Delivered == 20 })
	h = d.Health()
	if h.ConsecutiveFailures != 0 || h.LastSuccess.Before(h.LastErrorTime) || !strings.Contains(h.LastError, "connection refused") {
		t.Fatalf("health after the endpoint is back = %+v, want no failures since a success after the last error", h)
	}
	lines := logs.get()
	if len(lines) != 2 || !strings.HasPrefix(lines[0], "WARN push delivery failing") || !strings.Contains(lines[0], "connection refused") ||
		!strings.HasPrefix(lines[1], "INFO push delivery recovered") {
		t.Fatalf("log lines:\n%s\nwant one for the failures and one for the recovery", strings.Join(lines, "\n"))
	}
}

// TestHealthLogIsRateLimited: an endpoint that keeps failing and
// recovering logs a run of failures and its recovery at most once a
// minute, and says how many runs went unlogged.
func TestHealthLogIsRateLimited(t *testing.T) {
	var h health
	t0 := time.Date(2031, 1, 2, 3, 4, 5, 0, time.UTC)
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	check := func(what string, got, want bool) {
		t.Helper()
		if got != want {
			t.Fatalf("%s: logged %v, want %v", what, got, want)
		}
	}
	logIt, _ := h.failed(at(0), "e1")
	check("first failure", logIt, true)
	logIt, _ = h.failed(at(1), "e2")
	check("second failure of the run", logIt, false)
	logIt, n, since := h.succeeded(at(2))
	check("recovery", logIt, true)
	if n != 2 || !since.Equal(at(0)) {
		t.Fatalf("recovery after %d failures since %v, want 2 since %v", n, since, at(0))
	}
	logIt, _ = h.failed(at(3), "e3")
	check("a failure run within the minute", logIt, false)
	logIt, _, _ = h.succeeded(at(4))
	check("the recovery of an unlogged run", logIt, false)
	logIt, unlogged := h.failed(at(61), "e4")
	check("a failure run a minute later", logIt, true)
	if unlogged != 1 {
		t.Fatalf("%d unlogged runs, want 1", unlogged)
	}
	if got := h.get(); got.LastError != "e4" || !got.LastErrorTime.Equal(at(61)) || got.ConsecutiveFailures != 1 || !got.LastSuccess.Equal(at(4)) {
		t.Fatalf("health = %+v", got)
	}
}

// TestHealthFailingSince: FailingSince is the first failure of the
// current run, and failingFor its length; a success ends the run.
func TestHealthFailingSince(t *testing.T) {
	var h health
	t0 := time.Date(2031, 1, 2, 3, 4, 5, 0, time.UTC)
	if d := h.failingFor(t0); d != 0 {
		t.Fatalf("failing for %v before any push", d)
	}
	h.failed(t0, "e1")
	h.failed(t0.Add(time.Minute), "e2")
	if got := h.get().FailingSince; !got.Equal(t0) {
		t.Fatalf("FailingSince %v, want the run's first failure %v", got, t0)
	}
	if d := h.failingFor(t0.Add(time.Hour)); d != time.Hour {
		t.Fatalf("failing for %v, want 1h", d)
	}
	h.succeeded(t0.Add(2 * time.Hour))
	if got := h.get(); !got.FailingSince.IsZero() || h.failingFor(t0.Add(3*time.Hour)) != 0 {
		t.Fatalf("after a success: %+v, want no run", got)
	}
	h.failed(t0.Add(4*time.Hour), "e3")
	if d := h.failingFor(t0.Add(5 * time.Hour)); d != time.Hour {
		t.Fatalf("a new run: failing for %v, want 1h", d)
	}
}
