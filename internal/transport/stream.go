package transport

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"time"

	pb "go.etcd.io/raft/v3/raftpb"
	"golang.org/x/net/http/httpguts"

	"herald/proto/herald/cluster/v1/clusterv1connect"
)

// The Raft stream carries the Raft messages of every group from one node
// to a peer, over a connection of its own rather than an rpc: a gRPC
// stream over HTTP/2 cost a three-node cluster about a quarter of its CPU
// in HTTP/2's framing, flow control (a WINDOW_UPDATE frame back for every
// 4 KiB received) and goroutine handoffs, for messages that need none of
// them (docs/decisions/0018-raft-stream.md).
//
// The sender opens it with a GET of raftStreamPath (the path of the Raft
// rpc it replaces, which a POST still calls: peer.legacyStream) carrying
// "Connection: Upgrade", "Upgrade: " + raftStreamUpgrade and the cluster
// and node headers of every node-to-node request, over HTTP/1.1 (over TLS
// with the node's certificate, in a cluster with TLS); the receiver
// answers 101 Switching Protocols with its cluster header, and from then
// on the connection carries frames:
//
//	frame = length body   ; length: 4 bytes, big-endian, of body
//
// From the sender, body is a herald.cluster.v1.RaftBatch. An empty body
// is a keepalive, the only frame the receiver ever sends. Each side sends
// one after keepaliveEvery without sending anything else, and closes the
// connection after deadAfter without receiving anything: a peer behind a
// partition, whose connection neither fails nor answers, is found as soon
// as HTTP/2's pings found it.
const (
	raftStreamPath    = "/" + clusterv1connect.ClusterServiceName + "/Raft"
	raftStreamUpgrade = "herald-raft/1"

	keepaliveEvery = time.Second
	deadAfter      = 4 * time.Second

	// frameHeaderLen is the length of a frame's length.
	frameHeaderLen = 4
	// maxFrameBytes bounds a frame's body: far above any batch (fill
	// stops past maxBatchBytes, and a message holds at most raft's
	// MaxSizePerMsg of 1 MiB unless its one entry is larger) but below
	// what a corrupted length would make the receiver allocate.
	maxFrameBytes = 1 << 30

	// keptBufferBytes bounds the buffer a stream keeps between frames:
	// a larger one, grown for a rare large batch, is let go.
	keptBufferBytes = 1 << 20

	// readBufferSize is the buffer a stream is read through: a batch of
	// a few messages fits whole, so that a frame costs one read.
	readBufferSize = 64 << 10
)

// errFrameTooLarge is returned for a frame over maxFrameBytes.
var errFrameTooLarge = errors.New("raft stream frame over 1 GiB")

// keepalive is the frame of an empty body.
var keepalive = [frameHeaderLen]byte{}

// appendFrame appends to dst the frame of batch, from node from.
func appendFrame(dst []byte, from uint64, batch []outgoing) ([]byte, error) {
	start := len(dst)
	dst = append(dst, keepalive[:]...)
	dst = appendBatch(dst, from, batch)
	body := len(dst) - start - frameHeaderLen
	if body > maxFrameBytes {
		return dst[:start], fmt.Errorf("a raft batch of %d messages: %w", len(batch), errFrameTooLarge)
	}
	binary.BigEndian.PutUint32(dst[start:], uint32(body))
	return dst, nil
}

// readFrame reads the next frame from r into *buf, which it grows as
// needed, and returns its body: empty for a keepalive.
func readFrame(r io.Reader, buf *[]byte) ([]byte, error) {
	var header [frameHeaderLen]byte
	if _, err := io.ReadFull(r, header[:]); err != nil {
		return nil, err
	}
	n := binary.BigEndian.Uint32(header[:])
	if n > maxFrameBytes {
		return nil, fmt.Errorf("a frame of %d bytes: %w", n, errFrameTooLarge)
	}
	if cap(*buf) < int(n) {
		*buf = make([]byte, n)
	}
	body := (*buf)[:n]
	if _, err := io.ReadFull(r, body); err != nil {
		if err == io.EOF {
			err = io.ErrUnexpectedEOF // a frame cut short
		}
		return nil, err
	}
	return body, nil
}

// readDeadline keeps a connection's read deadline deadAfter ahead of its
// last read, moving it at most once every keepaliveEvery: a deadline per
// frame would cost a timer update per frame.
type readDeadline struct {
	conn net.Conn
	set  time.Time // when the deadline was last moved
}

func (d *readDeadline) Read(p []byte) (int, error) {
	if now := time.Now(); now.Sub(d.set) >= keepaliveEvery {
		d.set = now
		if err := d.conn.SetReadDeadline(now.Add(deadAfter)); err != nil {
			return 0, err
		}
	}
	return d.conn.Read(p)
}

