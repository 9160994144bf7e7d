package client

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"

	"herald/internal/protocol"
	heraldv1 "herald/proto/herald/v1"
	"herald/proto/herald/v1/heraldv1connect"
)

// WithPublishStream makes Publish send its calls over a publish stream:
// one long-lived connection to the node on which any number of calls are
// in flight at once, each answered on its own as it commits. An HTTP
// request per call costs the client and the server several times what
// storing an event does, so for many concurrent small publishes the
// stream is much cheaper; a call's result and errors are the same.
//
// The stream is opened on the first Publish and again after it breaks.
// A call in flight when the connection broke fails with
// connect.CodeUnavailable and its outcome is unknown (WithPublishRetries
// resends it safely); calls the node had not read when it shut down fail
// with connect.CodeUnavailable and were not published.
//
// The stream speaks HTTP/1.1 to the node (with WithTLSConfig for https),
// not through WithHTTPClient's client; with WithPublishStreamRPC it is
// the PublishStream RPC over HTTP/2 instead. With WithLeaderRouting,
// each call goes over a stream to the node leading its events' shards.
func WithPublishStream() Option {
	return func(c *config) { c.stream = true }
}

// WithPublishStreamRPC makes WithPublishStream's stream the PublishStream
// RPC, gRPC over HTTP/2 (unencrypted for an http:// node), which any
// gRPC client can call, rather than herald's own protocol over HTTP/1.1.
func WithPublishStreamRPC() Option {
	return func(c *config) { c.stream, c.streamRPC = true, true }
}

// publishStream is the Client's side of the publish stream: the current
// connection, opened when first needed.
type publishStream struct {
	url   string // the node's
	token string
	rpc   bool         // WithPublishStreamRPC
	hc    *http.Client // HTTP/1.1 only for a protocol switch, HTTP/2 only for the RPC

	mu   sync.Mutex
	conn *streamConn // nil or broken: open a new one
}

func newPublishStream(baseURL, token string, tc *tls.Config, rpc bool) *publishStream {
	var p http.Protocols
	if rpc {
		p.SetHTTP2(true)
		p.SetUnencryptedHTTP2(true)
	} else {
		p.SetHTTP1(true)
	}
	if tc != nil {
		// Only HTTP/1.1 can switch protocols, and a server offered h2
		// by ALPN takes it: offer the one protocol, on a copy, since tc
		// may be shared with (and amended by) another transport.
		tc = tc.Clone()
		tc.NextProtos = []string{"http/1.1"}
		if rpc {
			tc.NextProtos = []string{"h2"}
		}
	}
	return &publishStream{
		url:   strings.TrimSuffix(baseURL, "/"),
		token: token,
		rpc:   rpc,
		hc: &http.Client{Transport: &http.Transport{
			Protocols:       &p,
			TLSClientConfig: tc,
			Proxy:           http.ProxyFromEnvironment,
			DialContext:     (&net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		}},
	}
}

// publish sends req on the stream and waits for its answer. forwarded
// says whether the node passed some of it to another node.
func (s *publishStream) publish(ctx context.Context, req *heraldv1.PublishRequest) (ids []string, forwarded bool, err error) {
	c, err := s.connection(ctx)
	if err != nil {
		return nil, false, err
	}
	id, answer, err := c.send(req)
	if err != nil {
		return nil, false, err
	}
	select {
	case a := <-answer:
		if a.err == nil && len(a.ids) != len(req.Events) {
			a.err = connect.NewError(connect.CodeInternal, errShortIDs)
		}
		if a.err != nil {
			return nil, a.forwarded, a.err
		}
		return a.ids, a.forwarded, nil
	case <-ctx.Done():
		c.forget(id)
		return nil, false, connect.NewError(connect.CodeOf(ctx.Err()), fmt.Errorf("publish stream: %w; the call's outcome is unknown", ctx.Err()))
	}
}

// connection returns the open connection, opening one if there is none.
func (s *publishStream) connection(ctx context.Context) (*streamConn, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.conn != nil && !s.conn.broken() {
		return s.conn, nil
	}
	if s.conn != nil {
		s.conn.wg.Wait() // its goroutines are ending: it broke
	}
	var w streamWire
	var err error
	if s.rpc {
		w = s.openRPC()
	} else {
		w, err = s.open(ctx)
	}
	if err != nil {
		return nil, err
	}
	s.conn = newStreamConn(w)
	return s.conn, nil
}

// openRPC opens a PublishStream call. Its refusal, if the node refuses
// it, is the answer to the calls sent on it.
func (s *publishStream) openRPC() *rpcWire {
	ctx, cancel := context.WithCancel(context.Background())
	svc := heraldv1connect.NewHeraldServiceClient(coalescingClient{next: s.hc}, s.url, connect.WithGRPC())
	stream := svc.PublishStream(ctx)
	if s.token != "" {
		stream.RequestHeader().Set("Authorization", "Bearer "+s.token)
	}
	w := &rpcWire{stream: stream, cancel: cancel}
	w.out = protocol.NewWriter(func(calls []*heraldv1.PublishStreamRequest) error {
		for _, c := range calls {
			if err := stream.Send(c); err != nil {
				return err
			}
		}
		return nil
	})
	return w
}

// open switches a new HTTP/1.1 connection to the publish stream.
func (s *publishStream) open(ctx context.Context) (*frameWire, error) {
	// The connection outlives the call that opens it: ctx may end the
	// opening, not the connection.
	octx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	stop := context.AfterFunc(ctx, cancel)
	defer stop()
	req, err := http.NewRequestWithContext(octx, http.MethodGet, s.url+protocol.PublishStreamPath, nil)
	if err != nil {
		return nil, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("publish stream: %w", err))
	}
	req.Header.Set("Connection", "Upgrade")
	req.Header.Set("Upgrade", protocol.PublishStreamUpgrade)
	if s.token != "" {
		req.Header.Set("Authorization", "Bearer "+s.token)
	}
	resp, err := s.hc.Do(req)
	if err != nil {
		return nil, connect.NewError(connect.CodeUnavailable, fmt.Errorf("open the publish stream: %w", err))
	}
	if resp.StatusCode != http.StatusSwitchingProtocols {
		defer resp.Body.Close()
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<10))
		return nil, connect.NewError(codeOfStatus(resp.StatusCode),
			fmt.Errorf("open the publish stream: %s: %s", resp.Status, strings.TrimSpace(string(msg))))
	}
	rwc, ok := resp.Body.(io.ReadWriteCloser)
	if !ok {
		resp.Body.Close()
		return nil, connect.NewError(connect.CodeInternal, errors.New("open the publish stream: the switched connection cannot be written"))
	}
	return &frameWire{rwc: rwc, r: bufio.NewReaderSize(rwc, 64<<10),
		out: protocol.NewWriter(func(b []byte) error { _, err := rwc.Write(b); return err })}, nil
}

