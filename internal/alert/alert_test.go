package alert

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"herald/internal/backoff"
	"herald/internal/endpoint"
	"herald/internal/endpoint/webhook"
)

// post is a request the test receiver got.
type post struct {
	header http.Header
	body   []byte
	at     time.Time
}

// receiver is an operator's webhook on loopback. answer decides each
// response from the number of the request (1 for the first); nil answers
// 204.
func receiver(t *testing.T, answer func(n int, w http.ResponseWriter)) (*httptest.Server, <-chan post) {
	t.Helper()
	got := make(chan post, 100)
	var n atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		got <- post{r.Header.Clone(), body, time.Now()}
		if answer != nil {
			answer(int(n.Add(1)), w)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(srv.Close)
	return srv, got
}

// fastRetry retries within milliseconds, so tests do not wait.
var fastRetry = backoff.Policy{Initial: time.Millisecond, Max: 10 * time.Millisecond}

func start(t *testing.T, cfg Config) *Notifier {
	t.Helper()
	n, err := New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() { n.Close() })
	return n
}

func receive(t *testing.T, got <-chan post) post {
	t.Helper()
	select {
	case p := <-got:
		return p
	case <-time.After(10 * time.Second):
		t.Fatal("the receiver got nothing")
		return post{}
	}
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting until %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func disabled(sub string) Alert {
	return Alert{Type: SubscriptionDisabled, Topic: "orders", Subscription: sub, Reason: "the endpoint no longer exists: 410 Gone"}
}

// TestDeliversTheAlertAsJSON: the receiver gets exactly the alert, with
// the node and time filled in, in the documented form.
func TestDeliversTheAlertAsJSON(t *testing.T) {
	srv, got := receiver(t, nil)
	at := time.Date(2026, 11, 26, 16, 5, 32, 123456789, time.FixedZone("CET", 3600))
	n := start(t, Config{URL: srv.URL, Node: "n1"})
	n.Notify(Alert{Type: SubscriptionDisabled, Topic: "orders", Subscription: "billing", Reason: "gone", Time: at})

	p := receive(t, got)
	want := `{"type":"subscription.disabled","topic":"orders","subscription":"billing","reason":"gone","time":"2026-11-26T15:05:32.123456789Z","node":"n1"}`
	if string(p.body) != want {
		t.Fatalf("body\n%s\nwant\n%s", p.body, want)
	}
	if ct := p.header.Get("Content-Type"); ct != "application/json" {
		t.Errorf("Content-Type %q", ct)
	}
	if p.header.Get(webhook.HeaderSignature) != "" {
		t.Error("signed without a secret")
	}
	waitFor(t, "the alert is counted as sent", func() bool { return n.Stats().Sent == 1 })
}

func TestAlertWithoutTimeGetsTheClocks(t *testing.T) {
	srv, got := receiver(t, nil)
	now := time.Date(2026, 1, 2, 3, 4, 5, 6, time.UTC)
	n := start(t, Config{URL: srv.URL, Node: "n1", now: func() time.Time { return now }})
	n.Notify(Alert{Type: SubscriptionEnabled, Topic: "orders", Subscription: "billing", Node: "n2"})
	var a Alert
	if err := json.Unmarshal(receive(t, got).body, &a); err != nil {
		t.Fatal(err)
	}
	if want := (Alert{Type: SubscriptionEnabled, Topic: "orders", Subscription: "billing", Time: now, Node: "n2"}); a != want {
		t.Fatalf("received %+v, want %+v", a, want)
	}
}

// TestSigned: with a secret, webhook.Verify accepts the alert's signature,
// as it does a delivery's.
func TestSigned(t *testing.T) {
	srv, got := receiver(t, nil)
	n := start(t, Config{URL: srv.URL, Secret: "s3cret"})
	n.Notify(disabled("billing"))
	p := receive(t, got)
	ts, sig := p.header.Get(webhook.HeaderTimestamp), p.header.Get(webhook.HeaderSignature)
	if !webhook.Verify("s3cret", ts, p.body, sig) {
		t.Fatalf("signature %q of timestamp %q does not verify", sig, ts)
	}
	if webhook.Verify("other", ts, p.body, sig) {
		t.Fatal("the signature verifies with another secret")
	}
}

// TestRetriesAfterServerErrors: a receiver that fails twice with 500 gets
// the alert a third time, and it is counted once, as sent.
func TestRetriesAfterServerErrors(t *testing.T) {
	srv, got := receiver(t, func(n int, w http.ResponseWriter) {
		if n <= 2 {
			http.Error(w, "down", http.StatusInternalServerError)
			return
		}
		w.WriteHeader(http.StatusOK)
	})
	n := start(t, Config{URL: srv.URL, Retry: fastRetry})
	n.Notify(disabled("billing"))
	first := receive(t, got)
	for range 2 {
		if p := receive(t, got); string(p.body) != string(first.body) {
			t.Fatalf("retry sent %s, first attempt %s", p.body, first.body)
		}
	}
	waitFor(t, "the alert is sent", func() bool { return n.Stats().Sent == 1 })
	if s := n.Stats(); s.Failed != 0 || s.Dropped != 0 {
		t.Fatalf("stats %+v", s)
	}
}

// TestRetryAfter: a 503 with Retry-After: 1 is tried again no sooner.
func TestRetryAfter(t *testing.T) {
	srv, got := receiver(t, func(n int, w http.ResponseWriter) {
		if n == 1 {
			w.Header().Set("Retry-After", "1")
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		w.WriteHeader(http.StatusOK)
	})
	n := start(t, Config{URL: srv.URL, Retry: fastRetry})
	n.Notify(disabled("billing"))
	first, second := receive(t, got), receive(t, got)
	if gap := second.at.Sub(first.at); gap < time.Second {
		t.Fatalf("retried %v after a Retry-After of 1s", gap)
	}
}

// TestGivesUp: a refusal (400) is not retried; a receiver that keeps
// failing gets MaxAttempts tries. Both count as failed, and are logged.
func TestGivesUp(t *testing.T) {
	for _, c := range []struct {
		status, attempts int
	}{{http.StatusBadRequest, 1}, {http.StatusBadGateway, 3}} {
		t.Run(fmt.Sprint(c.status), func(t *testing.T) {
			var requests atomic.Int32
			srv, _ := receiver(t, func(_ int, w http.ResponseWriter) {
				requests.Add(1)
				w.WriteHeader(c.status)
			})
			var log logRecorder
			n := start(t, Config{URL: srv.URL, Retry: fastRetry, MaxAttempts: 3, Logger: &log})
			n.Notify(disabled("billing"))
			waitFor(t, "the alert fails", func() bool { return n.Stats().Failed == 1 })
			n.Close()
			if got := requests.Load(); got != int32(c.attempts) {
				t.Fatalf("%d requests, want %d", got, c.attempts)
			}
			if lines := log.get(); len(lines) != 1 || !strings.Contains(lines[0], fmt.Sprint(c.status)) {
				t.Fatalf("log %q, want one line with the status", lines)
			}
		})
	}
}

// TestFullQueueDropsTheOldest: while the receiver holds the first alert,
// a queue of 3 takes 5 more; the 2 oldest of those are dropped and
// counted, and the newest 3 follow the first.
func TestFullQueueDropsTheOldest(t *testing.T) {
	release := make(chan struct{})
	srv, got := receiver(t, func(n int, w http.ResponseWriter) {
		if n == 1 {
			<-release
		}
		w.WriteHeader(http.StatusNoContent)
	})
	defer close(release) // before srv.Close, which waits for handlers
	n := start(t, Config{URL: srv.URL, QueueSize: 3})
	n.Notify(disabled("s0"))
	receive(t, got) // s0 is in flight
	for i := 1; i <= 5; i++ {
		n.Notify(disabled(fmt.Sprint("s", i)))
	}
	if s := n.Stats(); s.Dropped != 2 || s.Queued != 3 {
		t.Fatalf("stats %+v, want 2 dropped and 3 queued", s)
	}
	release <- struct{}{}
	for _, want := range []string{"s3", "s4", "s5"} {
		var a Alert
		if err := json.Unmarshal(receive(t, got).body, &a); err != nil || a.Subscription != want {
			t.Fatalf("received %+v (%v), want subscription %s", a, err, want)
		}
	}
	waitFor(t, "all are sent", func() bool { return n.Stats().Sent == 4 })
}

// TestNotifyDoesNotBlock: with the receiver stuck, Notify still returns
// at once, however many alerts come.
func TestNotifyDoesNotBlock(t *testing.T) {
	release := make(chan struct{})
	srv, _ := receiver(t, func(int, http.ResponseWriter) { <-release })
	defer close(release)
	n := start(t, Config{URL: srv.URL, QueueSize: 10, CloseTimeout: 10 * time.Millisecond})
	done := make(chan struct{})
	go func() {
		for i := range 1000 {
			n.Notify(disabled(fmt.Sprint("s", i)))
		}
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Notify blocked")
	}
}

// TestCloseDeliversTheQueue: Close returns once what was queued has been
// delivered.
func TestCloseDeliversTheQueue(t *testing.T) {
	srv, got := receiver(t, nil)
	n := start(t, Config{URL: srv.URL})
	for i := range 5 {
		n.Notify(disabled(fmt.Sprint("s", i)))
	}
	n.Close()
	if s := n.Stats(); s.Sent != 5 || s.Queued != 0 {
		t.Fatalf("after Close: %+v, want 5 sent", s)
	}
	if len(got) != 5 {
		t.Fatalf("the receiver got %d alerts", len(got))
	}
	n.Notify(disabled("late")) // dropped, and no panic
	if s := n.Stats(); s.Dropped != 1 {
		t.Fatalf("an alert after Close: %+v, want it dropped", s)
	}
	n.Close() // again: nothing happens
}

// TestCloseIsBounded: with the receiver stuck, Close gives up after
// CloseTimeout, counts what it did not send as dropped, and its goroutine
// and connections end.
func TestCloseIsBounded(t *testing.T) {
	release := make(chan struct{})
	srv, got := receiver(t, func(int, http.ResponseWriter) { <-release })
	var once sync.Once
	free := func() { once.Do(func() { close(release) }) }
	t.Cleanup(free) // before srv.Close, which waits for handlers, even if the test fails
	before := runtime.NumGoroutine()

	n, err := New(Config{URL: srv.URL, CloseTimeout: 100 * time.Millisecond, Timeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		n.Notify(disabled(fmt.Sprint("s", i)))
	}
	receive(t, got) // s0 is in flight
	closed := make(chan struct{})
	go func() { n.Close(); close(closed) }()
	select {
	case <-closed:
	case <-time.After(10 * time.Second):
		t.Fatal("Close did not give up on a stuck receiver")
	}
	if s := n.Stats(); s.Dropped != 3 || s.Sent != 0 {
		t.Fatalf("after Close: %+v, want all 3 dropped", s)
	}
	free() // the server's handler of s0 ends too
	srv.CloseClientConnections()
	waitFor(t, "the Notifier's goroutines end", func() bool { return runtime.NumGoroutine() <= before })
}

// TestNoGoroutineLeft: a Notifier that delivered and retried leaves no
// goroutine behind once closed.
func TestNoGoroutineLeft(t *testing.T) {
	srv, _ := receiver(t, func(n int, w http.ResponseWriter) {
		if n%2 == 1 {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		w.WriteHeader(http.StatusOK)
	})
	before := runtime.NumGoroutine()
	n, err := New(Config{URL: srv.URL, Retry: fastRetry})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		n.Notify(disabled(fmt.Sprint("s", i)))
	}
	n.Close()
	if s := n.Stats(); s.Sent != 5 {
		t.Fatalf("stats %+v", s)
	}
	// Not srv.CloseClientConnections: Close must close its idle connections.
	waitFor(t, "the Notifier's goroutines end", func() bool { return runtime.NumGoroutine() <= before })
}

// TestGuard: with a guard, the webhook is reached only where the guard
// allows; a refusal is not retried.
func TestGuard(t *testing.T) {
	srv, got := receiver(t, nil)
	strict, err := endpoint.NewGuard(endpoint.GuardConfig{})
	if err != nil {
		t.Fatal(err)
	}
	var log logRecorder
	n := start(t, Config{URL: srv.URL, Guard: strict, Retry: fastRetry, Logger: &log})
	n.Notify(disabled("billing"))
	waitFor(t, "the alert fails", func() bool { return n.Stats().Failed == 1 })
	if len(got) != 0 {
		t.Fatal("the guard let the alert reach loopback")
	}
	if lines := log.get(); len(lines) != 1 || !strings.Contains(lines[0], endpoint.ErrRefused.Error()) {
		t.Fatalf("log %q, want the guard's refusal", lines)
	}

	loopback, err := endpoint.NewGuard(endpoint.GuardConfig{Allow: []string{"127.0.0.0/8", "::1/128"}})
	if err != nil {
		t.Fatal(err)
	}
	n = start(t, Config{URL: srv.URL, Guard: loopback})
	n.Notify(disabled("billing"))
	receive(t, got)
}

func TestNewRefusesBadURLs(t *testing.T) {
	for _, u := range []string{"", "ftp://alerts.example/hook", "http://", "hooks.example/alerts", "http://a b/"} {
		if n, err := New(Config{URL: u}); err == nil {
			n.Close()
			t.Errorf("New accepted URL %q", u)
		}
	}
}

func TestClassify(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	for _, c := range []struct {
		status     int
		retryAfter string
		wantErr    bool
		permanent  bool
		after      time.Duration
	}{
		{200, "", false, false, 0},
		{204, "", false, false, 0},
		{302, "", true, true, 0},
		{400, "", true, true, 0},
		{410, "", true, true, 0},
		{429, "", true, false, 0},
		{429, "30", true, false, 30 * time.Second},
		{500, "30", true, false, 0}, // only 429 and 503 say when
		{503, now.Add(time.Minute).Format(http.TimeFormat), true, false, time.Minute},
	} {
		resp := &http.Response{StatusCode: c.status, Status: fmt.Sprint(c.status), Header: http.Header{}}
		if c.retryAfter != "" {
			resp.Header.Set("Retry-After", c.retryAfter)
		}
		err := classify(resp, "https://alerts.example/hook", now)
		after, _ := endpoint.RetryAfter(err)
		if (err != nil) != c.wantErr || endpoint.IsPermanent(err) != c.permanent || after != c.after {
			t.Errorf("%d Retry-After %q: %v (permanent %v, after %v)", c.status, c.retryAfter, err, endpoint.IsPermanent(err), after)
		}
	}
}

// logRecorder is a Config.Logger that keeps its lines.
type logRecorder struct {
	mu    sync.Mutex
	lines []string
}

func (l *logRecorder) Warn(msg string, args ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lines = append(l.lines, msg+" "+fmt.Sprint(args...))
}

func (l *logRecorder) get() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.lines...)
}
