package api

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"

	"connectrpc.com/connect"
	"github.com/prometheus/client_golang/prometheus"

	"herald/internal/node"
	heraldv1 "herald/proto/herald/v1"
	"herald/proto/herald/v1/heraldv1connect"
)

// parallelism × GOMAXPROCS goroutines publish concurrently (64 on this machine).
var parallelism = 32

// BenchmarkPublishOverHTTP measures acknowledged publishes of one 1 KiB
// event per request with 64 concurrent clients, client and server in one
// process sharing the machine's cores:
//
//   - node: through the whole API (Connect protocol over HTTP/1.1) to a
//     node with a one-shard topic, fsync before the answer;
//   - empty handler: the same requests to a Publish handler that stores
//     nothing and answers at once, the ceiling of the request path alone;
//   - empty handler, bidi stream: the same messages over one Connect bidi
//     stream per client on HTTP/2 without TLS (8 connections), answered at
//     once, the ceiling of a streamed publish.
func BenchmarkPublishOverHTTP(b *testing.B) {
	payload := make([]byte, 1024)
	b.Run("node", func(b *testing.B) {
		n, err := node.Open(context.Background(), node.Config{DataDir: b.TempDir(), Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
		if err != nil {
			b.Fatal(err)
		}
		defer n.Close()
		srv := httptest.NewServer(Handler(n, prometheus.NewRegistry()))
		defer srv.Close()
		c := heraldv1connect.NewHeraldServiceClient(http1Client(), srv.URL, connect.WithCompressMinBytes(compressMinBytes))
		if _, err := c.CreateTopic(context.Background(), connect.NewRequest(&heraldv1.CreateTopicRequest{Name: "b", Attributes: map[string]string{"shards": "1"}})); err != nil {
			b.Fatal(err)
		}
		benchUnary(b, c, payload)
	})
	b.Run("empty handler", func(b *testing.B) {
		_, h := heraldv1connect.NewHeraldServiceHandler(emptyPublisher{})
		srv := httptest.NewServer(h)
		defer srv.Close()
		c := heraldv1connect.NewHeraldServiceClient(http1Client(), srv.URL, connect.WithCompressMinBytes(compressMinBytes))
		benchUnary(b, c, payload)
	})
	b.Run("empty handler, bidi stream", func(b *testing.B) {
		benchBidi(b, payload)
	})
}

func http1Client() *http.Client {
	return &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 128}}
}

func benchUnary(b *testing.B, c heraldv1connect.HeraldServiceClient, payload []byte) {
	ctx := context.Background()
	b.SetParallelism(parallelism)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			req := connect.NewRequest(&heraldv1.PublishRequest{Topic: "b", Events: []*heraldv1.PublishEvent{{Key: "k", Payload: payload}}})
			if _, err := c.Publish(ctx, req); err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "events/s")
}

// emptyPublisher answers every publish with an id at once.
type emptyPublisher struct {
	heraldv1connect.UnimplementedHeraldServiceHandler
}

func (emptyPublisher) Publish(context.Context, *connect.Request[heraldv1.PublishRequest]) (*connect.Response[heraldv1.PublishResponse], error) {
	return connect.NewResponse(&heraldv1.PublishResponse{Ids: []string{"b/0/1"}}), nil
}

// benchStreamProcedure is a procedure only this benchmark serves: herald's
// API has no streamed publish.
const benchStreamProcedure = "/herald.bench.v1.Bench/PublishStream"

func benchBidi(b *testing.B, payload []byte) {
	mux := http.NewServeMux()
	mux.Handle(benchStreamProcedure, connect.NewBidiStreamHandler(benchStreamProcedure,
		func(_ context.Context, s *connect.BidiStream[heraldv1.PublishRequest, heraldv1.PublishResponse]) error {
			for {
				if _, err := s.Receive(); errors.Is(err, io.EOF) {
					return nil
				} else if err != nil {
					return err
				}
				if err := s.Send(&heraldv1.PublishResponse{Ids: []string{"b/0/1"}}); err != nil {
					return err
				}
			}
		}))
	srv := httptest.NewUnstartedServer(mux)
	var protocols http.Protocols
	protocols.SetUnencryptedHTTP2(true)
	srv.Config.Protocols = &protocols
	srv.Start()
	defer srv.Close()

	// Go's HTTP/2 transport puts every stream on one connection; eight
	// transports spread the clients over eight connections.
	const conns = 8
	var clients [conns]*connect.Client[heraldv1.PublishRequest, heraldv1.PublishResponse]
	for i := range clients {
		tr := &http.Transport{Protocols: &protocols}
		clients[i] = connect.NewClient[heraldv1.PublishRequest, heraldv1.PublishResponse](&http.Client{Transport: tr}, srv.URL+benchStreamProcedure)
	}
	next := make(chan int, 1)
	next <- 0
	b.SetParallelism(parallelism)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		i := <-next
		next <- i + 1
		s := clients[i%conns].CallBidiStream(context.Background())
		defer func() {
			if err := s.CloseRequest(); err != nil {
				b.Error(err)
			}
			if err := s.CloseResponse(); err != nil {
				b.Error(err)
			}
		}()
		req := &heraldv1.PublishRequest{Topic: "b", Events: []*heraldv1.PublishEvent{{Key: "k", Payload: payload}}}
		for pb.Next() {
			if err := s.Send(req); err != nil {
				b.Error(err)
				return
			}
			if _, err := s.Receive(); err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "events/s")
}
