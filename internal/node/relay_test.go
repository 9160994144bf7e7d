package node

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"herald/internal/consume"
	"herald/internal/shard"
	"herald/internal/transport"
	clusterv1 "herald/proto/herald/cluster/v1"
)

// fakeLeaders is a host whose groups are led by the nodes it maps them to.
type fakeLeaders map[uint64]uint64

func (f fakeLeaders) Leader(group uint64) (uint64, error) { return f[group], nil }

// fakePeers records the calls made on other nodes and answers them, or
// fails them with err.
type fakePeers struct {
	mu    sync.Mutex
	calls []string // "rpc to=node relay=bool"
	subs  []uint64 // the subscription of each call
	err   error
}

func (p *fakePeers) note(rpc string, to uint64, ref *clusterv1.ShardCall) {
	p.mu.Lock()
	defer p.mu.Unlock()
	how := "direct"
	if ref.GetRelay() {
		how = "relayed"
	}
	p.calls = append(p.calls, fmt.Sprintf("%s %d %s", rpc, to, how))
	p.subs = append(p.subs, ref.GetSubscription())
}

func (p *fakePeers) Fetch(_ context.Context, to uint64, req *clusterv1.FetchRequest) (*clusterv1.FetchResponse, error) {
	p.note("fetch", to, req.GetShard())
	return &clusterv1.FetchResponse{}, p.err
}

func (p *fakePeers) Nack(_ context.Context, to uint64, req *clusterv1.NackRequest) (*clusterv1.NackResponse, error) {
	p.note("nack", to, req.GetShard())
	return &clusterv1.NackResponse{}, p.err
}

func (p *fakePeers) Ack(_ context.Context, to uint64, req *clusterv1.AckRequest) (*clusterv1.AckResponse, error) {
	p.note("ack", to, req.GetShard())
	return &clusterv1.AckResponse{Count: 1}, p.err
}

func (p *fakePeers) Propose(_ context.Context, to uint64, _ *clusterv1.ProposeRequest) (*clusterv1.ProposeResponse, error) {
	p.note("propose", to, nil)
	return &clusterv1.ProposeResponse{Count: 1}, p.err
}

// fakeWork records what ran on this node, and for which subscription.
type fakeWork struct {
	ran  []string
	subs []uint64
}

func (w *fakeWork) fetchShard(_ context.Context, _ *shardRuntime, sub uint64, _ int, _ time.Duration) ([]Delivery, error) {
	w.ran = append(w.ran, "fetch")
	w.subs = append(w.subs, sub)
	return nil, nil
}

func (w *fakeWork) ackLeasedHere(_ context.Context, _ *shardRuntime, sub uint64, _, _ []uint64) (ackResult, error) {
	w.ran = append(w.ran, "ack")
	w.subs = append(w.subs, sub)
	return ackResult{}, nil
}

func (w *fakeWork) proposeShard(context.Context, *shardRuntime, *shard.Command) (shard.Result, error) {
	w.ran = append(w.ran, "propose")
	return shard.Result{}, nil
}

// oneShard is a topic "t" of one shard, group 7, on nodes 2 and 3.
type oneShard struct{ s *shardRuntime }

func (o oneShard) shardOf(topicName string, idx int) (resolvedShard, error) {
	if topicName != "t" || idx != 0 {
		return resolvedShard{}, ErrNotFound
	}
	return resolvedShard{rt: o.s, shardCount: 1}, nil
}

// newRelayTest returns the relay of node self for a shard, group 7,
// held by nodes 2 and 3 and led by leader.
func newRelayTest(self, leader uint64) (*relay, *fakePeers, *fakeWork, *shardRuntime) {
	replicas := []uint64{2, 3}
	local := self == 2 || self == 3
	s := &shardRuntime{topic: "t", name: "t", group: 7, replicas: replicas, local: local, leases: consume.NewLeases(nil)}
	if local {
		var p openProgress
		s.open = p.start()
		s.open.finish(nil)
	}
	peers, work := &fakePeers{}, &fakeWork{}
	r := &relay{self: self, host: fakeLeaders{7: leader}, peers: peers, shards: oneShard{s}, here: work,
		forwards: &forwards{counter: newForwardsMetric()}}
	return r, peers, work, s
}

