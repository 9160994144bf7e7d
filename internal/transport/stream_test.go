package transport

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"
	pb "go.etcd.io/raft/v3/raftpb"
	"reflect"

	"herald/internal/backoff"
	"herald/internal/testkit/faultproxy"
	clusterv1 "herald/proto/herald/cluster/v1"
	"herald/proto/herald/cluster/v1/clusterv1connect"
)

// countingConn counts the writes made to a connection.
type countingConn struct {
	net.Conn
	writes *atomic.Int64
}

func (c countingConn) Write(b []byte) (int, error) {
	c.writes.Add(1)
	return c.Conn.Write(b)
}

// TestABatchGoesOutInOneWrite: each batch a peer's stream sends costs one
// socket write, and nothing else is written but a keepalive a second.
func TestABatchGoesOutInOneWrite(t *testing.T) {
	ln1, ln2 := listen(t), listen(t)
	peers := map[uint64]string{1: "http://" + ln1.Addr().String(), 2: "http://" + ln2.Addr().String()}
	b := startNode(t, 2, ln2, peers)

	var writes atomic.Int64
	plain := dialer(nil)
	count := func(ctx context.Context, u *url.URL) (net.Conn, error) {
		c, err := plain(ctx, u)
		if err != nil {
			return nil, err
		}
		return countingConn{Conn: c, writes: &writes}, nil
	}
	a := New(Config{NodeID: 1, Peers: peers, dial: count, Retry: backoff.Policy{Initial: 10 * time.Millisecond, Max: 50 * time.Millisecond}})
	a.Start(newRecorder())
	t.Cleanup(a.Close)

	sendAndWait := func(i uint64) {
		a.Send(1, []pb.Message{msg(pb.MsgApp, 1, 2, i)})
		b.rec.waitFor(t, "the message", func(r *recorder) bool { return uint64(len(r.got[1])) == i+1 })
	}
	sendAndWait(0) // opens the connection and the stream
	before, start := writes.Load(), time.Now()
	const batches = 40
	for i := uint64(1); i <= batches; i++ {
		sendAndWait(i)
	}
	keepalives := int64(time.Since(start)/keepaliveEvery) + 1
	if got := writes.Load() - before; got > batches+keepalives {
		t.Errorf("%d batches took %d writes to the connection; want one each (and at most %d keepalives)", batches, got, keepalives)
	}
}

