package client

import (
	"context"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"

	"herald/internal/testkit/fakeherald"
	heraldv1 "herald/proto/herald/v1"
)

// writeCounter counts the writes made on the connections it dials.
type writeCounter struct {
	mu     sync.Mutex
	writes int
}

func (w *writeCounter) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	c, err := (&net.Dialer{}).DialContext(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	return &countedConn{Conn: c, w: w}, nil
}

func (w *writeCounter) count() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.writes
}

type countedConn struct {
	net.Conn
	w *writeCounter
}

func (c *countedConn) Write(b []byte) (int, error) {
	c.w.mu.Lock()
	c.w.writes++
	c.w.mu.Unlock()
	return c.Conn.Write(b)
}

// A publish is one request; sending its headers and its body in separate
// writes doubled the system calls of both ends at one event per request.
func TestEachRequestIsSentInOneWrite(t *testing.T) {
	f := fakeherald.New(created)
	f.AddTopic("orders", nil)
	var w writeCounter
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.DialContext = w.dial
	c := New(f.Start(t), WithHTTPClient(&http.Client{Transport: tr}))
	ctx := context.Background()

	payload := strings.Repeat("x", 1024)
	const publishes = 20
	for i := range publishes {
		before := w.count()
		if _, err := c.Publish(ctx, "orders", Event{Key: "k", Payload: []byte(payload)}); err != nil {
			t.Fatalf("publish %d: %v", i, err)
		}
		if got := w.count() - before; got != 1 {
			t.Fatalf("publish %d took %d writes on the connection, want 1", i, got)
		}
	}
	// The server got every body whole.
	reqs := fakeherald.Received[*heraldv1.PublishRequest](f)
	if len(reqs) != publishes {
		t.Fatalf("the server received %d publishes, want %d", len(reqs), publishes)
	}
	for i, r := range reqs {
		if got := string(r.GetEvents()[0].GetPayload()); got != payload {
			t.Fatalf("publish %d arrived with a payload of %d bytes, want the %d sent", i, len(got), len(payload))
		}
	}
}
