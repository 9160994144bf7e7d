package api

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"connectrpc.com/connect"
	"golang.org/x/net/http/httpguts"
	"golang.org/x/sync/semaphore"
	"google.golang.org/protobuf/proto"

	"herald/internal/node"
	"herald/internal/protocol"
	heraldv1 "herald/proto/herald/v1"
)

// Herald has two publish streams, which differ only in their wire: the
// custom one (protocol.PublishStreamPath, frames over a taken-over
// HTTP/1.1 connection, which the Go client speaks) and the PublishStream
// RPC (gRPC messages over HTTP/2, which any gRPC client speaks). The
// service's serveStream does for both what a stream does with its calls;
// a streamWire reads the calls and writes the answers in its own form.

// streamInFlightBytes bounds the request bytes a publish stream has read
// and not yet answered: beyond it the server stops reading, and the
// client's writes wait (TCP's or HTTP/2's flow control). One request may
// be as large as a Publish call's.
const streamInFlightBytes = MaxRequestBytes

// streamTokenRecheck is how often a publish stream checks its token again:
// a revoked or expired token stops publishing within it.
const streamTokenRecheck = time.Second

// streamWire is one publish stream's transport.
type streamWire interface {
	// read returns the next call. An error ends the reading: errEndOfCalls
	// when the client has sent its last call, a *connect.Error when the
	// stream must end with that status, anything else when the client
	// is gone.
	read() (streamCall, error)
	// answer queues the answer to call id: its events' ids, or err.
	answer(id uint64, ids []string, forwarded bool, err *connect.Error)
	// flush writes the queued answers until close, or until a write
	// fails, whose error it returns.
	flush() error
	// close queues the stream's last word, end (nil if it has none), and
	// makes flush return once everything queued is written.
	close(end *connect.Error)
	// wake makes a read in progress, and every later one, fail.
	wake()
	// more reports whether read would return a call without waiting for
	// the client: calls read together are published together.
	more() bool
}

// streamCall is a call read from a publish stream.
type streamCall struct {
	id uint64
	// size is the request's size in bytes, for streamInFlightBytes.
	size int
	// request decodes the request; it runs on a worker, off the reader,
	// once at most.
	request func() (*heraldv1.PublishRequest, *connect.Error)
	// refused, if set, is the call's answer: the wire could read its id
	// but not its request.
	refused *connect.Error
}

// weight is what the call counts against streamInFlightBytes.
func (c streamCall) weight() int64 { return int64(max(c.size, 1)) }

// errEndOfCalls is a streamWire's read error once the client has said it
// sends no more calls and waits for the answers (a gRPC half-close).
var errEndOfCalls = errors.New("the client sent its last call")