// codeOfStatus maps the HTTP status refusing a stream to the code a
// Connect call refused so would have had.
func codeOfStatus(status int) connect.Code {
	switch status {
	case http.StatusUnauthorized:
		return connect.CodeUnauthenticated
	case http.StatusForbidden:
		return connect.CodePermissionDenied
	case http.StatusNotFound, http.StatusUpgradeRequired, http.StatusHTTPVersionNotSupported:
		return connect.CodeUnimplemented
	case http.StatusServiceUnavailable, http.StatusBadGateway, http.StatusGatewayTimeout:
		return connect.CodeUnavailable
	case http.StatusTooManyRequests:
		return connect.CodeResourceExhausted
	}
	return connect.CodeUnknown
}

// close closes the connection, failing the calls still waiting.
func (s *publishStream) close() {
	s.mu.Lock()
	c := s.conn
	s.conn = nil
	s.mu.Unlock()
	if c != nil {
		c.fail(connect.NewError(connect.CodeCanceled, errors.New("publish stream: the client was closed; the call's outcome is unknown")))
		c.wg.Wait()
	}
}

// answer is the result of one call on the stream.
type answer struct {
	ids       []string
	forwarded bool // protocol.ResponseForwarded
	err       error
}

// streamWire is one publish-stream connection's transport: herald's own
// frames, or the PublishStream RPC's messages.
type streamWire interface {
	// queue queues call id for flush.
	queue(id uint64, req *heraldv1.PublishRequest) error
	// flush writes the queued calls until close, or until a write fails,
	// whose error it returns.
	flush() error
	// next reads the next answer. Its error breaks the connection, and
	// every call waiting fails with it.
	next() (uint64, answer, error)
	// close ends the connection: flush returns, and next fails.
	close()
}

// streamConn is one publish-stream connection: its wire sends the calls
// queued since its last write in one write, and a reader goroutine hands
// each answer to its call.
type streamConn struct {
	wire streamWire
	wg   sync.WaitGroup // the writer and the reader

	mu      sync.Mutex
	next    uint64
	pending map[uint64]chan answer
	err     error // set once the connection broke; every later call fails with it
}

func newStreamConn(w streamWire) *streamConn {
	c := &streamConn{wire: w, pending: make(map[uint64]chan answer)}
	c.wg.Go(c.write)
	c.wg.Go(c.read)
	return c
}

func (c *streamConn) broken() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err != nil
}

// send queues a request and returns its id and where its answer comes.
func (c *streamConn) send(req *heraldv1.PublishRequest) (uint64, <-chan answer, error) {
	ch := make(chan answer, 1)
	c.mu.Lock()
	if c.err != nil {
		err := c.err
		c.mu.Unlock()
		return 0, nil, err
	}
	c.next++
	id := c.next
	c.pending[id] = ch
	c.mu.Unlock()
	if err := c.wire.queue(id, req); err != nil {
		c.forget(id)
		return 0, nil, err
	}
	return id, ch, nil
}

// forget drops a call whose caller stopped waiting.
func (c *streamConn) forget(id uint64) {
	c.mu.Lock()
	delete(c.pending, id)
	c.mu.Unlock()
}

