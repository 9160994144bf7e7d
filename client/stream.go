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
// not through WithHTTPClient's client. With WithLeaderRouting, each call
// goes over a stream to the node leading its events' shards.
func WithPublishStream() Option {
	return func(c *config) { c.stream = true }
}

// publishStream is the Client's side of the publish stream: the current
// connection, opened when first needed.
type publishStream struct {
	url   string
	token string
	hc    *http.Client // HTTP/1.1 only: a protocol switch needs it

	mu   sync.Mutex
	conn *streamConn // nil or broken: open a new one
}

func newPublishStream(baseURL, token string, tc *tls.Config) *publishStream {
	var p http.Protocols
	p.SetHTTP1(true)
	if tc != nil {
		// Only HTTP/1.1 can switch protocols, and a server offered h2
		// by ALPN takes it: offer HTTP/1.1 alone, on a copy, since tc may
		// be shared with (and amended by) an HTTP/2 transport.
		tc = tc.Clone()
		tc.NextProtos = []string{"http/1.1"}
	}
	return &publishStream{
		url:   strings.TrimSuffix(baseURL, "/") + protocol.PublishStreamPath,
		token: token,
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
	body, err := proto.Marshal(req)
	if err != nil {
		return nil, false, fmt.Errorf("encode publish request: %w", err)
	}
	c, err := s.connection(ctx)
	if err != nil {
		return nil, false, err
	}
	id, answer, err := c.send(body)
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
	c, err := s.open(ctx)
	if err != nil {
		return nil, err
	}
	s.conn = c
	return c, nil
}

// open switches a new HTTP/1.1 connection to the publish stream.
func (s *publishStream) open(ctx context.Context) (*streamConn, error) {
	// The connection outlives the call that opens it: ctx may end the
	// opening, not the connection.
	octx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	stop := context.AfterFunc(ctx, cancel)
	defer stop()
	req, err := http.NewRequestWithContext(octx, http.MethodGet, s.url, nil)
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
	return newStreamConn(rwc), nil
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

// streamConn is one publish-stream connection: a protocol.Writer sends
// the requests queued since its last write in one write, and a reader
// goroutine hands each answer to its call.
type streamConn struct {
	rwc io.ReadWriteCloser
	out *protocol.Writer[byte]
	wg  sync.WaitGroup // the writer and the reader

	mu      sync.Mutex
	next    uint64
	pending map[uint64]chan answer
	err     error // set once the connection broke; every later call fails with it
}

func newStreamConn(rwc io.ReadWriteCloser) *streamConn {
	c := &streamConn{rwc: rwc, pending: make(map[uint64]chan answer)}
	c.out = protocol.NewWriter(func(b []byte) error { _, err := rwc.Write(b); return err })
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
func (c *streamConn) send(body []byte) (uint64, <-chan answer, error) {
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
	c.out.Send(protocol.AppendFrame(nil, id, body)...)
	return id, ch, nil
}

// forget drops a call whose caller stopped waiting.
func (c *streamConn) forget(id uint64) {
	c.mu.Lock()
	delete(c.pending, id)
	c.mu.Unlock()
}

func (c *streamConn) write() {
	if err := c.out.Run(); err != nil {
		c.fail(connect.NewError(connect.CodeUnavailable, fmt.Errorf("publish stream: write: %w; the call's outcome is unknown", err)))
	}
}

func (c *streamConn) read() {
	r := bufio.NewReaderSize(c.rwc, 64<<10)
	var buf []byte
	for {
		id, body, err := protocol.ReadFrame(r, 64<<20, buf)
		if err != nil {
			if errors.Is(err, io.EOF) {
				err = errors.New("the node closed the connection")
			}
			c.fail(connect.NewError(connect.CodeUnavailable, fmt.Errorf("publish stream: %w; the call's outcome is unknown", err)))
			return
		}
		buf = body
		code, flags, payload, err := protocol.ParseResponse(body)
		if err != nil {
			c.fail(connect.NewError(connect.CodeInternal, fmt.Errorf("publish stream: %w; the call's outcome is unknown", err)))
			return
		}
		if id == 0 {
			// The node stops reading: what it has not answered, it never read.
			c.fail(connect.NewError(connect.Code(code), fmt.Errorf("%s (the call was not published)", payload)))
			return
		}
		a := answer{forwarded: flags&protocol.ResponseForwarded != 0}
		if code != protocol.CodeOK {
			a.err = connect.NewError(connect.Code(code), errors.New(string(payload)))
		} else {
			var resp heraldv1.PublishResponse
			if err := proto.Unmarshal(payload, &resp); err != nil {
				a.err = connect.NewError(connect.CodeInternal, fmt.Errorf("publish stream: decode the answer: %w; the call's outcome is unknown", err))
			}
			a.ids = resp.GetIds()
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
	c.rwc.Close()
	c.out.Close()
	for _, ch := range pending {
		ch <- answer{err: err}
	}
}
