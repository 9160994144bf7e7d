package api

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/prometheus/client_golang/prometheus"

	"herald/client"
	"herald/internal/node"
	heraldv1 "herald/proto/herald/v1"
	"herald/proto/herald/v1/heraldv1connect"
)

// grpcClient returns a gRPC client of the server at url, over HTTP/2
// without TLS (h2c with prior knowledge), as stock gRPC clients speak it.
func grpcClient(t *testing.T, url string) heraldv1connect.HeraldServiceClient {
	t.Helper()
	var p http.Protocols
	p.SetUnencryptedHTTP2(true)
	tr := &http.Transport{Protocols: &p}
	t.Cleanup(tr.CloseIdleConnections)
	return heraldv1connect.NewHeraldServiceClient(&http.Client{Transport: tr}, url, connect.WithGRPC())
}

type rpcStream = connect.BidiStreamForClient[heraldv1.PublishStreamRequest, heraldv1.PublishStreamResponse]

// openRPCStream opens a PublishStream with token ("" for none).
func openRPCStream(t *testing.T, url, token string) *rpcStream {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	s := grpcClient(t, url).PublishStream(ctx)
	if token != "" {
		s.RequestHeader().Set("Authorization", "Bearer "+token)
	}
	return s
}

func streamRequest(seq uint64, topic, key string, payload []byte) *heraldv1.PublishStreamRequest {
	return &heraldv1.PublishStreamRequest{Sequence: seq, Request: &heraldv1.PublishRequest{
		Topic: topic, Events: []*heraldv1.PublishEvent{{Key: key, Payload: payload}},
	}}
}

// TestPublishStreamRPC sends many calls on one PublishStream while
// reading the answers, and checks that each sequence is answered once,
// with the id under which its own event was stored.
func TestPublishStreamRPC(t *testing.T) {
	tt := makeTokens(t, time.Now())
	url, _ := serveOrders(t, Options{Tokens: tt.store}, 3)
	ctx := context.Background()
	s := openRPCStream(t, url, tt.secrets["publish"])

	const calls = 500
	var sendErr error
	var sender sync.WaitGroup
	sender.Go(func() {
		for seq := uint64(1); seq <= calls; seq++ {
			if sendErr = s.Send(streamRequest(seq, "orders", fmt.Sprint("key-", seq%7), fmt.Appendf(nil, "event-%d", seq))); sendErr != nil {
				return
			}
		}
		sendErr = s.CloseRequest()
	})
	idOf := make(map[string]string) // payload -> id
	outOfOrder := 0
	var last uint64
	for {
		a, err := s.Receive()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("receive after %d answers: %v", len(idOf), err)
		}
		if a.Sequence < last {
			outOfOrder++
		}
		last = a.Sequence
		ids := a.GetResponse().GetIds()
		if a.GetError() != nil || len(ids) != 1 {
			t.Fatalf("call %d: %v", a.Sequence, a)
		}
		payload := fmt.Sprintf("event-%d", a.Sequence)
		if _, dup := idOf[payload]; dup {
			t.Fatalf("call %d answered twice", a.Sequence)
		}
		idOf[payload] = ids[0]
	}
	sender.Wait()
	if sendErr != nil {
		t.Fatal(sendErr)
	}
	if err := s.CloseResponse(); err != nil {
		t.Fatal(err)
	}
	if len(idOf) != calls {
		t.Fatalf("%d calls answered, want %d", len(idOf), calls)
	}
	t.Logf("%d of %d answers came after a later call's", outOfOrder, calls)

	plain := client.New(url, client.WithToken(tt.secrets["consume"]))
	for fetched := 0; fetched < calls; {
		ds, err := plain.Fetch(ctx, "orders", client.FetchOptions{MaxEvents: 100, Wait: time.Second})
		if err != nil || len(ds) == 0 {
			t.Fatalf("fetched %d of %d events, then %v", fetched, calls, err)
		}
		var ids []string
		for _, d := range ds {
			if idOf[string(d.Payload)] != d.ID {
				t.Errorf("%s is stored as %s, but its call was answered with %q", d.Payload, d.ID, idOf[string(d.Payload)])
			}
			ids = append(ids, d.ID)
		}
		fetched += len(ds)
		if _, err := plain.Ack(ctx, ids...); err != nil {
			t.Fatal(err)
		}
	}
	want := fmt.Sprintf(`herald_request_duration_seconds_count{code="ok",method="%s"} %d`, heraldv1connect.HeraldServicePublishStreamProcedure, calls)
	if metrics := httpGet(t, url+"/metrics"); !strings.Contains(metrics, want) {
		t.Errorf("/metrics lacks %q", want)
	}
}

