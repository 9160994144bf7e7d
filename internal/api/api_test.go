package api

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"connectrpc.com/connect"
	"github.com/prometheus/client_golang/prometheus"

	"herald/internal/node"
	heraldv1 "herald/proto/herald/v1"
	"herald/proto/herald/v1/heraldv1connect"
)

func startServer(t *testing.T) (*httptest.Server, heraldv1connect.HeraldServiceClient) {
	t.Helper()
	reg := prometheus.NewRegistry()
	n, err := node.Open(context.Background(), node.Config{DataDir: t.TempDir(), Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(Handler(n, reg))
	srv.EnableHTTP2 = true
	srv.StartTLS()
	t.Cleanup(func() {
		srv.Close()
		n.Close()
	})
	return srv, heraldv1connect.NewHeraldServiceClient(srv.Client(), srv.URL, connect.WithGRPC())
}

func TestGRPCRoundTrip(t *testing.T) {
	_, c := startServer(t)
	ctx := context.Background()
	_, err := c.CreateTopic(ctx, connect.NewRequest(&heraldv1.CreateTopicRequest{Name: "orders", Attributes: map[string]string{"shards": "2"}}))
	if err != nil {
		t.Fatal(err)
	}
	pub, err := c.Publish(ctx, connect.NewRequest(&heraldv1.PublishRequest{Topic: "orders", Events: []*heraldv1.PublishEvent{
		{Key: "a", Payload: []byte("one"), Headers: map[string]string{"h": "v"}},
	}}))
	if err != nil {
		t.Fatal(err)
	}
	f, err := c.Fetch(ctx, connect.NewRequest(&heraldv1.FetchRequest{Topic: "orders"}))
	if err != nil {
		t.Fatal(err)
	}
	if len(f.Msg.Events) != 1 || f.Msg.Events[0].Id != pub.Msg.Ids[0] || string(f.Msg.Events[0].Payload) != "one" || f.Msg.Events[0].Headers["h"] != "v" {
		t.Fatalf("fetched %v, published %v", f.Msg.Events, pub.Msg.Ids)
	}
	ack, err := c.Ack(ctx, connect.NewRequest(&heraldv1.AckRequest{Ids: pub.Msg.Ids}))
	if err != nil || ack.Msg.Acked != 1 {
		t.Fatalf("ack = %v, %v", ack, err)
	}
	st, err := c.TopicStats(ctx, connect.NewRequest(&heraldv1.TopicStatsRequest{Name: "orders"}))
	if err != nil || st.Msg.Total.Published != 1 || st.Msg.Total.Acked != 1 || len(st.Msg.Shards) != 2 {
		t.Fatalf("stats = %v, %v", st, err)
	}
}

func TestErrorCodes(t *testing.T) {
	_, c := startServer(t)
	ctx := context.Background()
	c.CreateTopic(ctx, connect.NewRequest(&heraldv1.CreateTopicRequest{Name: "small", Attributes: map[string]string{"shards": "1", "max_queue_bytes": "100"}}))
	big := []*heraldv1.PublishEvent{{Key: "k", Payload: make([]byte, 200)}}
	cases := []struct {
		name string
		call func() error
		code connect.Code
	}{
		{"invalid name", func() error {
			_, err := c.CreateTopic(ctx, connect.NewRequest(&heraldv1.CreateTopicRequest{Name: "bad name"}))
			return err
		}, connect.CodeInvalidArgument},
		{"exists", func() error {
			_, err := c.CreateTopic(ctx, connect.NewRequest(&heraldv1.CreateTopicRequest{Name: "small"}))
			return err
		}, connect.CodeAlreadyExists},
		{"unknown topic", func() error {
			_, err := c.GetTopic(ctx, connect.NewRequest(&heraldv1.GetTopicRequest{Name: "nope"}))
			return err
		}, connect.CodeNotFound},
		{"queue full", func() error {
			_, err := c.Publish(ctx, connect.NewRequest(&heraldv1.PublishRequest{Topic: "small", Events: big}))
			return err
		}, connect.CodeResourceExhausted},
		{"shards fixed", func() error {
			_, err := c.SetTopicAttributes(ctx, connect.NewRequest(&heraldv1.SetTopicAttributesRequest{Name: "small", Attributes: map[string]string{"shards": "3"}}))
			return err
		}, connect.CodeFailedPrecondition},
		{"ack unknown", func() error {
			_, err := c.Ack(ctx, connect.NewRequest(&heraldv1.AckRequest{Ids: []string{"small/0/77"}}))
			return err
		}, connect.CodeNotFound},
		{"expired reservation", func() error {
			_, err := c.Commit(ctx, connect.NewRequest(&heraldv1.CommitRequest{ReservationId: "small/0/r42", Events: []*heraldv1.PublishEvent{{Key: "k"}}}))
			return err
		}, connect.CodeNotFound},
	}
	for _, tc := range cases {
		err := tc.call()
		if connect.CodeOf(err) != tc.code {
			t.Errorf("%s: code %v (%v), want %v", tc.name, connect.CodeOf(err), err, tc.code)
		}
	}
}

// JSON clients see a full queue as HTTP 503 with Retry-After, which
// proxies and generic HTTP clients know to retry.
func TestJSONQueueFullIs503WithRetryAfter(t *testing.T) {
	srv, c := startServer(t)
	ctx := context.Background()
	if _, err := c.CreateTopic(ctx, connect.NewRequest(&heraldv1.CreateTopicRequest{Name: "small", Attributes: map[string]string{"shards": "1", "max_queue_bytes": "10"}})); err != nil {
		t.Fatal(err)
	}
	body := `{"topic":"small","events":[{"key":"k","payload":"` + strings.Repeat("QUFB", 10) + `"}]}`
	resp, err := srv.Client().Post(srv.URL+"/herald.v1.HeraldService/Publish", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var e struct{ Code, Message string }
	json.NewDecoder(resp.Body).Decode(&e)
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" {
		t.Fatalf("status %d, Retry-After %q; want 503 with Retry-After", resp.StatusCode, resp.Header.Get("Retry-After"))
	}
	if e.Code != "resource_exhausted" || !strings.Contains(e.Message, "retry") {
		t.Fatalf("error body = %+v", e)
	}
	// A JSON request that succeeds.
	resp2, err := srv.Client().Post(srv.URL+"/herald.v1.HeraldService/ListTopics", "application/json", strings.NewReader(`{}`))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp2.Body)
	resp2.Body.Close()
	if resp2.StatusCode != 200 || !strings.Contains(string(b), `"name":"small"`) {
		t.Fatalf("ListTopics over JSON: %d %s", resp2.StatusCode, b)
	}
}

func TestMetricsAndHealth(t *testing.T) {
	srv, c := startServer(t)
	ctx := context.Background()
	c.CreateTopic(ctx, connect.NewRequest(&heraldv1.CreateTopicRequest{Name: "m", Attributes: map[string]string{"shards": "1"}}))
	c.Publish(ctx, connect.NewRequest(&heraldv1.PublishRequest{Topic: "m", Events: []*heraldv1.PublishEvent{{Key: "k", Payload: []byte("x")}}}))
	get := func(path string) string {
		resp, err := srv.Client().Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != 200 {
			t.Fatalf("%s: status %d", path, resp.StatusCode)
		}
		return string(b)
	}
	m := get("/metrics")
	for _, want := range []string{
		`herald_published_events_total{topic="m"} 1`,
		`herald_shard_pending_events{shard="m",topic="m"} 1`,
		`herald_fsync_duration_seconds_count`,
		`herald_request_duration_seconds_count{code="ok",method="/herald.v1.HeraldService/Publish"} 1`,
	} {
		if !strings.Contains(m, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
	if !strings.Contains(get("/healthz"), "ok") || !strings.Contains(get("/readyz"), `"ready":true`) {
		t.Fatal("health endpoints")
	}
}
