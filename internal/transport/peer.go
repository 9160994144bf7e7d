package transport

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"

	"connectrpc.com/connect"
	pb "go.etcd.io/raft/v3/raftpb"

	"herald/internal/backoff"
	clusterv1 "herald/proto/herald/cluster/v1"
	"herald/proto/herald/cluster/v1/clusterv1connect"
)

// peer sends the messages queued for one node over one Raft stream at a
// time.
type peer struct {
	t      *Transport
	id     uint64
	url    string
	queue  chan outgoing
	client clusterv1connect.ClusterServiceClient
}

// run opens a stream, sends batches on it until it breaks, and opens the
// next after a pause, until the transport stops.
func (p *peer) run() {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		<-p.t.stop
		cancel()
	}()
	retry := backoff.New(p.t.cfg.Retry)
	for ctx.Err() == nil {
		sent, err := p.stream(ctx)
		if ctx.Err() != nil {
			return
		}
		if sent {
			retry.Reset()
		}
		p.t.log.Debug("raft stream to peer broke; reopening", "peer", p.id, "url", p.url, "err", err)
		if backoff.Sleep(ctx, retry.Next()) != nil {
			return
		}
	}
}

// stream opens a stream once there is something to send, and sends
// batches and keepalives on it until it breaks. It reports whether any
// batch went out. The messages of the batch that failed are reported
// lost.
func (p *peer) stream(ctx context.Context) (sent bool, err error) {
	var first outgoing
	select {
	case first = <-p.queue:
	case <-ctx.Done():
		return false, ctx.Err()
	}
	batch := []outgoing{first}
	conn, in, err := p.open(ctx)
	if errors.Is(err, errPeerWithoutStream) {
		p.t.log.Info("replicating to a peer of the earlier release on its Raft rpc", "peer", p.id, "url", p.url)
		return p.legacyStream(ctx, batch)
	}
	if err != nil {
		p.lost(batch)
		return false, err
	}
	// The peer sends only keepalives. A stream whose peer fell silent,
	// or that ctx ended, is closed, which fails the next write.
	var readErr error
	silent := make(chan struct{})
	go func() {
		defer close(silent)
		readErr = readKeepalives(in)
	}()
	stop := context.AfterFunc(ctx, func() { conn.Close() })
	defer func() {
		stop()
		conn.Close()
		<-silent
	}()

	idle := time.NewTimer(keepaliveEvery)
	defer idle.Stop()
	var buf []byte
	for {
		if len(batch) > 0 {
			batch = p.fill(batch)
			if buf, err = p.write(conn, buf[:0], batch); err != nil {
				p.lost(batch)
				return sent, err
			}
			if cap(buf) > keptBufferBytes {
				buf = nil // one large batch does not pin its buffer for good
			}
			sent = true
			p.delivered(batch)
			batch = batch[:0]
			idle.Reset(keepaliveEvery)
		}
		select {
		case o := <-p.queue:
			batch = append(batch, o)
		case <-idle.C:
			if err := writeWithin(conn, keepalive[:]); err != nil {
				return sent, fmt.Errorf("send a keepalive to node %d: %w", p.id, err)
			}
			idle.Reset(keepaliveEvery)
		case <-silent:
			return sent, fmt.Errorf("raft stream to node %d: %w", p.id, readErr)
		case <-ctx.Done():
			return sent, ctx.Err()
		}
	}
}

// write sends batch as one frame, encoded in buf, which it returns for
// the next.
func (p *peer) write(conn net.Conn, buf []byte, batch []outgoing) ([]byte, error) {
	buf, err := appendFrame(buf, p.t.cfg.NodeID, batch)
	if err != nil {
		return buf, err
	}
	if err := writeWithin(conn, buf); err != nil {
		return buf, fmt.Errorf("send to node %d: %w", p.id, err)
	}
	return buf, nil
}

// writeWithin writes b to conn, failing if the peer has not taken it
// within deadAfter.
func writeWithin(conn net.Conn, b []byte) error {
	if err := conn.SetWriteDeadline(time.Now().Add(deadAfter)); err != nil {
		return err
	}
	_, err := conn.Write(b)
	return err
}

// readKeepalives reads the peer's keepalives from in until reading
// fails: the peer closed the stream, or sent nothing for deadAfter.
func readKeepalives(in *bufio.Reader) error {
	var buf []byte
	for {
		body, err := readFrame(in, &buf)
		if err != nil {
			return err
		}
		if len(body) != 0 {
			return fmt.Errorf("the peer sent a frame of %d bytes on a raft stream, where only keepalives come back", len(body))
		}
	}
}

