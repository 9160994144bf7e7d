package api

import (
	"context"
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

// BenchmarkPublishOverHTTP measures acknowledged publishes of one 1 KiB
// event through the whole API (Connect protocol over HTTP/1.1) with 64
// concurrent clients on a one-shard topic.
// parallelism × GOMAXPROCS goroutines publish concurrently (64 on this machine).
var parallelism = 32

func BenchmarkPublishOverHTTP(b *testing.B) {
	n, err := node.Open(context.Background(), node.Config{DataDir: b.TempDir(), Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		b.Fatal(err)
	}
	defer n.Close()
	srv := httptest.NewServer(Handler(n, prometheus.NewRegistry()))
	defer srv.Close()
	tr := &http.Transport{MaxIdleConnsPerHost: 128}
	c := heraldv1connect.NewHeraldServiceClient(&http.Client{Transport: tr}, srv.URL, connect.WithCompressMinBytes(compressMinBytes))
	ctx := context.Background()
	if _, err := c.CreateTopic(ctx, connect.NewRequest(&heraldv1.CreateTopicRequest{Name: "b", Attributes: map[string]string{"shards": "1"}})); err != nil {
		b.Fatal(err)
	}
	payload := make([]byte, 1024)
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