// TestRelayRunsOnTheLeader: a call about a shard runs here when this node
// leads it, on the leader when another replica does, and, from a node
// holding no replica, on a replica flagged as relayed.
func TestRelayRunsOnTheLeader(t *testing.T) {
	ctx := context.Background()
	cases := []struct {
		name         string
		self, leader uint64
		peers, here  string
	}{
		{"leader", 2, 2, "", "fetch ack"},
		{"follower", 3, 2, "fetch 2 direct,nack 2 direct,ack 2 direct", ""},
		{"no replica", 1, 2, "relayed", ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r, peers, work, s := newRelayTest(c.self, c.leader)
			if _, err := r.fetch(ctx, s, 0, 10, time.Second); err != nil {
				t.Fatal(err)
			}
			if err := r.nack(ctx, s, shardCall{Topic: "t", Offsets: []uint64{1}}); err != nil {
				t.Fatal(err)
			}
			if _, err := r.ack(ctx, s, 0, []uint64{1}, []uint64{1}); err != nil {
				t.Fatal(err)
			}
			got := strings.Join(peers.calls, ",")
			if c.peers == "relayed" {
				if len(peers.calls) != 3 {
					t.Fatalf("calls on peers: %q", got)
				}
				for _, call := range peers.calls {
					if !strings.HasSuffix(call, "relayed") || !(strings.Contains(call, " 2 ") || strings.Contains(call, " 3 ")) {
						t.Errorf("call %q: want one relayed to a replica", call)
					}
				}
			} else if got != c.peers {
				t.Errorf("calls on peers: %q, want %q", got, c.peers)
			}
			if here := strings.Join(work.ran, " "); here != c.here {
				t.Errorf("ran here: %q, want %q", here, c.here)
			}
		})
	}
}

// TestRelayedCallGoesOneHopAtMost: a replica serving a relayed call that
// it does not lead passes it to the leader unflagged; a node that gets an
// unflagged call it does not lead refuses it rather than pass it further.
func TestRelayedCallGoesOneHopAtMost(t *testing.T) {
	ctx := context.Background()
	r, peers, work, _ := newRelayTest(3, 2)
	var h transport.Handlers
	r.handle(&h)

	ref := &clusterv1.ShardCall{Topic: "t", Relay: true}
	if _, err := h.Fetch(ctx, &clusterv1.FetchRequest{Shard: ref, Max: 1}); err != nil {
		t.Fatal(err)
	}
	if _, err := h.Nack(ctx, &clusterv1.NackRequest{Shard: ref}); err != nil {
		t.Fatal(err)
	}
	if got, want := strings.Join(peers.calls, ","), "fetch 2 direct,nack 2 direct"; got != want {
		t.Errorf("a relayed call passed on as %q, want %q", got, want)
	}

	peers.calls = nil
	direct := &clusterv1.ShardCall{Topic: "t"}
	_, err := h.Fetch(ctx, &clusterv1.FetchRequest{Shard: direct, Max: 1})
	if !errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), "no longer leads") {
		t.Errorf("a call to a node that does not lead: %v, want ErrUnavailable", err)
	}
	_, err = h.Ack(ctx, &clusterv1.AckRequest{Shard: direct})
	if !errors.Is(err, ErrUnavailable) {
		t.Errorf("an ack on a node that does not lead: %v, want ErrUnavailable", err)
	}
	if len(peers.calls) != 0 || len(work.ran) != 0 {
		t.Errorf("a refused call ran: on peers %q, here %q", peers.calls, work.ran)
	}
}