// open dials the peer and switches the connection to a Raft stream. It
// returns the connection, and the reader of what the peer sends on it.
func (p *peer) open(ctx context.Context) (net.Conn, *bufio.Reader, error) {
	u, err := url.Parse(p.url)
	if err != nil {
		return nil, nil, fmt.Errorf("node %d's address %q: %w", p.id, p.url, err)
	}
	ctx, cancel := context.WithTimeout(ctx, deadAfter)
	defer cancel()
	conn, err := p.t.cfg.dial(ctx, u)
	if err != nil {
		return nil, nil, fmt.Errorf("dial node %d at %s: %w", p.id, p.url, err)
	}
	// The transport closing, or the opening taking over deadAfter, ends
	// the upgrade's reads and writes at once.
	abort := context.AfterFunc(ctx, func() { conn.Close() })
	// Reads time out after deadAfter, the answer to the upgrade's too.
	in := bufio.NewReaderSize(&readDeadline{conn: conn}, 4<<10)
	err = p.upgrade(ctx, conn, in, u)
	if !abort() && err == nil {
		err = fmt.Errorf("open the raft stream to node %d at %s: %w", p.id, p.url, ctx.Err())
	}
	if err != nil {
		conn.Close()
		return nil, nil, err
	}
	return conn, in, nil
}

// upgrade asks the peer on conn to switch to the Raft stream, and reads
// its answer from in.
func (p *peer) upgrade(ctx context.Context, conn net.Conn, in *bufio.Reader, u *url.URL) error {
	if err := conn.SetWriteDeadline(time.Now().Add(deadAfter)); err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.Scheme+"://"+u.Host+raftStreamPath, nil)
	if err != nil {
		return fmt.Errorf("raft stream to node %d: %w", p.id, err)
	}
	req.Header.Set("Connection", "Upgrade")
	req.Header.Set("Upgrade", raftStreamUpgrade)
	p.t.identify(req.Header)
	if err := req.Write(conn); err != nil {
		return fmt.Errorf("open the raft stream to node %d at %s: %w", p.id, p.url, err)
	}
	resp, err := http.ReadResponse(in, req)
	if err != nil {
		return fmt.Errorf("open the raft stream to node %d at %s: %w", p.id, p.url, err)
	}
	defer resp.Body.Close()
	if err := p.t.checkCluster(p.describe(), resp.Header.Get(clusterHeader)); err != nil {
		return err
	}
	if resp.StatusCode == http.StatusMethodNotAllowed {
		// The rpc this stream replaced answers a GET so.
		return fmt.Errorf("node %d at %s: %w", p.id, p.url, errPeerWithoutStream)
	}
	if resp.StatusCode != http.StatusSwitchingProtocols {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<10))
		return fmt.Errorf("open the raft stream to node %d at %s: %s: %s", p.id, p.url, resp.Status, strings.TrimSpace(string(msg)))
	}
	return nil
}

// errPeerWithoutStream says that a peer runs the release before the Raft
// stream: it answers the Raft rpc instead.
var errPeerWithoutStream = errors.New("the peer runs an earlier release of herald, without the Raft stream; sending on its Raft rpc until it is upgraded")

// legacyStream sends batch, and then what is queued, on the Raft rpc of a
// peer of the release before the Raft stream, until sending fails: during
// a rolling upgrade, the two releases' nodes replicate to each other. It
// reports whether any batch went out; the messages of the batch that
// failed are reported lost. Remove it, and the rpc, one release after the
// stream's.
func (p *peer) legacyStream(ctx context.Context, batch []outgoing) (sent bool, err error) {
	s := p.client.Raft(ctx)
	defer func() {
		if _, cerr := s.CloseAndReceive(); err == nil && cerr != nil {
			err = cerr
		}
	}()
	for {
		batch = p.fill(batch)
		encoded, err := encodeBatch(p.t.cfg.NodeID, batch)
		if err == nil {
			err = s.Send(encoded)
		}
		if err != nil {
			p.lost(batch)
			return sent, fmt.Errorf("send to node %d on its Raft rpc: %w", p.id, err)
		}
		sent = true
		p.delivered(batch)
		batch = batch[:0]
		select {
		case o := <-p.queue:
			batch = append(batch, o)
		case <-ctx.Done():
			return sent, ctx.Err()
		}
	}
}

// describe names the peer in errors and logs.
func (p *peer) describe() string {
	return fmt.Sprintf("node %d (at %s)", p.id, p.url)
}