// serveStream reads calls from w until the client ends them or is gone,
// the server stops or the token (recheck) is no longer good, publishes
// each on a worker and answers it as it commits. It returns once every
// call read is answered, with the status that ended the stream, or nil
// when the client did. method names the stream in the metrics.
func (s *service) serveStream(ctx context.Context, method string, w streamWire, recheck func() *connect.Error) (end *connect.Error) {
	s.metrics.streams.Inc()
	defer s.metrics.streams.Dec()
	ctx, cancel := context.WithCancel(ctx)
	stopped := make(chan struct{})
	var helpers, calls, answered sync.WaitGroup
	helpers.Go(func() {
		if w.flush() != nil {
			// Answers can no longer be sent: end the stream rather than
			// publish calls nobody will hear of.
			w.wake()
		}
	})
	helpers.Go(func() {
		select {
		case <-s.stop:
			// Wake the reader; requests it has not read stay unread.
			w.wake()
		case <-stopped:
		}
	})
	// Calls run on workers that stay for the next call rather than on a
	// goroutine each: a new goroutine grows its stack to a publish's
	// depth every time (5% of the server's CPU in a profile).
	work := make(chan func())
	run := func(call func()) {
		select {
		case work <- call: // an idle worker takes it
		default:
			calls.Go(func() {
				call()
				for call := range work {
					call()
				}
			})
		}
	}
	defer func() {
		close(work)
		calls.Wait()
		w.close(end)
		close(stopped)
		helpers.Wait()
		cancel()
	}()

	inFlight := semaphore.NewWeighted(streamInFlightBytes)
	// Calls read together, up to maxStreamBatch, go to one worker, which
	// proposes them all before it waits for any: it then sleeps once for
	// them all, where a worker each would be woken once per call to
	// propose and once to answer, and on a busy machine each wake-up waits
	// for a processor (the scheduler's delay was 0.16 ms a call of a
	// 1 ms round trip in a trace of 11 shards at 61,000 calls a second).
	var batch []streamCall
	dispatch := func() {
		if len(batch) == 0 {
			return
		}
		calls := batch
		batch = nil
		answered.Add(len(calls))
		run(func() {
			s.serveCalls(ctx, method, w, calls, func(c streamCall) {
				inFlight.Release(c.weight())
				answered.Done()
			})
		})
	}
	checked := time.Now()
	for {
		if !w.more() {
			dispatch() // the next read may wait for the client
		}
		c, err := w.read()
		if err != nil || c.refused != nil || isStop(s.stop) {
			dispatch()
		}
		if err == nil && time.Since(checked) >= streamTokenRecheck {
			checked = time.Now()
			if refused := recheck(); refused != nil {
				// This call was read: it is answered, and the stream ends.
				dispatch()
				w.answer(c.id, nil, false, refused)
				answered.Wait()
				return connect.NewError(refused.Code(), errors.New(refused.Message()+"; the publish stream is closed, and the calls not answered were not read"))
			}
		}
		var ce *connect.Error
		switch {
		case err == nil && c.refused != nil:
			w.answer(c.id, nil, false, c.refused)
			continue
		case isStop(s.stop):
			if err == nil {
				// Read as the server began to stop, before the reader
				// was woken.
				w.answer(c.id, nil, false, connect.NewError(connect.CodeUnavailable,
					errors.New("herald is shutting down; the call was not published: send it to another node")))
			}
			answered.Wait() // every request read is answered first
			return connect.NewError(connect.CodeUnavailable,
				errors.New("herald is shutting down; the calls not answered were not read: send them to another node"))
		case errors.Is(err, errEndOfCalls):
			answered.Wait()
			return nil
		case errors.As(err, &ce):
			answered.Wait()
			return ce
		case err != nil:
			cancel() // the client is gone: nobody waits for the answers
			return nil
		}
		if !inFlight.TryAcquire(c.weight()) {
			// Answers free the bytes: those read must be on their way.
			dispatch()
			if err := inFlight.Acquire(ctx, c.weight()); err != nil {
				return nil
			}
		}
		batch = append(batch, c)
		if len(batch) >= maxStreamBatch {
			dispatch()
		}
	}
}

// streamReadBuffer is the size of a publish stream's read buffer: room
// for the calls a client writes at once, which are then published
// together (net/http's own buffer holds 4 KiB, three calls of a
// kilobyte).
const streamReadBuffer = 64 << 10

// maxStreamBatch bounds the calls one worker of a publish stream proposes
// before it waits.
const maxStreamBatch = 64

// streamWaitAlone is how long a worker waits for one call of its batch
// before the calls behind it get workers of their own: a call whose shard
// has no leader may wait for two election timeouts, and the calls behind
// it, to healthy shards, must not.
const streamWaitAlone = 20 * time.Millisecond

// serveCalls publishes calls, proposing them all first, and answers each
// once it commits; done is called after each answer. Calls are waited for
// in order, each by whichever goroutine takes it next: if the batch is
// not all answered within streamWaitAlone, the calls not taken yet get
// goroutines of their own, so that one slow call holds up the others for
// no longer than that. It returns once every call is answered.
func (s *service) serveCalls(ctx context.Context, method string, w streamWire, calls []streamCall, done func(streamCall)) {
	started := make([]startedCall, len(calls))
	for i, c := range calls {
		started[i] = s.startStreamCall(ctx, c)
	}
	var next atomic.Int64
	answer := func() {
		for i := int(next.Add(1) - 1); i < len(calls); i = int(next.Add(1) - 1) {
			ids, forwarded, ce := s.finishStreamCall(method, started[i])
			w.answer(calls[i].id, ids, forwarded, ce)
			done(calls[i])
		}
	}
	if len(calls) == 1 {
		answer()
		return
	}
	var (
		mu      sync.Mutex
		ended   bool
		helpers sync.WaitGroup
	)
	spread := time.AfterFunc(streamWaitAlone, func() {
		mu.Lock()
		defer mu.Unlock()
		if ended {
			return
		}
		for range len(calls) - min(int(next.Load()), len(calls)) {
			helpers.Go(answer)
		}
	})
	answer()
	mu.Lock()
	ended = true // no helper starts from now on
	mu.Unlock()
	spread.Stop()
	helpers.Wait()
}

