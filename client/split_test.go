package client

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"connectrpc.com/connect"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/protobuf/proto"

	"herald/internal/api"
	"herald/internal/node"
	"herald/internal/testkit/fakeherald"
	heraldv1 "herald/proto/herald/v1"
)

// startNode serves a real node, whose events may be up to maxPayload
// bytes, over HTTP/1 and unencrypted HTTP/2, and returns its URL.
func startNode(t *testing.T, maxPayload int) string {
	t.Helper()
	reg := prometheus.NewRegistry()
	n, err := node.Open(context.Background(), node.Config{
		DataDir: t.TempDir(), Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Registerer: reg, MaxPayloadBytes: maxPayload,
	})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(api.Handler(n, reg))
	var p http.Protocols
	p.SetHTTP1(true)
	p.SetUnencryptedHTTP2(true)
	srv.Config.Protocols = &p
	srv.Start()
	t.Cleanup(func() {
		srv.Close()
		n.Close()
	})
	return srv.URL
}

// A call carrying more than the request limit, in events each under the
// payload limit, is sent as several requests and gets every id back, in
// order, over each way of publishing. (A single request of it was
// refused: "message size 70003298 is larger than configured max".)
func TestPublishOverRequestLimitIsSplit(t *testing.T) {
	const events, payloadBytes = 70, 1_000_000
	url := startNode(t, 1_100_000)
	ctx := context.Background()
	admin := New(url)
	batch := make([]Event, events)
	for i := range batch {
		// Distinct payloads that compress well: the limit is on the
		// decompressed size.
		batch[i] = Event{Key: fmt.Sprintf("k%d", i), Payload: bytes.Repeat([]byte{byte('A' + i%26), byte(i)}, payloadBytes/2)}
	}
	for _, tt := range []struct {
		name string
		opts []Option
	}{
		{"connect", nil},
		{"stream", []Option{WithPublishStream()}},
		{"batching", []Option{WithPublishBatching(1000), WithPublishRetries(3)}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := admin.CreateTopic(ctx, tt.name, map[string]string{"shards": "2"}); err != nil {
				t.Fatal(err)
			}
			c := New(url, tt.opts...)
			defer c.Close()
			ids, err := c.Publish(ctx, tt.name, batch...)
			if err != nil {
				t.Fatalf("Publish of %d events of %d bytes: %v", events, payloadBytes, err)
			}
			if len(ids) != events {
				t.Fatalf("%d ids for %d events", len(ids), events)
			}
			// Each id names its own event.
			got := map[string][]byte{}
			for len(got) < events {
				ds, err := admin.Fetch(ctx, tt.name, FetchOptions{MaxEvents: events})
				if err != nil || len(ds) == 0 {
					t.Fatalf("fetched %d of %d events, then %d (%v)", len(got), events, len(ds), err)
				}
				for _, d := range ds {
					got[d.ID] = d.Payload
				}
			}
			for i, id := range ids {
				if !bytes.Equal(got[id], batch[i].Payload) {
					t.Fatalf("id %d, %s, is not event %d's", i, id, i)
				}
			}
		})
	}
}

// An event too large for a request of its own fails the call before
// anything is sent, saying which and why.
func TestPublishEventOverRequestLimitSendsNothing(t *testing.T) {
	f := fakeherald.New(created)
	c := New(f.Start(t))
	f.AddTopic("orders", nil)
	huge := make([]byte, MaxRequestBytes)
	_, err := c.Publish(context.Background(), "orders", Event{Key: "a", Payload: []byte("small")}, Event{Key: "b", Payload: huge})
	if connect.CodeOf(err) != connect.CodeInvalidArgument || !strings.Contains(err.Error(), "event 1 is") || !strings.Contains(err.Error(), "nothing was published") {
		t.Fatalf("err = %v, want invalid_argument naming event 1", err)
	}
	if n := len(fakeherald.Received[*heraldv1.PublishRequest](f)); n != 0 {
		t.Fatalf("%d requests sent, want none", n)
	}
}

// EventBytes is what an event takes in a request, or up to two bytes a
// header more, never less.
func TestEventBytesBoundsTheEncoding(t *testing.T) {
	for _, e := range []Event{
		{},
		{Key: "k"},
		{Payload: make([]byte, 200)},
		{Key: "customer-42", Payload: make([]byte, 1<<20), DedupID: strings.Repeat("d", 32)},
		{Key: "k", Headers: map[string]string{"a": "", "": "b", "Content-Type": "application/json", "long": strings.Repeat("v", 300)}},
	} {
		req := &heraldv1.PublishRequest{Topic: "t", Events: eventsToProto([]Event{e})}
		size := proto.Size(req) - proto.Size(&heraldv1.PublishRequest{Topic: "t"})
		if got := EventBytes(e); got < size || got > size+2*len(e.Headers) {
			t.Errorf("EventBytes(%d-byte payload, %d headers) = %d, encoded %d", len(e.Payload), len(e.Headers), got, size)
		}
	}
}

func TestSplitRequestsKeepsOrderWithinLimit(t *testing.T) {
	big := Event{Payload: make([]byte, MaxRequestBytes/3)}
	small := Event{Key: "s"}
	events := []Event{small, big, big, small, big, big, big, small}
	parts, err := splitRequests("t", events)
	if err != nil {
		t.Fatal(err)
	}
	var joined []Event
	for _, p := range parts {
		size := requestBytes("t")
		for _, e := range p {
			size += EventBytes(e)
		}
		if size > MaxRequestBytes || len(p) == 0 {
			t.Errorf("a request of %d events and %d bytes", len(p), size)
		}
		joined = append(joined, p...)
	}
	if len(parts) != 3 || len(joined) != len(events) {
		t.Fatalf("%d requests of %d events, want 3 of %d", len(parts), len(joined), len(events))
	}
	for i := range events {
		if len(joined[i].Payload) != len(events[i].Payload) {
			t.Fatalf("event %d out of order", i)
		}
	}
}
