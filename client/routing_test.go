package client

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"connectrpc.com/connect"

	"herald/internal/protocol"
	"herald/internal/testkit/fakeherald"
	heraldv1 "herald/proto/herald/v1"
	"herald/proto/herald/v1/heraldv1connect"
)

// fakeNode is a fake herald node that says which node leads each shard,
// and may refuse publishes or mark them forwarded.
type fakeNode struct {
	*fakeherald.Server
	addr string // host:port

	mu        sync.Mutex
	leaders   []string // per shard, the leader's host:port
	asked     int      // ShardLeaders calls
	forwarded bool     // answer publishes with Herald-Forwarded
}

func startFakeNode(t *testing.T) *fakeNode {
	f := &fakeNode{Server: fakeherald.New(created)}
	f.AddTopic("orders", map[string]string{"shards": "2"})
	mux := http.NewServeMux()
	mux.Handle(heraldv1connect.NewHeraldServiceHandler(f))
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	f.addr = strings.TrimPrefix(srv.URL, "http://")
	return f
}

func (f *fakeNode) setLeaders(leaders ...string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.leaders = leaders
}

func (f *fakeNode) ShardLeaders(_ context.Context, req *connect.Request[heraldv1.ShardLeadersRequest]) (*connect.Response[heraldv1.ShardLeadersResponse], error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.asked++
	out := &heraldv1.ShardLeadersResponse{}
	for i, a := range f.leaders {
		out.Shards = append(out.Shards, &heraldv1.ShardLeader{Shard: uint32(i), LeaderAddress: a, ReplicaAddresses: []string{a}})
	}
	return connect.NewResponse(out), nil
}

func (f *fakeNode) Publish(ctx context.Context, req *connect.Request[heraldv1.PublishRequest]) (*connect.Response[heraldv1.PublishResponse], error) {
	resp, err := f.Server.Publish(ctx, req)
	f.mu.Lock()
	defer f.mu.Unlock()
	if err == nil && f.forwarded {
		resp.Header().Set(protocol.ForwardedHeader, "1")
	}
	return resp, err
}

func (f *fakeNode) askedTimes() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.asked
}

func publishes(f *fakeNode) int { return len(fakeherald.Received[*heraldv1.PublishRequest](f.Server)) }

// TestLeaderRoutingRefreshesOnNotLeader: a routing client publishes to
// the shard's leader, not the node it was given; when the leader refuses
// (unavailable: it no longer leads, or is going down), the client drops
// it, its retry goes to a node that serves, and it asks again where the
// shards are led; a publish a node had to forward marks the map stale.
func TestLeaderRoutingRefreshesOnNotLeader(t *testing.T) {
	a, b := startFakeNode(t), startFakeNode(t)
	a.setLeaders(b.addr, b.addr)
	c := New("http://"+a.addr, WithLeaderRouting(), WithPublishRetries(3))
	c.router.minRefresh = 0
	ctx := context.Background()

	if _, err := c.Publish(ctx, "orders", Event{Key: "k1", Payload: []byte("1")}, Event{Key: "k2", Payload: []byte("2")}); err != nil {
		t.Fatal(err)
	}
	if publishes(a) != 0 || publishes(b) != 1 || a.askedTimes() != 1 {
		t.Fatalf("publishes: %d to the node given, %d to the leader, after %d questions; want 0, 1 and 1", publishes(a), publishes(b), a.askedTimes())
	}
	if _, err := c.Publish(ctx, "orders", Event{Key: "k3"}); err != nil || a.askedTimes() != 1 {
		t.Fatalf("second publish: %v, after %d questions; want no new question while the map holds", err, a.askedTimes())
	}

	// b stops leading: it refuses, and a now leads both shards.
	b.SetFail(connect.NewError(connect.CodeUnavailable, errors.New("node 2 no longer leads shard orders/0; retry")))
	a.setLeaders(a.addr, a.addr)
	if _, err := c.Publish(ctx, "orders", Event{Key: "k4", Payload: []byte("4")}); err != nil {
		t.Fatalf("publish while the leader changes: %v, want the retry to succeed", err)
	}
	if publishes(a) != 1 || publishes(b) != 3 {
		t.Fatalf("publishes: %d to node a, %d to node b; want the refused one on b, then the retry on a", publishes(a), publishes(b))
	}
	if got := a.askedTimes(); got != 2 {
		t.Fatalf("%d questions after the refusal, want 2", got)
	}
	if _, err := c.Publish(ctx, "orders", Event{Key: "k5"}); err != nil || publishes(a) != 2 || publishes(b) != 3 {
		t.Fatalf("publish after the refresh: %v; %d to a, %d to b; want it on a, the new leader", err, publishes(a), publishes(b))
	}

	// A forwarded publish marks the map stale: the next one asks again.
	a.mu.Lock()
	a.forwarded = true
	a.mu.Unlock()
	if _, err := c.Publish(ctx, "orders", Event{Key: "k6"}); err != nil {
		t.Fatal(err)
	}
	asked := a.askedTimes()
	if _, err := c.Publish(ctx, "orders", Event{Key: "k7"}); err != nil || a.askedTimes() != asked+1 {
		t.Fatalf("publish after a forwarded one: %v, %d questions, want %d", err, a.askedTimes(), asked+1)
	}
}

// TestLeaderRoutingSplitsAPublishByLeader: events whose shards are led by
// different nodes go to each in one request, and their ids come back in
// the caller's order.
func TestLeaderRoutingSplitsAPublishByLeader(t *testing.T) {
	a, b := startFakeNode(t), startFakeNode(t)
	a.setLeaders(a.addr, b.addr)
	c := New("http://"+a.addr, WithLeaderRouting())
	var events []Event
	for _, k := range []string{"x0", "x1", "x2", "x3", "x4", "x5"} {
		events = append(events, Event{Key: k, Payload: []byte(k)})
	}
	ids, err := c.Publish(context.Background(), "orders", events...)
	if err != nil {
		t.Fatal(err)
	}
	if publishes(a) != 1 || publishes(b) != 1 {
		t.Fatalf("%d requests to a, %d to b; want one each", publishes(a), publishes(b))
	}
	// Each fake numbers the events it receives from 0 (orders/0/<n>):
	// each event's id must be the one the node it went to gave it.
	want := map[string]string{} // key → id
	for _, f := range []*fakeNode{a, b} {
		for j, e := range fakeherald.Received[*heraldv1.PublishRequest](f.Server)[0].GetEvents() {
			want[e.GetKey()] = fmt.Sprintf("orders/0/%d", j)
		}
	}
	if len(want) != len(events) || publishes(a) != 1 || len(fakeherald.Received[*heraldv1.PublishRequest](a.Server)[0].GetEvents()) == len(events) {
		t.Fatalf("keys sent: %v; want every key once, split between the nodes", want)
	}
	for i, e := range events {
		if ids[i] != want[e.Key] {
			t.Fatalf("ids %q: event %d (key %s) got %q, want %q", ids, i, e.Key, ids[i], want[e.Key])
		}
	}
}
