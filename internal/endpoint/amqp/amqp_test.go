package amqp

import (
	"context"
	"flag"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"herald/internal/endpoint"
	"herald/internal/endpoint/endpointtest"
	"herald/internal/testkit"
	"herald/internal/topic"
)

// The tests share one private RabbitMQ node (testkit.RabbitMQ).
var testBroker *testkit.RabbitMQ

func TestMain(m *testing.M) {
	flag.Parse()
	if testing.Short() {
		// Every test talks to the broker, which takes seconds to boot.
		fmt.Println("internal/endpoint/amqp: skipped under -short: its tests need a RabbitMQ node; the fast tier starts no external program")
		os.Exit(0)
	}
	os.Exit(runTests(m))
}

func runTests(m *testing.M) int {
	b, err := testkit.NewRabbitMQ()
	if err == nil {
		defer b.Close()
		start := time.Now()
		err = b.Start()
		fmt.Fprintf(os.Stderr, "RabbitMQ at %s started in %v\n", b.URL(), time.Since(start).Round(time.Millisecond))
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "amqp tests need a RabbitMQ broker:", err)
		return 1
	}
	testBroker = b
	return m.Run()
}

func attrs(exchange, ackLevel string) topic.Attributes {
	a := topic.Defaults()
	a.PushEndpoint = testBroker.URL()
	a.AMQPExchange = exchange
	a.AMQPAckLevel = ackLevel
	return a
}

func newEndpoint(t *testing.T, a topic.Attributes) *Endpoint { return endpointtest.Open(t, New, a) }

var message = endpointtest.Message

func send(t *testing.T, e *Endpoint, m *endpoint.Message) { endpointtest.Send(t, e, m) }

// testChannel opens a channel of the test's own on the broker.
func testChannel(t *testing.T) *amqp.Channel {
	t.Helper()
	conn, err := amqp.Dial(testBroker.URL())
	if err != nil {
		t.Fatalf("connect to the test broker: %v", err)
	}
	t.Cleanup(func() { conn.Close() })
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	return ch
}

// queue declares an exchange and a queue bound to it with key, and
// returns the queue's name.
func queue(t *testing.T, ch *amqp.Channel, exchange, key string, args amqp.Table) string {
	t.Helper()
	if err := ch.ExchangeDeclare(exchange, "direct", true, false, false, false, nil); err != nil {
		t.Fatalf("declare exchange: %v", err)
	}
	q, err := ch.QueueDeclare(exchange+"-q", true, false, false, false, args)
	if err != nil {
		t.Fatalf("declare queue: %v", err)
	}
	if err := ch.QueueBind(q.Name, key, exchange, false, nil); err != nil {
		t.Fatalf("bind queue: %v", err)
	}
	t.Cleanup(func() {
		// A new channel: a failed test may have closed ch.
		ch := testChannel(t)
		_, _ = ch.QueueDelete(q.Name, false, false, false)
		_ = ch.ExchangeDelete(exchange, false, false)
	})
	return q.Name
}

