package nats

import (
	"context"
	"fmt"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"herald/internal/endpoint"
	"herald/internal/endpoint/endpointtest"
	"herald/internal/testkit"
	"herald/internal/topic"
)

// The tests run against real nats-server processes (testkit.StartNATS).

func attrs(s *testkit.NATS, subject string, jetStream bool) topic.Attributes {
	a := topic.Defaults()
	a.PushEndpoint = s.URL()
	a.NATSSubject = subject
	a.NATSJetStream = jetStream
	return a
}

func newEndpoint(t *testing.T, a topic.Attributes) *Endpoint { return endpointtest.Open(t, New, a) }

var message = endpointtest.Message

func send(t *testing.T, e *Endpoint, m *endpoint.Message) { endpointtest.Send(t, e, m) }

func connect(t *testing.T, s *testkit.NATS) *nats.Conn {
	t.Helper()
	nc, err := nats.Connect(s.URL())
	if err != nil {
		t.Fatalf("connect to the test server: %v", err)
	}
	t.Cleanup(nc.Close)
	return nc
}

func subscribe(t *testing.T, nc *nats.Conn, subject string) *nats.Subscription {
	t.Helper()
	sub, err := nc.SubscribeSync(subject)
	if err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil { // the server has the subscription
		t.Fatal(err)
	}
	return sub
}

func next(t *testing.T, sub *nats.Subscription) *nats.Msg {
	t.Helper()
	msg, err := sub.NextMsg(5 * time.Second)
	if err != nil {
		t.Fatalf("no message on %s: %v", sub.Subject, err)
	}
	return msg
}

// checkMsg checks that msg carries m: body and headers.
func checkMsg(t *testing.T, msg *nats.Msg, m *endpoint.Message) {
	t.Helper()
	want, _ := endpoint.Body(m)
	if string(msg.Data) != string(want) {
		t.Errorf("body = %s, want %s", msg.Data, want)
	}
	for name, want := range map[string]string{
		"X-Herald-Event-Id": m.ID, "X-Herald-Topic": m.Topic, "X-Herald-Attempt": fmt.Sprint(m.Attempt),
		"X-Herald-Key": url.PathEscape(m.Key), "Nats-Msg-Id": m.ID,
	} {
		if got := msg.Header.Get(name); got != want {
			t.Errorf("header %s = %q, want %q", name, got, want)
		}
	}
}

func TestCorePublish(t *testing.T) {
	s := testkit.StartNATS(t)
	sub := subscribe(t, connect(t, s), "orders") // the topic name: nats_subject is empty
	e := newEndpoint(t, attrs(s, "", false))
	m := message("customer 42/ü\n", 7) // percent-encoded in the header
	send(t, e, m)
	checkMsg(t, next(t, sub), m)
}

func TestSubjectAttribute(t *testing.T) {
	s := testkit.StartNATS(t)
	sub := subscribe(t, connect(t, s), "herald.orders")
	e := newEndpoint(t, attrs(s, "herald.orders", false))
	m := message("k", 1)
	send(t, e, m)
	if msg := next(t, sub); msg.Header.Get(endpoint.HeaderEventID) != m.ID {
		t.Errorf("got %s", msg.Header.Get(endpoint.HeaderEventID))
	}
}

// TestConcurrentSends sends from many goroutines at once, each key's
// events in sequence, and checks that all arrive, each key's in order.
func TestConcurrentSends(t *testing.T) {
	s := testkit.StartNATS(t)
	sub := subscribe(t, connect(t, s), "orders")
	e := newEndpoint(t, attrs(s, "", false))
	const keys, perKey = 8, 20
	var wg sync.WaitGroup
	for k := range keys {
		wg.Go(func() {
			for i := range perKey {
				m := message(fmt.Sprint("key-", k), uint64(i))
				if err := e.Send(context.Background(), m); err != nil {
					t.Errorf("Send: %v", err)
					return
				}
			}
		})
	}
	wg.Wait()
	next := map[string]int{}
	for range keys * perKey {
		msg, err := sub.NextMsg(5 * time.Second)
		if err != nil {
			t.Fatalf("after %d messages: %v", len(next), err)
		}
		key := msg.Header.Get(endpoint.HeaderKey)
		if want := fmt.Sprintf("orders/2/%d", next[key]); msg.Header.Get(endpoint.HeaderEventID) != want {
			t.Errorf("key %s: got %s, want %s", key, msg.Header.Get(endpoint.HeaderEventID), want)
		}
		next[key]++
	}
}

func createStream(t *testing.T, s *testkit.NATS, subject string) jetstream.Stream {
	t.Helper()
	js, err := jetstream.New(connect(t, s))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	st, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "ORDERS", Subjects: []string{subject}})
	if err != nil {
		t.Fatalf("create stream: %v", err)
	}
	return st
}