// TestRelayServesProposalsOfHeldShardsOnly: the Propose rpc proposes on a
// replica, and answers a node that holds none that it should retry.
func TestRelayServesProposalsOfHeldShardsOnly(t *testing.T) {
	ctx := context.Background()
	cmd := (&shard.Command{Op: shard.OpAbort, ReservationID: 1}).AppendBinary(nil)
	for _, self := range []uint64{3, 1} {
		r, _, work, _ := newRelayTest(self, 2)
		var h transport.Handlers
		r.handle(&h)
		out, err := h.Propose(ctx, &clusterv1.ProposeRequest{Topic: "t", Command: cmd})
		if err != nil {
			t.Fatal(err)
		}
		_, perr := decodeAnswer(out)
		if self == 3 && (perr != nil || len(work.ran) != 1) {
			t.Errorf("replica: answer %v, ran %q; want the command proposed", perr, work.ran)
		}
		if self == 1 && (!errors.Is(perr, ErrUnavailable) || len(work.ran) != 0) {
			t.Errorf("node without a replica: answer %v, ran %q; want ErrUnavailable", perr, work.ran)
		}
	}
}

// TestRelayErrorsAreUnavailable: a peer that fails the call makes it
// ErrUnavailable; a node with no transport cannot reach the leader; a
// shard without a leader, or held elsewhere, is unavailable too; the
// caller's own deadline stays what it is.
func TestRelayErrorsAreUnavailable(t *testing.T) {
	ctx := context.Background()
	r, peers, _, s := newRelayTest(3, 2)
	peers.err = errors.New("connection refused")
	if _, err := r.fetch(ctx, s, 0, 1, time.Second); !errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), "connection refused") {
		t.Errorf("peer failure: %v, want ErrUnavailable with the cause", err)
	}
	if _, err := r.propose(ctx, s, &shard.Command{Op: shard.OpAbort}); !errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), "outcome is unknown") {
		t.Errorf("relayed proposal failure: %v, want ErrUnavailable, outcome unknown", err)
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if err := r.nack(cctx, s, shardCall{}); !errors.Is(err, context.Canceled) || errors.Is(err, ErrUnavailable) {
		t.Errorf("canceled call: %v, want context.Canceled alone", err)
	}

	r.peers = nil
	if _, err := r.ack(ctx, s, 0, []uint64{1}, []uint64{1}); !errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), "cannot reach") {
		t.Errorf("no transport: %v, want ErrUnavailable", err)
	}

	r, _, _, s = newRelayTest(3, 0)
	if _, err := r.leader(s); !errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), "no leader yet") {
		t.Errorf("election running: %v, want ErrUnavailable", err)
	}
	r, _, _, s = newRelayTest(1, 2)
	if _, err := r.leader(s); !errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), "not by this one") {
		t.Errorf("shard held elsewhere: %v, want ErrUnavailable", err)
	}
	if r.leads(s) {
		t.Error("a node without a replica leads the shard")
	}
}

// TestRelayCarriesTheSubscription: a fetch, nack or ack of a named
// subscription reaches the leader's work for that subscription, whether
// made there, sent to it or relayed.
func TestRelayCarriesTheSubscription(t *testing.T) {
	ctx := context.Background()
	const sub = 7
	r, peers, _, s := newRelayTest(3, 2) // a follower: every call goes to node 2
	if _, err := r.fetch(ctx, s, sub, 10, time.Second); err != nil {
		t.Fatal(err)
	}
	if err := r.nack(ctx, s, shardCall{Topic: "t", Sub: sub, Offsets: []uint64{1}}); err != nil {
		t.Fatal(err)
	}
	if _, err := r.ack(ctx, s, sub, []uint64{1}, []uint64{1}); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(peers.subs, []uint64{sub, sub, sub}) {
		t.Errorf("calls sent to the leader for subscriptions %v, want %d each", peers.subs, sub)
	}

	leader, _, work, _ := newRelayTest(2, 2)
	var h transport.Handlers
	leader.handle(&h)
	ref := &clusterv1.ShardCall{Topic: "t", Subscription: sub}
	if _, err := h.Fetch(ctx, &clusterv1.FetchRequest{Shard: ref, Max: 1}); err != nil {
		t.Fatal(err)
	}
	if _, err := h.Ack(ctx, &clusterv1.AckRequest{Shard: ref, Offsets: []uint64{1}, Leases: []uint64{1}}); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(work.subs, []uint64{sub, sub}) {
		t.Errorf("the leader served calls for subscriptions %v, want %d each", work.subs, sub)
	}
}