// get reads the next message of queue q.
func get(t *testing.T, ch *amqp.Channel, q string) amqp.Delivery {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		d, ok, err := ch.Get(q, true)
		if err != nil {
			t.Fatalf("get from %s: %v", q, err)
		}
		if ok {
			return d
		}
		if time.Now().After(deadline) {
			t.Fatalf("queue %s stays empty", q)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func checkDelivery(t *testing.T, d amqp.Delivery, m *endpoint.Message) {
	t.Helper()
	want, _ := endpoint.Body(m)
	if string(d.Body) != string(want) {
		t.Errorf("body = %s, want %s", d.Body, want)
	}
	if d.MessageId != m.ID {
		t.Errorf("message id = %q, want %q", d.MessageId, m.ID)
	}
	for name, want := range map[string]any{
		"X-Herald-Event-Id": m.ID, "X-Herald-Topic": m.Topic, "X-Herald-Attempt": int32(m.Attempt), "X-Herald-Key": m.Key,
	} {
		if got := d.Headers[name]; got != want {
			t.Errorf("header %s = %v (%T), want %v", name, got, got, want)
		}
	}
	if d.DeliveryMode != amqp.Persistent || d.ContentType != "application/json" {
		t.Errorf("delivery mode %d, content type %q; want persistent JSON", d.DeliveryMode, d.ContentType)
	}
}

func TestSendBrokerAck(t *testing.T) {
	ch := testChannel(t)
	q := queue(t, ch, "herald-broker-ack", "orders", nil) // routing key: the topic name
	e := newEndpoint(t, attrs("herald-broker-ack", "broker"))
	m := message("customer 42/ü\n", 7) // verbatim in the header
	send(t, e, m)
	checkDelivery(t, get(t, ch, q), m)
}

func TestSendNoAckWithRoutingKey(t *testing.T) {
	ch := testChannel(t)
	q := queue(t, ch, "herald-no-ack", "rk", nil)
	a := attrs("herald-no-ack", "none")
	a.AMQPRoutingKey = "rk"
	e := newEndpoint(t, a)
	m := message("k", 1)
	send(t, e, m)
	checkDelivery(t, get(t, ch, q), m)
}

// TestMissingExchange: publishing to an exchange that does not exist is a
// permanent error; once the exchange is declared, the same endpoint
// delivers (it opened a new channel).
func TestMissingExchange(t *testing.T) {
	e := newEndpoint(t, attrs("herald-missing", "broker"))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err := e.Send(ctx, message("k", 1))
	if err == nil || !endpoint.IsPermanent(err) {
		t.Fatalf("Send to a missing exchange = %v, want a permanent error", err)
	}
	for _, want := range []string{`exchange "herald-missing" does not exist`, "declare it"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}

	ch := testChannel(t)
	q := queue(t, ch, "herald-missing", "orders", nil)
	m := message("k", 2)
	send(t, e, m)
	checkDelivery(t, get(t, ch, q), m)
}

// TestNackIsRetryable: a queue that rejects publishes when full makes the
// broker nack; Send reports that as retryable, and delivers again once
// there is room.
func TestNackIsRetryable(t *testing.T) {
	ch := testChannel(t)
	q := queue(t, ch, "herald-nack", "orders", amqp.Table{"x-max-length": int32(1), "x-overflow": "reject-publish"})
	e := newEndpoint(t, attrs("herald-nack", "broker"))
	send(t, e, message("k", 1))
	err := e.Send(context.Background(), message("k", 2))
	if err == nil || endpoint.IsPermanent(err) || !strings.Contains(err.Error(), "negative confirm") {
		t.Fatalf("Send to a full queue = %v, want a retryable nack error", err)
	}
	get(t, ch, q) // make room
	m := message("k", 3)
	send(t, e, m)
	checkDelivery(t, get(t, ch, q), m)
}

func TestConcurrentSends(t *testing.T) {
	ch := testChannel(t)
	q := queue(t, ch, "herald-concurrent", "orders", nil)
	e := newEndpoint(t, attrs("herald-concurrent", "broker"))
	const keys, perKey = 8, 25
	var wg sync.WaitGroup
	for k := range keys {
		wg.Go(func() {
			for i := range perKey {
				if err := e.Send(context.Background(), message(fmt.Sprint("key-", k), uint64(i))); err != nil {
					t.Errorf("Send: %v", err)
					return
				}
			}
		})
	}
	wg.Wait()
	next := map[string]int{}
	for range keys * perKey {
		d := get(t, ch, q)
		key := d.Headers[endpoint.HeaderKey].(string)
		if want := fmt.Sprintf("orders/2/%d", next[key]); d.MessageId != want {
			t.Errorf("key %s: got %s, want %s", key, d.MessageId, want)
		}
		next[key]++
	}
}

// TestTLS publishes through the broker's TLS listener, whose certificate
// only tls_ca_file makes trusted.
func TestTLS(t *testing.T) {
	ch := testChannel(t)
	q := queue(t, ch, "herald-tls", "orders", nil)
	a := attrs("herald-tls", "broker")
	a.PushEndpoint = testBroker.TLSURL()

	untrusted := newEndpoint(t, a)
	err := untrusted.Send(context.Background(), message("k", 1))
	if err == nil || endpoint.IsPermanent(err) || !strings.Contains(err.Error(), "certificate") {
		t.Errorf("Send to a broker with an unknown CA = %v, want a retryable certificate error", err)
	}
	t.Logf("unknown CA: %v", err)

	a.TLSCAFile = testBroker.CAFile()
	m := message("k", 2)
	send(t, newEndpoint(t, a), m)
	checkDelivery(t, get(t, ch, q), m)

	a.TLSCAFile, a.TLSInsecureSkipVerify = "", true
	m = message("k", 3)
	send(t, newEndpoint(t, a), m)
	checkDelivery(t, get(t, ch, q), m)
}

// TestNewDoesNotConnect: New succeeds with no broker listening; Send then
// fails with a retryable error that does not show the password.
func TestNewDoesNotConnect(t *testing.T) {
	a := attrs("x", "broker")
	a.PushEndpoint = fmt.Sprintf("amqp://user:hunter2@%s/vh", testkit.FreeAddr(t))
	e := newEndpoint(t, a)
	err := e.Send(context.Background(), message("k", 1))
	if err == nil || endpoint.IsPermanent(err) || !strings.Contains(err.Error(), "connect") {
		t.Fatalf("Send with no broker = %v, want a retryable connect error", err)
	}
	if strings.Contains(err.Error(), "hunter2") {
		t.Errorf("error %q shows the password", err)
	}
}

func TestNewErrors(t *testing.T) {
	bad := testkit.WriteBadCAFiles(t)
	for _, tc := range []struct {
		change func(*topic.Attributes)
		want   string
	}{
		{func(a *topic.Attributes) { a.PushEndpoint = "http://u:hunter2@h" }, "scheme"},
		// amqp.ParseURI's error repeats an unparsable URI, password included.
		{func(a *topic.Attributes) { a.PushEndpoint = "amqp://u:hunter2@h:56x2/vh" }, "amqp://u:xxxxx@h:56x2/vh: invalid URI: invalid port after host"},
		{func(a *topic.Attributes) { a.PushEndpoint = "amqp://u:hunt/er2@h/vh" }, "percent-encoded"},
		{func(a *topic.Attributes) { a.AMQPExchange = "" }, "set the amqp_exchange attribute"},
		{func(a *topic.Attributes) { a.AMQPAckLevel = "all" }, "amqp_ack_level must be none or broker"},
		{func(a *topic.Attributes) {
			a.PushEndpoint, a.TLSCAFile = "amqps://u:hunter2@h", bad.Missing
		}, "install the CA file"},
		{func(a *topic.Attributes) { a.PushEndpoint, a.TLSCAFile = "amqps://h", bad.Garbage }, "holds no PEM certificate"},
	} {
		a := attrs("x", "broker")
		tc.change(&a)
		_, err := New("orders", a, endpointtest.Guard(t))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("New(%+v) = %v, want an error saying %q", a, err, tc.want)
		}
		if err != nil && strings.Contains(err.Error(), "hunter2") {
			t.Errorf("error %q shows the password", err)
		}
	}
}

// TestBrokerDownAndBack stops the shared broker: while it is down, Send
// fails with a retryable error; once it is back, the same endpoint
// reconnects and delivers. It runs last, as it restarts the broker.
func TestBrokerDownAndBack(t *testing.T) {
	ch := testChannel(t)
	queue(t, ch, "herald-restart", "orders", nil) // durable: survives the restart
	e := newEndpoint(t, attrs("herald-restart", "broker"))
	send(t, e, message("k", 1))

	testBroker.Stop()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	err := e.Send(ctx, message("k", 2))
	cancel()
	if err == nil || endpoint.IsPermanent(err) {
		t.Fatalf("Send with the broker down = %v, want a retryable error", err)
	}
	t.Logf("broker down: %v", err)

	start := time.Now()
	if err := testBroker.Start(); err != nil {
		t.Fatalf("restart the broker: %v", err)
	}
	t.Logf("broker restarted in %v", time.Since(start).Round(time.Millisecond))
	m := message("k", 3)
	send(t, e, m)
	ch = testChannel(t)
	first := get(t, ch, "herald-restart-q")
	if first.MessageId != "orders/2/1" { // persistent, in a durable queue
		t.Errorf("first message after the restart is %s, want orders/2/1", first.MessageId)
	}
	checkDelivery(t, get(t, ch, "herald-restart-q"), m)
}
