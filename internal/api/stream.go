package api

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"connectrpc.com/connect"
	"golang.org/x/sync/semaphore"
	"google.golang.org/protobuf/proto"

	"herald/internal/node"
	"herald/internal/protocol"
	heraldv1 "herald/proto/herald/v1"
)

// streamInFlightBytes bounds the request bytes a publish stream has read
// and not yet answered: beyond it the server stops reading, and the
// client's writes wait (TCP's own backpressure). One request may be as
// large as a Publish call's.
const streamInFlightBytes = MaxRequestBytes

// publishStreams serves the publish stream (protocol.PublishStreamPath):
// Publish calls read from one connection and answered on it as they
// commit, so that a call costs a frame instead of an HTTP request.
type publishStreams struct {
	svc  *service
	stop <-chan struct{} // Options.Stop
	// recheck checks the stream's token again (the authorizer checked it
	// when the stream opened): one revoked or expired since ends it.
	recheck func(*http.Request) *connect.Error
}

// streamTokenRecheck is how often a publish stream checks its token again:
// a revoked or expired token stops publishing within it.
const streamTokenRecheck = time.Second

func (p *publishStreams) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet || !headerHasToken(r.Header, "Connection", "upgrade") ||
		!strings.EqualFold(r.Header.Get("Upgrade"), protocol.PublishStreamUpgrade) {
		w.Header().Set("Upgrade", protocol.PublishStreamUpgrade)
		http.Error(w, fmt.Sprintf("%s is the publish stream: open it with a GET carrying \"Connection: Upgrade\" and \"Upgrade: %s\" over HTTP/1.1 (the Go client does, with client.WithPublishStream)",
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
	// Not the request's context: net/http cancels it when a read of the
	// taken-over connection fails, and a stopping stream's reads fail on
	// purpose while its calls finish.
	p.serve(context.WithoutCancel(r.Context()), r, conn, rw.Reader)
}

// serve reads requests from conn until the client closes it, the server
// stops or the token is no longer good, publishes each on a worker and
// writes the answers as they come.
func (p *publishStreams) serve(ctx context.Context, req *http.Request, conn net.Conn, r *bufio.Reader) {
	p.svc.metrics.streams.Inc()
	defer p.svc.metrics.streams.Dec()
	ctx, cancel := context.WithCancel(ctx)
	out := protocol.NewWriter(writeAnswers(conn))
	stopped := make(chan struct{})
	var helpers, calls, answered sync.WaitGroup
	helpers.Go(func() {
		if out.Run() != nil {
			// Answers can no longer be sent: end the stream rather than
			// publish calls nobody will hear of.
			conn.Close()
		}
	})
	helpers.Go(func() {
		select {
		case <-p.stop:
			// Wake the reader; requests it has not read stay unread.
			conn.SetReadDeadline(time.Now())
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
		out.Close()
		close(stopped)
		helpers.Wait()
		cancel()
	}()

	inFlight := semaphore.NewWeighted(streamInFlightBytes)
	checked := time.Now()
	for {
		id, body, err := protocol.ReadFrame(r, MaxRequestBytes, nil)
		if err == nil && time.Since(checked) >= streamTokenRecheck {
			checked = time.Now()
			if refused := p.recheck(req); refused != nil {
				// This call was read: it is answered, and the stream ends.
				out.Send(protocol.AppendResponse(nil, id, uint64(refused.Code()), 0, []byte(refused.Message())))
				answered.Wait()
				out.Send(protocol.AppendResponse(nil, 0, uint64(refused.Code()), 0,
					[]byte(refused.Message()+"; the publish stream is closed, and the calls not answered were not read")))
				return
			}
		}
		switch {
		case errors.Is(err, protocol.ErrFrameTooLarge):
			// invalid_argument, as a request over the limit is (limits.go):
			// resending it cannot help.
			out.Send(protocol.AppendResponse(nil, id, uint64(connect.CodeInvalidArgument), 0,
				[]byte(fmt.Sprintf("publish request %v; nothing was published: send fewer or smaller events per call", err))))
			continue
		case err != nil:
			if isStop(p.stop) {
				answered.Wait() // every request read is answered first
				out.Send(protocol.AppendResponse(nil, 0, uint64(connect.CodeUnavailable), 0,
					[]byte("herald is shutting down; the calls not answered were not read: send them to another node")))
			} else {
				cancel() // the client is gone: nobody waits for the answers
			}
			return
		}
		weight := int64(max(len(body), 1))
		if err := inFlight.Acquire(ctx, weight); err != nil {
			return
		}
		answered.Add(1)
		run(func() {
			defer answered.Done()
			defer inFlight.Release(weight)
			out.Send(p.call(ctx, id, body))
		})
	}
}

// call publishes one request and returns its response frame.
func (p *publishStreams) call(ctx context.Context, id uint64, body []byte) []byte {
	var req heraldv1.PublishRequest
	if err := proto.Unmarshal(body, &req); err != nil {
		return protocol.AppendResponse(nil, id, uint64(connect.CodeInvalidArgument), 0,
			[]byte("publish request is not a herald.v1.PublishRequest: "+err.Error()))
	}
	start := time.Now()
	ctx, forwarded := node.ForwardReport(ctx)
	ids, err := p.svc.publish(ctx, &req)
	var flags uint64
	if forwarded() {
		flags |= protocol.ResponseForwarded
	}
	if err != nil {
		var ce *connect.Error
		if !errors.As(err, &ce) {
			ce = connect.NewError(connect.CodeUnknown, err)
		}
		p.svc.metrics.streamCall(time.Since(start), ce.Code().String())
		return protocol.AppendResponse(nil, id, uint64(ce.Code()), flags, []byte(ce.Message()))
	}
	p.svc.metrics.streamCall(time.Since(start), "ok")
	payload, err := proto.Marshal(&heraldv1.PublishResponse{Ids: ids})
	if err != nil {
		return protocol.AppendResponse(nil, id, uint64(connect.CodeInternal), flags, []byte("encode the response: "+err.Error()))
	}
	return protocol.AppendResponse(nil, id, protocol.CodeOK, flags, payload)
}

func isStop(stop <-chan struct{}) bool {
	select {
	case <-stop:
		return true
	default:
		return false
	}
}

// headerHasToken reports whether the comma-separated header name holds
// token, case-insensitively ("Connection: keep-alive, Upgrade").
func headerHasToken(h http.Header, name, token string) bool {
	for _, v := range h.Values(name) {
		for f := range strings.SplitSeq(v, ",") {
			if strings.EqualFold(strings.TrimSpace(f), token) {
				return true
			}
		}
	}
	return false
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
