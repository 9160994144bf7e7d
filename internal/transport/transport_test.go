package transport

import (
	"context"
	"crypto/tls"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	pb "go.etcd.io/raft/v3/raftpb"

	"herald/internal/backoff"
	"herald/internal/testkit"
	clusterv1 "herald/proto/herald/cluster/v1"
)

// recorder is a Receiver that records what it is given.
type recorder struct {
	mu          sync.Mutex
	got         map[uint64][]pb.Message // by group
	unreachable map[uint64]int          // by peer
	snapshots   []bool                  // failed, per report
	changed     chan struct{}
}

func newRecorder() *recorder {
	return &recorder{got: map[uint64][]pb.Message{}, unreachable: map[uint64]int{}, changed: make(chan struct{}, 1)}
}

func (r *recorder) note() {
	select {
	case r.changed <- struct{}{}:
	default:
	}
}

func (r *recorder) Receive(group uint64, m pb.Message) error {
	r.mu.Lock()
	r.got[group] = append(r.got[group], m)
	r.mu.Unlock()
	r.note()
	return nil
}

func (r *recorder) ReportUnreachable(group, to uint64) {
	r.mu.Lock()
	r.unreachable[to]++
	r.mu.Unlock()
	r.note()
}

func (r *recorder) ReportSnapshot(group, to uint64, failed bool) {
	r.mu.Lock()
	r.snapshots = append(r.snapshots, failed)
	r.mu.Unlock()
	r.note()
}

// waitFor waits until cond holds of r.
func (r *recorder) waitFor(t *testing.T, what string, cond func(r *recorder) bool) {
	t.Helper()
	deadline := time.After(20 * time.Second)
	for {
		r.mu.Lock()
		ok := cond(r)
		r.mu.Unlock()
		if ok {
			return
		}
		select {
		case <-r.changed:
		case <-time.After(20 * time.Millisecond):
		case <-deadline:
			t.Fatalf("waited 20s for %s", what)
		}
	}
}

// node is a transport serving on its own loopback listener.
type node struct {
	tr  *Transport
	rec *recorder
	srv *http.Server
}

func startNode(t *testing.T, id uint64, ln net.Listener, peers map[uint64]string) *node {
	t.Helper()
	n := &node{rec: newRecorder()}
	n.tr = New(Config{NodeID: id, Peers: peers, Retry: backoff.Policy{Initial: 10 * time.Millisecond, Max: 50 * time.Millisecond}})
	n.tr.Start(n.rec)
	mux := http.NewServeMux()
	mux.Handle(n.tr.Handler())
	n.serve(t, ln, mux, nil)
	return n
}

// serve serves h on ln (over TLS with tc) until the test ends, then
// closes the node's transport and its server. It speaks HTTP/1.1, which
// the Raft stream switches from, and HTTP/2, which the rpcs use.
func (n *node) serve(t *testing.T, ln net.Listener, h http.Handler, tc *tls.Config) {
	var p http.Protocols
	p.SetHTTP1(true)
	if tc != nil {
		p.SetHTTP2(true)
	} else {
		p.SetUnencryptedHTTP2(true)
	}
	n.srv = &http.Server{Handler: h, Protocols: &p, TLSConfig: tc}
	served := make(chan struct{})
	go func() {
		if tc != nil {
			n.srv.ServeTLS(ln, "", "")
		} else {
			n.srv.Serve(ln)
		}
		close(served)
	}()
	t.Cleanup(func() {
		n.tr.Close()
		n.srv.Close()
		<-served
	})
}

func listen(t *testing.T) net.Listener {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return ln
}

func msg(typ pb.MessageType, from, to, index uint64) pb.Message {
	return pb.Message{Type: typ, From: from, To: to, Index: index}
}

// encoded is m's encoding, as a RaftMessage of the Raft rpc carries it.
func encoded(t *testing.T, m pb.Message) []byte {
	t.Helper()
	b, err := m.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestMessagesOfAllGroupsArriveInOrder(t *testing.T) {
	ln1, ln2 := listen(t), listen(t)
	peers := map[uint64]string{1: "http://" + ln1.Addr().String(), 2: "http://" + ln2.Addr().String()}
	a := startNode(t, 1, ln1, peers)
	b := startNode(t, 2, ln2, peers)
	const perGroup = 500
	for i := range uint64(perGroup) {
		for group := uint64(1); group <= 3; group++ {
			a.tr.Send(group, []pb.Message{msg(pb.MsgApp, 1, 2, i)})
		}
	}
	b.rec.waitFor(t, "every message", func(r *recorder) bool {
		return len(r.got[1]) == perGroup && len(r.got[2]) == perGroup && len(r.got[3]) == perGroup
	})
	b.rec.mu.Lock()
	defer b.rec.mu.Unlock()
	for group, ms := range b.rec.got {
		for i, m := range ms {
			if m.Index != uint64(i) || m.From != 1 || m.To != 2 {
				t.Fatalf("group %d: message %d is %v", group, i, m)
			}
		}
	}
}

// TestPeerDownIsReportedAndStreamReopens: messages to a peer that does
// not listen are reported unreachable (and a snapshot failed); once the
// peer listens, messages arrive on a new stream.
func TestPeerDownIsReportedAndStreamReopens(t *testing.T) {
	ln1 := listen(t)
	addr2 := testkit.FreeAddr(t) // nothing listens there yet
	peers := map[uint64]string{1: "http://" + ln1.Addr().String(), 2: "http://" + addr2}
	a := startNode(t, 1, ln1, peers)
	a.tr.Send(7, []pb.Message{msg(pb.MsgApp, 1, 2, 1), msg(pb.MsgSnap, 1, 2, 2)})
	a.rec.waitFor(t, "the lost messages reported", func(r *recorder) bool {
		return r.unreachable[2] >= 1 && len(r.snapshots) == 1
	})
	a.rec.mu.Lock()
	snapFailed := a.rec.snapshots[0]
	a.rec.mu.Unlock()
	if !snapFailed {
		t.Errorf("a snapshot to a peer that is down was reported sent")
	}

	ln2, err := net.Listen("tcp", addr2)
	if err != nil {
		t.Fatal(err)
	}
	b := startNode(t, 2, ln2, peers)
	// Raft keeps sending; so does this test, until one arrives.
	deadline := time.Now().Add(20 * time.Second)
	for i := uint64(10); ; i++ {
		a.tr.Send(7, []pb.Message{msg(pb.MsgHeartbeat, 1, 2, i)})
		b.rec.mu.Lock()
		n := len(b.rec.got[7])
		b.rec.mu.Unlock()
		if n > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no message reached the peer within 20s of it listening")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestSendToUnknownNodeIsDropped(t *testing.T) {
	ln1 := listen(t)
	a := startNode(t, 1, ln1, map[uint64]string{1: "http://" + ln1.Addr().String()})
	a.tr.Send(1, []pb.Message{msg(pb.MsgApp, 1, 9, 1)}) // must not panic or block
	if _, err := a.tr.Fetch(context.Background(), 9, &clusterv1.FetchRequest{}); err == nil || !strings.Contains(err.Error(), "not a peer") {
		t.Errorf("Fetch on an unknown node = %v, want an error saying it is not a peer", err)
	}
}