func streamMsgs(t *testing.T, st jetstream.Stream) uint64 {
	t.Helper()
	info, err := st.Info(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return info.State.Msgs
}

func TestJetStreamPublish(t *testing.T) {
	s := testkit.StartNATS(t)
	st := createStream(t, s, "herald.orders")
	e := newEndpoint(t, attrs(s, "herald.orders", true))
	m := message("customer-42", 7)
	send(t, e, m)

	raw, err := st.GetMsg(context.Background(), 1)
	if err != nil {
		t.Fatalf("read the stream: %v", err)
	}
	checkMsg(t, &nats.Msg{Data: raw.Data, Header: raw.Header}, m)

	// Delivered again (a retry whose first attempt did arrive): the
	// stream drops it as a duplicate of the same event id.
	send(t, e, m)
	if n := streamMsgs(t, st); n != 1 {
		t.Errorf("stream holds %d messages after a duplicate, want 1", n)
	}
	send(t, e, message("customer-42", 8))
	if n := streamMsgs(t, st); n != 2 {
		t.Errorf("stream holds %d messages, want 2", n)
	}
}

func TestJetStreamWithoutStreamIsPermanent(t *testing.T) {
	s := testkit.StartNATS(t)
	e := newEndpoint(t, attrs(s, "herald.nostream", true))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err := e.Send(ctx, message("k", 1))
	if err == nil || !endpoint.IsPermanent(err) {
		t.Fatalf("JetStream Send with no stream = %v, want a permanent error", err)
	}
	for _, want := range []string{`"herald.nostream"`, "create a stream"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
}

func TestTooLargeIsPermanent(t *testing.T) {
	s := testkit.StartNATS(t)
	e := newEndpoint(t, attrs(s, "", false))
	m := message("k", 1)
	m.Payload = make([]byte, 1<<20) // not JSON: base64, over the default 1 MiB max_payload
	err := e.Send(context.Background(), m)
	if err == nil || !endpoint.IsPermanent(err) || !strings.Contains(err.Error(), "max_payload") {
		t.Fatalf("Send of a too large event = %v, want a permanent error about max_payload", err)
	}
}

// TestServerDownAndBack: while the server is down, Sends fail with a
// retryable error; once it is back on the same port, they deliver again,
// through core NATS and through JetStream (whose stream the server keeps
// on disk).
func TestServerDownAndBack(t *testing.T) {
	s := testkit.StartNATS(t)
	createStream(t, s, "herald.js")
	core := newEndpoint(t, attrs(s, "herald.core", false))
	js := newEndpoint(t, attrs(s, "herald.js", true))
	send(t, core, message("k", 1))
	send(t, js, message("k", 1))

	s.Stop()
	for _, e := range []*Endpoint{core, js} {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		err := e.Send(ctx, message("k", 2))
		cancel()
		if err == nil || endpoint.IsPermanent(err) {
			t.Fatalf("Send (jetstream %v) with the server down = %v, want a retryable error", e.jetStream, err)
		}
		t.Logf("server down: %v", err)
	}

	s.Start()
	sub := subscribe(t, connect(t, s), "herald.core")
	for _, e := range []*Endpoint{core, js} {
		m := message("k", 3)
		deadline := time.Now().Add(15 * time.Second)
		for {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			err := e.Send(ctx, m)
			cancel()
			if err == nil {
				break
			}
			if endpoint.IsPermanent(err) || time.Now().After(deadline) {
				t.Fatalf("Send (jetstream %v) after the server came back: %v", e.jetStream, err)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	checkMsg(t, next(t, sub), message("k", 3))
}

// TestNewDoesNotConnect: New succeeds with no server; Send then fails
// with a retryable error, and works once a server is up.
func TestNewDoesNotConnect(t *testing.T) {
	port := testkit.FreePort(t)
	a := topic.Defaults()
	a.PushEndpoint = fmt.Sprintf("nats://127.0.0.1:%d", port)
	e := newEndpoint(t, a)
	err := e.Send(context.Background(), message("k", 1))
	if err == nil || endpoint.IsPermanent(err) || !strings.Contains(err.Error(), "connect") {
		t.Fatalf("Send with no server = %v, want a retryable connect error", err)
	}
}

func TestNewErrors(t *testing.T) {
	for _, tc := range []struct{ endpoint, want string }{
		{"nats://", "use nats://"},
		{"nats://h:4222/path", "without path or query"},
		{"nats://h:4222?x=1", "without path or query"},
		{"http://h", "use nats://"},
		{"nats://u:hunter2@h:99999", "1 to 65535"},
		{"nats://u:hunter2@h:x", "not a URI"},
		{"nats://h:4222?token=hunter2", "nats://h:4222?token=xxxxx: use nats://"},
		{"nats://hunter2@h:99999", "nats://xxxxx@h:99999"}, // a token as the user name
	} {
		a := topic.Defaults()
		a.PushEndpoint = tc.endpoint
		_, err := New("orders", a, endpointtest.Guard(t))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("New(%s) = %v, want an error saying %q", tc.endpoint, err, tc.want)
		}
		if err != nil && strings.Contains(err.Error(), "hunter2") {
			t.Errorf("error %q shows the password", err)
		}
	}
}

func TestSendAfterClose(t *testing.T) {
	s := testkit.StartNATS(t)
	e := newEndpoint(t, attrs(s, "", false))
	send(t, e, message("k", 1))
	e.Close()
	if err := e.Send(context.Background(), message("k", 2)); err == nil || !strings.Contains(err.Error(), "closed endpoint") {
		t.Errorf("Send after Close = %v, want an error", err)
	}
}