// TestSilentPeerIsFoundDead: a peer behind a partition, whose connection
// neither fails nor answers, is found within seconds: what is sent to it
// is reported unreachable while the partition lasts, and messages arrive
// again once it heals.
func TestSilentPeerIsFoundDead(t *testing.T) {
	ln1, ln2 := listen(t), listen(t)
	proxy, err := faultproxy.Listen("127.0.0.1:0", ln2.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { proxy.Close() })
	a := startNode(t, 1, ln1, map[uint64]string{1: "http://" + ln1.Addr().String(), 2: "http://" + proxy.Addr()})
	b := startNode(t, 2, ln2, map[uint64]string{1: "http://" + ln1.Addr().String(), 2: "http://" + ln2.Addr().String()})

	heartbeat := func(i uint64) { a.tr.Send(5, []pb.Message{msg(pb.MsgHeartbeat, 1, 2, i)}) }
	heartbeat(0)
	b.rec.waitFor(t, "the first heartbeat", func(r *recorder) bool { return len(r.got[5]) == 1 })

	proxy.Blackhole()
	deadline := time.Now().Add(3 * deadAfter)
	for i := uint64(1); ; i++ {
		heartbeat(i)
		a.rec.mu.Lock()
		lost := a.rec.unreachable[2]
		a.rec.mu.Unlock()
		if lost > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("nothing was reported unreachable within %v of the peer falling silent", 3*deadAfter)
		}
		time.Sleep(50 * time.Millisecond)
	}

	proxy.Heal()
	b.rec.mu.Lock()
	had := len(b.rec.got[5])
	b.rec.mu.Unlock()
	deadline = time.Now().Add(20 * time.Second)
	for i := uint64(1000); ; i++ {
		heartbeat(i)
		b.rec.mu.Lock()
		n := len(b.rec.got[5])
		b.rec.mu.Unlock()
		if n > had {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no message reached the peer within 20s of the partition healing")
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// openRaw opens a Raft stream to the transport serving at addr by hand,
// as node 1 of no cluster yet, and returns the connection and the reader
// after the peer's answer, which it checks is 101.
func openRaw(t *testing.T, addr string) (net.Conn, *bufio.Reader) {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	req, err := http.NewRequest(http.MethodGet, "http://"+addr+raftStreamPath, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Connection", "Upgrade")
	req.Header.Set("Upgrade", raftStreamUpgrade)
	req.Header.Set(nodeHeader, "1")
	if err := req.Write(conn); err != nil {
		t.Fatal(err)
	}
	in := bufio.NewReader(conn)
	resp, err := http.ReadResponse(in, req)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusSwitchingProtocols {
		t.Fatalf("opening a raft stream: %s", resp.Status)
	}
	return conn, in
}

// TestRaftStreamKeepsAliveAndDropsASilentSender: the receiving side sends
// keepalives, takes batches in frames, and closes a stream whose sender
// sends nothing at all for deadAfter.
func TestRaftStreamKeepsAliveAndDropsASilentSender(t *testing.T) {
	ln := listen(t)
	b := startNode(t, 2, ln, map[uint64]string{2: "http://" + ln.Addr().String()})
	conn, in := openRaw(t, ln.Addr().String())

	frame, err := appendFrame(nil, 1, []outgoing{{group: 3, msg: msg(pb.MsgApp, 1, 2, 9)}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Write(frame); err != nil {
		t.Fatal(err)
	}
	b.rec.waitFor(t, "the batch's message", func(r *recorder) bool { return len(r.got[3]) == 1 && r.got[3][0].Index == 9 })

	start := time.Now()
	var buf []byte
	keepalives := 0
	for {
		body, err := readFrame(in, &buf)
		if err != nil {
			if !errors.Is(err, io.EOF) {
				t.Fatalf("reading the receiver's frames: %v; want keepalives, then the end of the stream", err)
			}
			break
		}
		if len(body) != 0 {
			t.Fatalf("the receiver sent a frame of %d bytes; want keepalives only", len(body))
		}
		keepalives++
	}
	if took := time.Since(start); keepalives == 0 || took < deadAfter-keepaliveEvery || took > 3*deadAfter {
		t.Fatalf("the receiver sent %d keepalives and closed a silent stream after %v; want some, and the end after about %v", keepalives, took, deadAfter)
	}
}

// TestRaftStreamRefusals: a GET that does not ask to switch to the
// stream is refused with a status that says how to, and a frame that is
// no batch ends the stream.
func TestRaftStreamRefusals(t *testing.T) {
	ln := listen(t)
	b := startNode(t, 2, ln, map[uint64]string{2: "http://" + ln.Addr().String()})
	resp, err := http.Get("http://" + ln.Addr().String() + raftStreamPath)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusUpgradeRequired || !strings.Contains(string(body), "Upgrade: "+raftStreamUpgrade) {
		t.Errorf("GET %s = %s %q; want 426 saying how to open the stream", raftStreamPath, resp.Status, body)
	}

	conn, in := openRaw(t, ln.Addr().String())
	garbage := []byte{0, 0, 0, 3, 0xff, 0xff, 0xff}
	if _, err := conn.Write(garbage); err != nil {
		t.Fatal(err)
	}
	conn.SetReadDeadline(time.Now().Add(2 * time.Second))
	if _, err := io.Copy(io.Discard, in); err != nil {
		t.Fatalf("after a frame that is no batch, the stream went on (%v); want it closed", err)
	}
	b.rec.mu.Lock()
	defer b.rec.mu.Unlock()
	if len(b.rec.got) != 0 {
		t.Errorf("a frame that is no batch delivered %v", b.rec.got)
	}
}

func TestFrames(t *testing.T) {
	batch := []outgoing{{group: 1, msg: msg(pb.MsgApp, 4, 5, 1)}, {group: 2, msg: msg(pb.MsgHeartbeat, 4, 5, 0)}}
	batch[0].msg.Entries = []pb.Entry{{Term: 3, Index: 1, Data: []byte("an event")}}
	var stream []byte
	stream = append(stream, keepalive[:]...)
	stream, err := appendFrame(stream, 4, batch)
	if err != nil {
		t.Fatal(err)
	}
	r := bytes.NewReader(stream)
	var buf []byte
	if body, err := readFrame(r, &buf); err != nil || len(body) != 0 {
		t.Fatalf("first frame = %x, %v; want a keepalive", body, err)
	}
	body, err := readFrame(r, &buf)
	if err != nil {
		t.Fatal(err)
	}
	var got []outgoing
	err = decodeBatch(body, func(group uint64, m pb.Message) { got = append(got, outgoing{group: group, msg: m}) })
	if err != nil || !reflect.DeepEqual(got, batch) {
		t.Fatalf("second frame decodes as %v, %v; want %v", got, err, batch)
	}
	if _, err := readFrame(r, &buf); err != io.EOF {
		t.Errorf("after the last frame: %v; want io.EOF", err)
	}

	if _, err := readFrame(bytes.NewReader(stream[frameHeaderLen:len(stream)-1]), &buf); err != io.ErrUnexpectedEOF {
		t.Errorf("reading a frame cut short = %v; want io.ErrUnexpectedEOF", err)
	}
	if _, err := readFrame(bytes.NewReader([]byte{0x7f, 0xff, 0xff, 0xff}), &buf); !errors.Is(err, errFrameTooLarge) {
		t.Errorf("reading a frame of 2 GiB = %v; want errFrameTooLarge", err)
	}
}

// TestRollingUpgrade: while a cluster is upgraded one node at a time, a
// node of this release and one of the release before, which has the Raft
// rpc and no stream, replicate to each other: this node sends on the rpc
// when the peer does not switch, and answers the rpc.
func TestRollingUpgrade(t *testing.T) {
	ln1, ln2 := listen(t), listen(t)
	peers := map[uint64]string{1: "http://" + ln1.Addr().String(), 2: "http://" + ln2.Addr().String()}
	a := startNode(t, 1, ln1, peers)
	b := startEarlierNode(t, 2, ln2, peers)

	a.tr.Send(4, []pb.Message{msg(pb.MsgApp, 1, 2, 1), msg(pb.MsgApp, 1, 2, 2)})
	b.rec.waitFor(t, "the messages, on the earlier node's rpc", func(r *recorder) bool { return len(r.got[4]) == 2 })

	// The earlier release's sender: the rpc, from node 2 to node 1.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	s := clusterv1connect.NewClusterServiceClient(http2Client(nil), peers[1], connect.WithGRPC()).Raft(ctx)
	batch := &clusterv1.RaftBatch{From: 2, Messages: []*clusterv1.RaftMessage{{Group: 4, Message: encoded(t, msg(pb.MsgAppResp, 2, 1, 2))}}}
	if err := s.Send(batch); err != nil {
		t.Fatal(err)
	}
	a.rec.waitFor(t, "the message sent on the rpc", func(r *recorder) bool { return len(r.got[4]) == 1 && r.got[4][0].Index == 2 })
	if _, err := s.CloseAndReceive(); err != nil {
		t.Errorf("ending the rpc: %v", err)
	}
}

// startEarlierNode serves a transport as a node of the release before the
// Raft stream did: the cluster service's rpcs only, Raft among them.
func startEarlierNode(t *testing.T, id uint64, ln net.Listener, peers map[uint64]string) *node {
	t.Helper()
	n := &node{rec: newRecorder()}
	n.tr = New(Config{NodeID: id, Peers: peers, Retry: backoff.Policy{Initial: 10 * time.Millisecond, Max: 50 * time.Millisecond}})
	n.tr.Start(n.rec)
	mux := http.NewServeMux()
	mux.Handle(clusterv1connect.NewClusterServiceHandler(&service{t: n.tr}))
	n.serve(t, ln, mux, nil)
	return n
}

// A batch stops growing past maxBatchBytes of entries, however many
// messages wait: its frame is read whole before any message is handed on.
func TestLargeAppendsSplitIntoBatches(t *testing.T) {
	p := &peer{t: &Transport{cfg: Config{MaxBatch: 512}}, queue: make(chan outgoing, 16)}
	const perEntry = 1 << 20
	for i := range uint64(10) {
		m := msg(pb.MsgApp, 1, 2, i)
		m.Entries = []pb.Entry{{Data: make([]byte, perEntry)}}
		p.queue <- outgoing{group: 1, msg: m}
	}
	var sizes []int
	for len(p.queue) > 0 {
		sizes = append(sizes, len(p.fill(nil)))
	}
	if want := []int{4, 4, 2}; !slices.Equal(sizes, want) {
		t.Errorf("10 appends of 1 MiB went out in batches of %v; want %v", sizes, want)
	}
}