// A startedCall is a call of a publish stream whose events were proposed.
type startedCall struct {
	pending      *pendingPublish // nil if the call was refused
	refused      *connect.Error
	wasForwarded func() bool
}

// startStreamCall decodes a call of a publish stream and proposes its
// events.
func (s *service) startStreamCall(ctx context.Context, c streamCall) startedCall {
	req, ce := c.request()
	if ce != nil {
		return startedCall{refused: ce}
	}
	ctx, wasForwarded := node.ForwardReport(ctx)
	return startedCall{pending: s.startPublish(ctx, req), wasForwarded: wasForwarded}
}

// finishStreamCall waits for a started call and returns its answer: its
// events' ids, or the error Publish would have returned.
func (s *service) finishStreamCall(method string, sc startedCall) (ids []string, forwarded bool, _ *connect.Error) {
	if sc.refused != nil {
		return nil, false, sc.refused
	}
	ids, err := sc.pending.wait()
	if err != nil {
		var ce *connect.Error
		if !errors.As(err, &ce) {
			ce = connect.NewError(connect.CodeUnknown, err)
		}
		s.metrics.streamCall(method, time.Since(sc.pending.start), ce.Code().String())
		return nil, sc.wasForwarded(), ce
	}
	s.metrics.streamCall(method, time.Since(sc.pending.start), "ok")
	return ids, sc.wasForwarded(), nil
}

// publishStreams serves the custom publish stream
// (protocol.PublishStreamPath): Publish calls read from one connection and
// answered on it as they commit, so that a call costs a frame instead of
// an HTTP request.
type publishStreams struct {
	svc *service
}

func (p *publishStreams) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet || !httpguts.HeaderValuesContainsToken(r.Header.Values("Connection"), "upgrade") ||
		!strings.EqualFold(r.Header.Get("Upgrade"), protocol.PublishStreamUpgrade) {
		w.Header().Set("Upgrade", protocol.PublishStreamUpgrade)
		http.Error(w, fmt.Sprintf("%s is the publish stream: open it with a GET carrying \"Connection: Upgrade\" and \"Upgrade: %s\" over HTTP/1.1 (the Go client does, with client.WithPublishStream); other clients have the PublishStream RPC",
			protocol.PublishStreamPath, protocol.PublishStreamUpgrade), http.StatusUpgradeRequired)
		return
	}
	conn, rw, err := http.NewResponseController(w).Hijack()
	if err != nil {
		// HTTP/2 cannot switch protocols.
		http.Error(w, "the publish stream needs an HTTP/1.1 connection; this one cannot be taken over: "+err.Error(), http.StatusHTTPVersionNotSupported)
		return
	}
	defer conn.Close()
	rw.WriteString("HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: " + protocol.PublishStreamUpgrade + "\r\n\r\n")
	if err := rw.Flush(); err != nil {
		return
	}
	fw := &frameWire{conn: conn, r: bufio.NewReaderSize(rw.Reader, streamReadBuffer), out: protocol.NewWriter(writeAnswers(conn))}
	// Not the request's context: net/http cancels it when a read of the
	// taken-over connection fails, and a stopping stream's reads fail on
	// purpose while its calls finish.
	p.svc.serveStream(context.WithoutCancel(r.Context()), protocol.PublishStreamPath, fw, tokenRecheck(r.Context()))
}

// frameWire is the custom stream's wire (see package protocol): frames
// over a taken-over connection. Its last word is a response with id 0.
type frameWire struct {
	conn net.Conn
	r    *bufio.Reader
	out  *protocol.Writer[byte]
	// bodies holds frame bodies already decoded, for frames to be read
	// into: a call's body lives only until its request is decoded (which
	// copies what it keeps), and a body a call would allocate was a sixth
	// of what a publish stream's server allocated per event.
	bodies sync.Pool
}

