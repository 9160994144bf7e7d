// Package endpointtest holds what the tests of the endpoint kinds (amqp,
// kafka, nats) share: opening an endpoint for a test, a sample message,
// and a send that must succeed.
package endpointtest

import (
	"context"
	"fmt"
	"testing"
	"time"

	"herald/internal/endpoint"
	"herald/internal/topic"
)

// sendTimeout bounds a Send that must succeed.
const sendTimeout = 10 * time.Second

// Guard returns a push endpoint guard for tests: their servers listen on
// loopback, which it allows, and their CA files are anywhere (its CA
// directory is the root).
func Guard(t testing.TB) *endpoint.Guard {
	t.Helper()
	g, err := endpoint.NewGuard(endpoint.GuardConfig{Allow: LoopbackCIDRs, CADir: "/"})
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// LoopbackCIDRs are the loopback networks, which every test's servers
// listen on.
var LoopbackCIDRs = []string{"127.0.0.0/8", "::1/128"}

// Open opens an endpoint of topic "orders" with newEndpoint (a kind's New)
// and Guard, and closes it when the test ends.
func Open[E endpoint.Endpoint](t testing.TB, newEndpoint func(string, topic.Attributes, *endpoint.Guard) (E, error), a topic.Attributes) E {
	t.Helper()
	e, err := newEndpoint("orders", a, Guard(t))
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() { e.Close() })
	return e
}

// Message returns event offset of shard 2 of topic "orders", with key and
// a JSON payload that names the offset, on its fourth delivery attempt.
// Its publish time is fixed: endpoints only carry it, never compare it
// with the clock.
func Message(key string, offset uint64) *endpoint.Message {
	return &endpoint.Message{
		ID: fmt.Sprintf("orders/2/%d", offset), Topic: "orders", Shard: 2, Offset: offset, Key: key,
		Time:    time.Date(2026, 11, 21, 10, 0, 0, 0, time.UTC),
		Payload: fmt.Appendf(nil, `{"n": %d}`, offset), Attempt: 4,
	}
}

// Send sends m and fails the test if that does not succeed in time.
func Send(t testing.TB, e endpoint.Endpoint, m *endpoint.Message) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), sendTimeout)
	defer cancel()
	if err := e.Send(ctx, m); err != nil {
		t.Fatalf("Send %s: %v", m.ID, err)
	}
}