func (c *streamConn) write() {
	if err := c.wire.flush(); err != nil {
		c.fail(connect.NewError(connect.CodeUnavailable, fmt.Errorf("publish stream: write: %w; the call's outcome is unknown", err)))
	}
}

func (c *streamConn) read() {
	for {
		id, a, err := c.wire.next()
		if err != nil {
			c.fail(err)
			return
		}
		c.mu.Lock()
		ch := c.pending[id]
		delete(c.pending, id)
		c.mu.Unlock()
		if ch != nil {
			ch <- a
		}
	}
}

// fail breaks the connection: every waiting call gets err, and so does
// every later one, until the stream opens a new connection.
func (c *streamConn) fail(err error) {
	c.mu.Lock()
	if c.err != nil {
		c.mu.Unlock()
		return
	}
	c.err = err
	pending := c.pending
	c.pending = nil
	c.mu.Unlock()
	c.wire.close()
	for _, ch := range pending {
		ch <- answer{err: err}
	}
}

// frameWire is herald's own publish stream (see package protocol) over
// a switched HTTP/1.1 connection.
type frameWire struct {
	rwc io.ReadWriteCloser
	r   *bufio.Reader
	out *protocol.Writer[byte]
	buf []byte // the last frame read
}

func (f *frameWire) queue(id uint64, req *heraldv1.PublishRequest) error {
	body, err := proto.Marshal(req)
	if err != nil {
		return fmt.Errorf("encode publish request: %w", err)
	}
	f.out.Send(protocol.AppendFrame(nil, id, body)...)
	return nil
}

func (f *frameWire) flush() error { return f.out.Run() }

func (f *frameWire) close() {
	f.rwc.Close()
	f.out.Close()
}

func (f *frameWire) next() (uint64, answer, error) {
	id, body, err := protocol.ReadFrame(f.r, 64<<20, f.buf)
	if err != nil {
		if errors.Is(err, io.EOF) {
			err = errors.New("the node closed the connection")
		}
		return 0, answer{}, connect.NewError(connect.CodeUnavailable, fmt.Errorf("publish stream: %w; the call's outcome is unknown", err))
	}
	f.buf = body
	code, flags, payload, err := protocol.ParseResponse(body)
	if err != nil {
		return 0, answer{}, connect.NewError(connect.CodeInternal, fmt.Errorf("publish stream: %w; the call's outcome is unknown", err))
	}
	if id == 0 {
		// The node stops reading: what it has not answered, it never read.
		return 0, answer{}, connect.NewError(connect.Code(code), fmt.Errorf("%s (the call was not published)", payload))
	}
	a := answer{forwarded: flags&protocol.ResponseForwarded != 0}
	if code != protocol.CodeOK {
		a.err = connect.NewError(connect.Code(code), errors.New(string(payload)))
		return id, a, nil
	}
	var resp heraldv1.PublishResponse
	if err := proto.Unmarshal(payload, &resp); err != nil {
		a.err = connect.NewError(connect.CodeInternal, fmt.Errorf("publish stream: decode the answer: %w; the call's outcome is unknown", err))
	}
	a.ids = resp.GetIds()
	return id, a, nil
}

// rpcWire is the PublishStream RPC.
type rpcWire struct {
	stream *connect.BidiStreamForClient[heraldv1.PublishStreamRequest, heraldv1.PublishStreamResponse]
	out    *protocol.Writer[*heraldv1.PublishStreamRequest]
	cancel context.CancelFunc // ends the call
}

func (w *rpcWire) queue(id uint64, req *heraldv1.PublishRequest) error {
	w.out.Send(&heraldv1.PublishStreamRequest{Sequence: id, Request: req})
	return nil
}

func (w *rpcWire) flush() error {
	err := w.out.Run()
	// Here, not in close: CloseRequest may not run beside Send. The
	// transport notices close's cancelling only once the request's body
	// ends.
	w.stream.CloseRequest()
	if errors.Is(err, io.EOF) {
		// The node ended the stream: Receive returns its status.
		return nil
	}
	return err
}

func (w *rpcWire) close() {
	w.cancel()
	w.out.Close()
}

func (w *rpcWire) next() (uint64, answer, error) {
	msg, err := w.stream.Receive()
	if err != nil {
		w.stream.CloseResponse()
		// The node ends the stream with a status when it stops reading
		// (shutting down, a revoked token): what it has not answered, it
		// never read. A broken connection leaves the outcome unknown.
		var ce *connect.Error
		if errors.As(err, &ce) {
			return 0, answer{}, connect.NewError(ce.Code(), errors.New("publish stream: "+ce.Message()))
		}
		if errors.Is(err, io.EOF) {
			err = errors.New("the node ended the stream")
		}
		return 0, answer{}, connect.NewError(connect.CodeUnavailable, fmt.Errorf("publish stream: %w; the call's outcome is unknown", err))
	}
	a := answer{forwarded: msg.GetForwarded()}
	if e := msg.GetError(); e != nil {
		a.err = connect.NewError(connect.Code(e.GetCode()), errors.New(e.GetMessage()))
	} else {
		a.ids = msg.GetResponse().GetIds()
	}
	return msg.GetSequence(), a, nil
}