// maxPooledBody bounds the frame bodies kept for reuse, so that a rare
// large call does not pin its memory.
const maxPooledBody = 64 << 10

func (f *frameWire) read() (streamCall, error) {
	buf, _ := f.bodies.Get().(*[]byte)
	if buf == nil {
		buf = new([]byte)
	}
	id, body, err := protocol.ReadFrame(f.r, MaxRequestBytes, *buf)
	if errors.Is(err, protocol.ErrFrameTooLarge) {
		// invalid_argument, as a request over the limit is (limits.go):
		// resending it cannot help.
		return streamCall{id: id, refused: connect.NewError(connect.CodeInvalidArgument,
			fmt.Errorf("publish request %v; nothing was published: send fewer or smaller events per call", err))}, nil
	}
	if err != nil {
		return streamCall{}, err
	}
	return streamCall{id: id, size: len(body), request: func() (*heraldv1.PublishRequest, *connect.Error) {
		var req heraldv1.PublishRequest
		err := proto.Unmarshal(body, &req)
		if cap(body) <= maxPooledBody {
			*buf = body[:0]
			f.bodies.Put(buf)
		}
		if err != nil {
			return nil, connect.NewError(connect.CodeInvalidArgument, errors.New("publish request is not a herald.v1.PublishRequest: "+err.Error()))
		}
		return &req, nil
	}}, nil
}

func (f *frameWire) answer(id uint64, ids []string, forwarded bool, ce *connect.Error) {
	var flags uint64
	if forwarded {
		flags |= protocol.ResponseForwarded
	}
	if ce != nil {
		f.out.Send(protocol.AppendResponse(nil, id, uint64(ce.Code()), flags, []byte(ce.Message()))...)
		return
	}
	payload, err := proto.Marshal(&heraldv1.PublishResponse{Ids: ids})
	if err != nil {
		f.out.Send(protocol.AppendResponse(nil, id, uint64(connect.CodeInternal), flags, []byte("encode the response: "+err.Error()))...)
		return
	}
	f.out.Send(protocol.AppendResponse(nil, id, protocol.CodeOK, flags, payload)...)
}

func (f *frameWire) flush() error { return f.out.Run() }

func (f *frameWire) close(end *connect.Error) {
	if end != nil {
		f.out.Send(protocol.AppendResponse(nil, 0, uint64(end.Code()), 0, []byte(end.Message()))...)
	}
	f.out.Close()
}

func (f *frameWire) wake() { f.conn.SetReadDeadline(time.Now()) }

func (f *frameWire) more() bool { return protocol.FrameBuffered(f.r) }

// PublishStream serves the PublishStream RPC: the publish stream for gRPC
// clients.
func (s *service) PublishStream(ctx context.Context, stream *connect.BidiStream[heraldv1.PublishStreamRequest, heraldv1.PublishStreamResponse]) error {
	w := &rpcWire{stream: stream, resp: streamResponseOf(ctx)}
	send := func(answers []*heraldv1.PublishStreamResponse) error {
		for _, a := range answers {
			if err := stream.Send(a); err != nil {
				return err
			}
		}
		return nil
	}
	w.out = protocol.NewWriter(func(answers []*heraldv1.PublishStreamResponse) error {
		if w.resp == nil {
			return send(answers)
		}
		return w.resp.send(func() error { return send(answers) })
	})
	if end := s.serveStream(ctx, stream.Spec().Procedure, w, tokenRecheck(ctx)); end != nil {
		return end
	}
	return nil
}

// rpcWire is the PublishStream RPC's wire. Its last word is the status
// the RPC returns.
type rpcWire struct {
	stream *connect.BidiStream[heraldv1.PublishStreamRequest, heraldv1.PublishStreamResponse]
	out    *protocol.Writer[*heraldv1.PublishStreamResponse]
	resp   *streamResponse // nil: not served through streamResponses
}