// TestPublishStreamRPCErrors checks that a call refused on the stream is
// answered, under its sequence, with the code and message Publish gives
// the same call, and that the stream serves the next call.
func TestPublishStreamRPCErrors(t *testing.T) {
	url, n := serveOrders(t, Options{}, 1)
	ctx := context.Background()
	unary := grpcClient(t, url)
	s := openRPCStream(t, url, "")
	seq := uint64(0)
	for name, req := range map[string]*heraldv1.PublishRequest{
		"unknown topic":     {Topic: "nope", Events: []*heraldv1.PublishEvent{{Key: "k", Payload: []byte("x")}}},
		"invalid topic":     {Topic: "bad name!", Events: []*heraldv1.PublishEvent{{Key: "k", Payload: []byte("x")}}},
		"oversized payload": {Topic: "orders", Events: []*heraldv1.PublishEvent{{Key: "k", Payload: make([]byte, node.DefaultMaxPayloadBytes+1)}}},
		"no request":        nil,
	} {
		t.Run(name, func(t *testing.T) {
			_, want := unary.Publish(ctx, connect.NewRequest(orEmpty(req)))
			var ce *connect.Error
			if !errors.As(want, &ce) {
				t.Fatalf("Publish: %v; want an error", want)
			}
			seq++
			if err := s.Send(&heraldv1.PublishStreamRequest{Sequence: seq, Request: req}); err != nil {
				t.Fatal(err)
			}
			a, err := s.Receive()
			if err != nil {
				t.Fatal(err)
			}
			if e := a.GetError(); a.Sequence != seq || e == nil || connect.Code(e.Code) != ce.Code() || e.Message != ce.Message() {
				t.Fatalf("answer %v; want sequence %d and Publish's error: %v", a, seq, ce)
			}
			seq++
			if err := s.Send(streamRequest(seq, "orders", "k", []byte("ok"))); err != nil {
				t.Fatal(err)
			}
			if a, err := s.Receive(); err != nil || a.Sequence != seq || len(a.GetResponse().GetIds()) != 1 {
				t.Fatalf("the stream broke after the refusal: %v, %v", a, err)
			}
		})
	}
	if pending := totals(t, n, "orders").Events; pending != 4 {
		t.Errorf("%d events pending, want the 4 accepted ones", pending)
	}

	// A request over the request limit is skipped unread, so its
	// sequence is unknown: the stream ends, saying why.
	if err := s.Send(streamRequest(seq+1, "orders", "k", make([]byte, MaxRequestBytes))); err != nil && !errors.Is(err, io.EOF) {
		t.Fatal(err)
	}
	_, err := s.Receive()
	if connect.CodeOf(err) != connect.CodeInvalidArgument || !strings.Contains(err.Error(), "fewer or smaller events") {
		t.Errorf("after a request over the limit: %v; want invalid_argument saying what to do", err)
	}
}

func orEmpty(req *heraldv1.PublishRequest) *heraldv1.PublishRequest {
	if req == nil {
		return &heraldv1.PublishRequest{}
	}
	return req
}

