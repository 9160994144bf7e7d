package transport

import (
	"bytes"
	"context"
	"encoding/binary"
	"io"
	"net"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	pb "go.etcd.io/raft/v3/raftpb"

	"herald/internal/backoff"
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
// socket write (one HTTP/2 DATA frame), not one for the gRPC prefix and
// another for the message.
func TestABatchGoesOutInOneWrite(t *testing.T) {
	ln1, ln2 := listen(t), listen(t)
	peers := map[uint64]string{1: "http://" + ln1.Addr().String(), 2: "http://" + ln2.Addr().String()}
	b := startNode(t, 2, ln2, peers)

	var writes atomic.Int64
	client := http2Client(nil)
	rt := client.Transport.(*http.Transport)
	dial := rt.DialContext
	rt.DialContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := dial(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return countingConn{Conn: c, writes: &writes}, nil
	}
	a := New(Config{NodeID: 1, Peers: peers, HTTPClient: client, Retry: backoff.Policy{Initial: 10 * time.Millisecond, Max: 50 * time.Millisecond}})
	a.Start(newRecorder())
	t.Cleanup(a.Close)

	sendAndWait := func(i uint64) {
		a.Send(1, []*pb.Message{msg(pb.MessageType_MsgApp, 1, 2, i)})
		b.rec.waitFor(t, "the message", func(r *recorder) bool { return uint64(len(r.got[1])) == i+1 })
	}
	sendAndWait(0) // opens the connection and the stream
	before := writes.Load()
	const batches = 40
	for i := uint64(1); i <= batches; i++ {
		sendAndWait(i)
	}
	// A little room for HTTP/2's own frames (a ping, a settings ack).
	if got := writes.Load() - before; got > batches+5 {
		t.Errorf("%d batches took %d writes to the connection; want one each", batches, got)
	}
}

// grpcMessage is a gRPC length-prefixed message holding body.
func grpcMessage(body []byte) []byte {
	m := make([]byte, grpcPrefixLen, grpcPrefixLen+len(body))
	binary.BigEndian.PutUint32(m[1:], uint32(len(body)))
	return append(m, body...)
}

// prefixThenBody writes each message to w as connect-go does: its prefix,
// then its bytes, in two writes.
func prefixThenBody(w *io.PipeWriter, msgs ...[]byte) {
	for _, m := range msgs {
		if _, err := w.Write(m[:grpcPrefixLen]); err != nil {
			return
		}
		if len(m) > grpcPrefixLen {
			if _, err := w.Write(m[grpcPrefixLen:]); err != nil {
				return
			}
		}
	}
	w.Close()
}

func TestMessageReaderReadsWholeMessages(t *testing.T) {
	msgs := [][]byte{grpcMessage([]byte("first")), grpcMessage(nil), grpcMessage(bytes.Repeat([]byte("x"), 100))}
	pr, pw := io.Pipe()
	go prefixThenBody(pw, msgs...)
	r := &messageReader{body: pr}
	buf := make([]byte, 64)
	var reads [][]byte
	for {
		n, err := r.Read(buf)
		if n > 0 {
			reads = append(reads, append([]byte(nil), buf[:n]...))
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	// The third message does not fit the 64-byte buffer: its first read
	// holds its prefix and as much of it as fits, the next the rest.
	want := [][]byte{msgs[0], msgs[1], msgs[2][:64], msgs[2][64:]}
	if len(reads) != len(want) {
		t.Fatalf("%d reads %q; want %d: %q", len(reads), reads, len(want), want)
	}
	for i := range want {
		if !bytes.Equal(reads[i], want[i]) {
			t.Errorf("read %d = %q; want %q", i, reads[i], want[i])
		}
	}
}

func TestMessageReaderReportsAMessageCutShort(t *testing.T) {
	m := grpcMessage(bytes.Repeat([]byte("a message "), 10))
	for _, bufLen := range []int{len(m), 16} { // cut in the first read, and in a later one
		pr, pw := io.Pipe()
		go func() {
			pw.Write(m[:grpcPrefixLen])
			pw.Write(m[grpcPrefixLen : len(m)-2])
			pw.Close()
		}()
		r := &messageReader{body: pr}
		buf := make([]byte, bufLen)
		var err error
		for err == nil {
			_, err = r.Read(buf)
		}
		if err != io.ErrUnexpectedEOF {
			t.Errorf("reading a message cut short into %d-byte reads = %v; want io.ErrUnexpectedEOF", bufLen, err)
		}
	}
}