func (w *rpcWire) read() (streamCall, error) {
	msg, err := w.stream.Receive()
	var ce *connect.Error
	switch {
	case errors.Is(err, io.EOF):
		return streamCall{}, errEndOfCalls
	case errors.As(err, &ce) && ce.Code() == connect.CodeResourceExhausted:
		// A request over WithReadMaxBytes: skipped unread, so its
		// sequence is unknown, and the stream ends. invalid_argument, as
		// a Publish over the limit is (limits.go).
		return streamCall{}, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf(
			"%s; the publish stream is closed, and the calls not answered were not read: send fewer or smaller events per call", ce.Message()))
	case err != nil:
		return streamCall{}, err
	}
	req := msg.GetRequest()
	if req == nil {
		req = &heraldv1.PublishRequest{} // refused for want of a topic, as Publish would
	}
	return streamCall{id: msg.GetSequence(), size: proto.Size(msg), request: func() (*heraldv1.PublishRequest, *connect.Error) {
		return req, nil
	}}, nil
}

func (w *rpcWire) answer(id uint64, ids []string, forwarded bool, ce *connect.Error) {
	a := &heraldv1.PublishStreamResponse{Sequence: id, Forwarded: forwarded}
	if ce != nil {
		a.Result = &heraldv1.PublishStreamResponse_Error{Error: &heraldv1.PublishStreamError{Code: uint32(ce.Code()), Message: ce.Message()}}
	} else {
		a.Result = &heraldv1.PublishStreamResponse_Response{Response: &heraldv1.PublishResponse{Ids: ids}}
	}
	w.out.Send(a)
}

func (w *rpcWire) flush() error { return w.out.Run() }

func (w *rpcWire) close(*connect.Error) { w.out.Close() }

// more is false: connect's stream does not say what it has buffered, so
// each call is published on its own.
func (w *rpcWire) more() bool { return false }

func (w *rpcWire) wake() {
	if w.resp != nil {
		w.resp.wake()
	}
}

type streamResponseKey struct{}

// streamResponses gives the requests to h a streamResponse in place of
// their ResponseWriter, found in their context by streamResponseOf.
func streamResponses(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		sr := &streamResponse{ResponseWriter: w, rc: http.NewResponseController(w)}
		h.ServeHTTP(sr, r.WithContext(context.WithValue(r.Context(), streamResponseKey{}, sr)))
	})
}

// streamResponseOf returns the streamResponse of the request of ctx, or
// nil.
func streamResponseOf(ctx context.Context) *streamResponse {
	sr, _ := ctx.Value(streamResponseKey{}).(*streamResponse)
	return sr
}

// streamResponse is the response of a PublishStream RPC, which the
// stream's writer and reader control: gRPC's Receive and Send have no
// deadlines of their own, a stopping stream must stop reading while it
// answers, and connect flushes every message it sends, which over HTTP/2
// is a hand-off to the connection's goroutine each: the answers one
// commit gives should share one.
type streamResponse struct {
	http.ResponseWriter
	rc *http.ResponseController
	// held makes Flush do nothing; only the stream's writer sets it, and
	// only its Sends flush.
	held bool
}

func (s *streamResponse) Flush() {
	if !s.held {
		s.rc.Flush()
	}
}

func (s *streamResponse) Unwrap() http.ResponseWriter { return s.ResponseWriter }

// send sends with send, within streamWriteTimeout, and flushes once.
func (s *streamResponse) send(send func() error) error {
	s.rc.SetWriteDeadline(time.Now().Add(streamWriteTimeout))
	s.held = true
	err := send()
	s.held = false
	if err != nil {
		return err
	}
	return s.rc.Flush()
}

// wake makes a read of the request's body in progress, and every later
// one, fail.
func (s *streamResponse) wake() { s.rc.SetReadDeadline(time.Now()) }

func isStop(stop <-chan struct{}) bool {
	select {
	case <-stop:
		return true
	default:
		return false
	}
}

// streamWriteTimeout bounds one write of a publish stream's answers: a
// client that stops reading for this long loses its stream rather than
// holding the server's writer (and its shutdown) forever.
const streamWriteTimeout = 30 * time.Second

// writeAnswers writes to conn with streamWriteTimeout.
func writeAnswers(conn net.Conn) func([]byte) error {
	return func(b []byte) error {
		conn.SetWriteDeadline(time.Now().Add(streamWriteTimeout))
		_, err := conn.Write(b)
		return err
	}
}