// dialer connects to a peer's API port: plain TCP for http URLs, TLS with
// tc (offering HTTP/1.1 only: HTTP/2 cannot switch protocols) for https.
func dialer(tc *tls.Config) func(context.Context, *url.URL) (net.Conn, error) {
	if tc != nil {
		tc = tc.Clone()
		tc.NextProtos = []string{"http/1.1"}
	}
	return func(ctx context.Context, u *url.URL) (net.Conn, error) {
		switch u.Scheme {
		case "http":
			return (&net.Dialer{}).DialContext(ctx, "tcp", hostPort(u, "80"))
		case "https":
			if tc == nil {
				return nil, errors.New("an https peer needs the node's TLS settings")
			}
			return (&tls.Dialer{Config: tc}).DialContext(ctx, "tcp", hostPort(u, "443"))
		}
		return nil, fmt.Errorf("peer URL scheme %q is neither http nor https", u.Scheme)
	}
}

// hostPort returns u's host and port, with port def if u has none.
func hostPort(u *url.URL, def string) string {
	if u.Port() != "" {
		return u.Host
	}
	return net.JoinHostPort(u.Hostname(), def)
}

// fill adds to batch what else is queued, up to MaxBatch messages or,
// once past maxBatchBytes of entries, none more: a frame is read whole
// before any of its messages is handed on, so the messages of a huge one
// (appends of large batches of events) would hold up the heartbeats and
// acknowledgements queued behind them.
func (p *peer) fill(batch []outgoing) []outgoing {
	size := 0
	for _, o := range batch {
		size += entriesSize(&o.msg)
	}
	for len(batch) < p.t.cfg.MaxBatch && size < maxBatchBytes {
		select {
		case o := <-p.queue:
			batch = append(batch, o)
			size += entriesSize(&o.msg)
		default:
			return batch
		}
	}
	return batch
}

// maxBatchBytes is where fill stops adding messages to a batch.
const maxBatchBytes = 4 << 20

// entriesSize is about the bytes m's entries take on the wire: the bulk
// of an append, and cheaper to count than m's encoded size.
func entriesSize(m *pb.Message) int {
	n := 0
	for _, e := range m.Entries {
		n += len(e.Data) + 16 // term, index, type and their tags
	}
	return n
}

func (p *peer) lost(batch []outgoing) {
	for _, o := range batch {
		p.t.report(o.group, o.msg, true)
	}
}

// delivered reports the snapshots of a batch that went out.
func (p *peer) delivered(batch []outgoing) {
	for _, o := range batch {
		if o.msg.Type == pb.MsgSnap {
			p.t.report(o.group, o.msg, false)
		}
	}
}

// service is the receiving side of the node-to-node rpcs. It embeds no
// UnimplementedClusterServiceHandler, so that the compiler asks for every
// rpc cluster.proto declares.
type service struct {
	t *Transport
}

// Raft hands every message of every batch a peer of the release before
// the Raft stream sends on its rpc to the receiver, until the peer ends
// the rpc or this transport closes. Remove it with legacyStream.
func (s *service) Raft(ctx context.Context, stream *connect.ClientStream[clusterv1.RaftBatch]) (*connect.Response[clusterv1.RaftAck], error) {
	s.t.mu.RLock()
	r := s.t.receiver
	s.t.mu.RUnlock()
	if r == nil {
		return nil, connect.NewError(connect.CodeUnavailable, fmt.Errorf("node %d is starting; its raft groups are not open yet", s.t.cfg.NodeID))
	}
	if !s.t.track() {
		return nil, connect.NewError(connect.CodeUnavailable, fmt.Errorf("node %d is shutting down", s.t.cfg.NodeID))
	}
	defer s.t.wg.Done()
	done := make(chan error, 1)
	// Receive blocks on the stream; once this handler returns, the server
	// closes the stream and Receive returns, so the goroutine ends.
	s.t.wg.Go(func() { done <- receiveBatches(stream, r) })
	select {
	case err := <-done:
		if err != nil {
			return nil, err
		}
		return connect.NewResponse(&clusterv1.RaftAck{}), nil
	case <-s.t.stop:
		return nil, connect.NewError(connect.CodeUnavailable, fmt.Errorf("node %d is shutting down", s.t.cfg.NodeID))
	}
}

func receiveBatches(stream *connect.ClientStream[clusterv1.RaftBatch], r Receiver) error {
	for stream.Receive() {
		if err := deliverBatch(stream.Msg(), r); err != nil {
			return connect.NewError(connect.CodeInvalidArgument, err)
		}
	}
	return stream.Err()
}
