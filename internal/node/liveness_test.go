package node

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	clusterv1 "herald/proto/herald/cluster/v1"
)

// A member is alive only while it both answers this node's pings and
// pings this node: a node that can reach the others, but not be reached,
// must see them as gone, or its quiesced leaders never notice that they
// are cut off.
func TestLivenessNeedsBothDirections(t *testing.T) {
	l := newLiveness()
	now := time.Unix(1000, 0)
	l.now = func() time.Time { return now }
	if l.alive(2) {
		t.Fatal("a member never heard of is alive")
	}
	l.note(l.answered, 2)
	if l.alive(2) {
		t.Fatal("a member that answers pings but sends none is alive")
	}
	l.note(l.pinged, 3)
	if l.alive(3) {
		t.Fatal("a member that pings but never answers is alive")
	}
	l.note(l.pinged, 2)
	if !l.alive(2) {
		t.Fatal("a member that answers and pings is not alive")
	}
	now = now.Add(livenessWindow)
	l.note(l.answered, 2)
	if l.alive(2) {
		t.Fatal("a member whose last ping is a window old is alive")
	}
}

// fakePinger answers the pings of the members in answers; each ping
// runs step first, if set.
type fakePinger struct {
	answers map[uint64]bool
	step    func(to uint64) bool // false: fail this ping
}

func (p *fakePinger) Ping(_ context.Context, to uint64, req *clusterv1.PingRequest) (*clusterv1.PingResponse, error) {
	if req.GetFrom() != 1 {
		return nil, fmt.Errorf("ping from %d, want from node 1", req.GetFrom())
	}
	if !p.answers[to] || (p.step != nil && !p.step(to)) {
		return nil, errors.New("connection refused")
	}
	return &clusterv1.PingResponse{}, nil
}

// TestPingOthersAsksEveryOtherMember: every member but this node is
// pinged, and each one's answer is reported.
func TestPingOthersAsksEveryOtherMember(t *testing.T) {
	l := newLiveness()
	l.self, l.members = 1, []uint64{1, 2, 3}
	l.pinger = &fakePinger{answers: map[uint64]bool{2: true}}
	errs := l.pingOthers(context.Background(), time.Second)
	if len(errs) != 2 || errs[2] != nil || errs[3] == nil {
		t.Errorf("answers %v, want node 2 answering and node 3 not", errs)
	}
}

// TestLivenessTellsTheHostOfAMemberGone: once a member that was alive
// stops answering, the host hears that it is down; run returns on stop.
func TestLivenessTellsTheHostOfAMemberGone(t *testing.T) {
	var mu sync.Mutex
	now := time.Unix(1000, 0)
	calls := 0
	l := newLiveness()
	l.self, l.members = 1, []uint64{1, 2}
	l.now = func() time.Time {
		mu.Lock()
		defer mu.Unlock()
		return now
	}
	l.note(l.pinged, 2)
	l.pinger = &fakePinger{answers: map[uint64]bool{2: true}, step: func(uint64) bool {
		mu.Lock()
		defer mu.Unlock()
		calls++
		if calls == 1 {
			return true
		}
		now = now.Add(livenessWindow) // the member falls silent
		return false
	}}
	down := make(chan uint64, 1)
	l.peerDown = func(id uint64) {
		select {
		case down <- id:
		default:
		}
	}
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		l.run(stop)
	}()
	select {
	case id := <-down:
		if id != 2 {
			t.Errorf("node %d reported down, want 2", id)
		}
	case <-time.After(10 * time.Second):
		t.Error("the host never heard that node 2 is down")
	}
	close(stop)
	<-done
}