// serveRaftStream takes over the connection of a request opening a Raft
// stream and hands every message it carries to the receiver, until the
// peer closes it, it falls silent or this transport closes.
func (t *Transport) serveRaftStream(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet || !httpguts.HeaderValuesContainsToken(r.Header.Values("Connection"), "upgrade") ||
		!strings.EqualFold(r.Header.Get("Upgrade"), raftStreamUpgrade) {
		w.Header().Set("Upgrade", raftStreamUpgrade)
		http.Error(w, fmt.Sprintf("%s is the Raft stream between herald nodes: open it with a GET carrying \"Connection: Upgrade\" and \"Upgrade: %s\" over HTTP/1.1; are all the nodes of the cluster the same version of herald?",
			raftStreamPath, raftStreamUpgrade), http.StatusUpgradeRequired)
		return
	}
	t.mu.RLock()
	rcv := t.receiver
	t.mu.RUnlock()
	if rcv == nil {
		http.Error(w, fmt.Sprintf("node %d is starting; its raft groups are not open yet", t.cfg.NodeID), http.StatusServiceUnavailable)
		return
	}
	if !t.track() {
		http.Error(w, fmt.Sprintf("node %d is shutting down", t.cfg.NodeID), http.StatusServiceUnavailable)
		return
	}
	defer t.wg.Done()
	conn, rw, err := http.NewResponseController(w).Hijack()
	if err != nil {
		// HTTP/2 cannot switch protocols.
		http.Error(w, "the Raft stream needs an HTTP/1.1 connection; this one cannot be taken over: "+err.Error(), http.StatusHTTPVersionNotSupported)
		return
	}
	defer conn.Close()
	rw.WriteString("HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: " + raftStreamUpgrade + "\r\n")
	if id := t.Cluster(); id != "" {
		rw.WriteString(clusterHeader + ": " + id + "\r\n")
	}
	rw.WriteString("\r\n")
	if err := rw.Flush(); err != nil {
		return
	}
	err = t.receiveStream(conn, rw.Reader, rcv)
	t.log.Debug("raft stream from peer ended", "peer", r.Header.Get(nodeHeader), "remote", r.RemoteAddr, "err", err)
}

// track counts a stream that Close must end and wait for, unless Close
// has begun: then it reports false.
func (t *Transport) track() bool {
	t.peersMu.Lock()
	defer t.peersMu.Unlock()
	select {
	case <-t.stop:
		return false
	default:
		t.wg.Add(1)
		return true
	}
}

// receiveStream hands the messages of the frames read from br to rcv
// while sending keepalives on conn, until reading fails. It closes conn
// when the transport closes.
func (t *Transport) receiveStream(conn net.Conn, br *bufio.Reader, rcv Receiver) error {
	done := make(chan struct{})
	keepalives := make(chan struct{})
	go func() {
		defer close(keepalives)
		t.sendKeepalives(conn, done)
	}()
	defer func() {
		close(done)
		<-keepalives
	}()
	// A sender waits for the switch before it sends: bytes read past the
	// request are no frames of this stream.
	if br.Buffered() > 0 {
		return fmt.Errorf("the peer sent %d bytes before the switch to the raft stream", br.Buffered())
	}
	// Read through the connection's deadline, kept moving.
	in := bufio.NewReaderSize(&readDeadline{conn: conn}, readBufferSize)
	var buf []byte
	for {
		body, err := readFrame(in, &buf)
		if err != nil {
			return err
		}
		if len(body) == 0 {
			continue // a keepalive
		}
		if cap(buf) > keptBufferBytes {
			buf = nil // body is decoded below, and not kept
		}
		err = decodeBatch(body, func(group uint64, m pb.Message) { receive(rcv, group, m) })
		if err != nil {
			return fmt.Errorf("a frame of the raft stream is not a RaftBatch: %w", err)
		}
	}
}

// sendKeepalives writes a keepalive on conn every keepaliveEvery until
// done closes. When the transport closes, or a write fails, it closes
// conn, which ends the reads of the stream.
func (t *Transport) sendKeepalives(conn net.Conn, done <-chan struct{}) {
	tick := time.NewTicker(keepaliveEvery)
	defer tick.Stop()
	for {
		select {
		case <-done:
			return
		case <-t.stop:
			conn.Close()
			return
		case <-tick.C:
			conn.SetWriteDeadline(time.Now().Add(deadAfter))
			if _, err := conn.Write(keepalive[:]); err != nil {
				conn.Close()
				return
			}
		}
	}
}