// TestPublishStreamRPCNeedsAPublishToken checks that the stream serves
// only a token of the publish scope, and ends once its token is revoked.
func TestPublishStreamRPCNeedsAPublishToken(t *testing.T) {
	tt := makeTokens(t, time.Now())
	url, n := serveOrders(t, Options{Tokens: tt.store}, 1)
	for token, code := range map[string]connect.Code{
		"":        connect.CodeUnauthenticated,
		"consume": connect.CodePermissionDenied,
		"expired": connect.CodeUnauthenticated,
	} {
		s := openRPCStream(t, url, tt.secrets[token])
		s.Send(streamRequest(1, "orders", "k", []byte("x")))
		_, err := s.Receive()
		if connect.CodeOf(err) != code || !strings.Contains(err.Error(), "publish scope") {
			t.Errorf("token %q: %v; want %v naming the publish scope", token, err, code)
		}
	}
	if pending := totals(t, n, "orders").Events; pending != 0 {
		t.Fatalf("%d events were published without a publish token", pending)
	}

	s := openRPCStream(t, url, tt.secrets["publish"])
	if err := s.Send(streamRequest(1, "orders", "k", []byte("before"))); err != nil {
		t.Fatal(err)
	}
	if a, err := s.Receive(); err != nil || a.GetError() != nil {
		t.Fatalf("with a publish token: %v, %v", a, err)
	}
	revoke(t, tt, "publish")
	ok := 1
	deadline := time.Now().Add(time.Minute)
	for seq := uint64(2); ; seq++ {
		if err := s.Send(streamRequest(seq, "orders", "k", []byte("after"))); err != nil {
			t.Fatalf("call %d: %v", seq, err)
		}
		a, err := s.Receive()
		if err != nil {
			t.Fatalf("call %d: %v", seq, err)
		}
		if e := a.GetError(); e != nil {
			if a.Sequence != seq || connect.Code(e.Code) != connect.CodeUnauthenticated || !strings.Contains(e.Message, "publish scope") {
				t.Fatalf("after the revocation: %v; want call %d refused as unauthenticated", a, seq)
			}
			break
		}
		ok++
		if time.Now().After(deadline) {
			t.Fatalf("%d publishes went through in a minute after the token was revoked", ok)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if _, err := s.Receive(); connect.CodeOf(err) != connect.CodeUnauthenticated || !strings.Contains(err.Error(), "publish stream is closed") {
		t.Errorf("the stream's end: %v; want unauthenticated saying the stream is closed", err)
	}
	if pending := totals(t, n, "orders").Events; pending != int64(ok) {
		t.Errorf("%d events stored, but %d publishes succeeded", pending, ok)
	}
}

// TestPublishStreamRPCStop stops the server's streams while calls are
// queued: the calls answered were published, and the stream then ends
// with unavailable.
func TestPublishStreamRPCStop(t *testing.T) {
	stop := make(chan struct{})
	url, n := serveOrders(t, Options{Stop: stop}, 1)
	s := openRPCStream(t, url, "")
	for seq := uint64(1); seq <= 10; seq++ {
		if err := s.Send(streamRequest(seq, "orders", "k", []byte("x"))); err != nil {
			t.Fatal(err)
		}
	}
	answered := 0
	for ; answered < 10; answered++ {
		if a, err := s.Receive(); err != nil || a.GetError() != nil {
			t.Fatalf("before the stop: %v, %v", a, err)
		}
	}
	close(stop)
	var sender sync.WaitGroup
	sender.Go(func() {
		for seq := uint64(11); seq <= 200; seq++ {
			if s.Send(streamRequest(seq, "orders", "k", []byte("x"))) != nil {
				return
			}
		}
	})
	for {
		a, err := s.Receive()
		if err != nil {
			if connect.CodeOf(err) != connect.CodeUnavailable || !strings.Contains(err.Error(), "shutting down") {
				t.Errorf("the stream's end: %v; want unavailable saying it shuts down", err)
			}
			break
		}
		if a.GetError() != nil {
			t.Fatalf("call %d: %v", a.Sequence, a.GetError())
		}
		answered++
	}
	s.CloseRequest()
	sender.Wait()
	if pending := totals(t, n, "orders").Events; pending != int64(answered) {
		t.Errorf("%d events published, but %d answered", pending, answered)
	}
}

// fakeWire is a streamWire whose calls block in decoding until released,
// to watch the in-flight bound.
type fakeWire struct {
	size    int
	release chan struct{}
	reads   atomic.Int32
	woken   chan struct{}
	wakeup  sync.Once
	closed  chan struct{}
}

func (f *fakeWire) read() (streamCall, error) {
	f.reads.Add(1)
	select {
	case <-f.woken:
		return streamCall{}, errors.New("woken")
	default:
	}
	return streamCall{id: uint64(f.reads.Load()), size: f.size, request: func() (*heraldv1.PublishRequest, *connect.Error) {
		<-f.release
		return nil, connect.NewError(connect.CodeInvalidArgument, errors.New("released"))
	}}, nil
}

func (f *fakeWire) answer(uint64, []string, bool, *connect.Error) {}
func (f *fakeWire) flush() error                                  { <-f.closed; return nil }
func (f *fakeWire) close(*connect.Error)                          { close(f.closed) }
func (f *fakeWire) wake()                                         { f.wakeup.Do(func() { close(f.woken) }) }
func (f *fakeWire) more() bool                                    { return false }

// TestPublishStreamInFlightBound checks that a stream stops reading while
// streamInFlightBytes of requests are unanswered, and reads on as calls
// are answered.
func TestPublishStreamInFlightBound(t *testing.T) {
	reg := prometheus.NewRegistry()
	svc := &service{metrics: NewMetrics(reg)}
	w := &fakeWire{size: streamInFlightBytes / 4, release: make(chan struct{}), woken: make(chan struct{}), closed: make(chan struct{})}
	done := make(chan struct{})
	go func() {
		defer close(done)
		svc.serveStream(context.Background(), "test", w, func() *connect.Error { return nil })
	}()
	// Four calls fill the bound; the fifth is read and waits for room.
	waitFor(t, func() bool { return w.reads.Load() == 5 })
	time.Sleep(100 * time.Millisecond)
	if got := w.reads.Load(); got != 5 {
		t.Fatalf("%d reads with the bound full; want 5", got)
	}
	w.release <- struct{}{} // one call answered: one more read
	waitFor(t, func() bool { return w.reads.Load() == 6 })
	time.Sleep(100 * time.Millisecond)
	if got := w.reads.Load(); got != 6 {
		t.Fatalf("%d reads after one answer; want 6", got)
	}
	w.wake()
	close(w.release)
	<-done
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !cond(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("timed out")
		}
	}
}
