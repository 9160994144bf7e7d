package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"connectrpc.com/connect"
	"github.com/prometheus/client_golang/prometheus"

	"herald/internal/node"
	"herald/internal/testkit"
	heraldv1 "herald/proto/herald/v1"
	"herald/proto/herald/v1/heraldv1connect"
)

// startDamagedServer serves a node holding topic "part", whose shard
// part.1 has a damaged log, and topic "all", whose shards both have. It
// returns the server and the damaged file of each broken shard by name.
func startDamagedServer(t *testing.T) (*httptest.Server, map[string]string) {
	t.Helper()
	dir := t.TempDir()
	cfg := node.Config{DataDir: dir, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
	cfg.SegmentSize = 4096
	ctx := context.Background()
	n, err := node.Open(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"part", "all"} {
		if _, err := n.CreateTopic(ctx, name, map[string]string{"shards": "2"}); err != nil {
			t.Fatal(err)
		}
		for i := range 200 {
			ev := []node.Event{{Key: fmt.Sprint("k", i), Payload: []byte(strings.Repeat("x", 100))}}
			if _, err := n.Publish(ctx, name, ev); err != nil {
				t.Fatal(err)
			}
		}
	}
	n.Close()
	files := make(map[string]string)
	for _, shard := range []string{"part.1", "all", "all.1"} {
		files[shard] = testkit.DamageFirstSegment(t, dir, shard)
	}
	n, err = node.Open(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	<-n.Opened() // the damaged shards have failed to open, the others serve
	srv := httptest.NewUnstartedServer(Handler(n, prometheus.NewRegistry()))
	srv.EnableHTTP2 = true
	srv.StartTLS()
	t.Cleanup(func() {
		srv.Close()
		n.Close()
	})
	return srv, files
}

// damageFirstSegment flips a byte in the middle of the first log segment
// of a shard, which the node then refuses to open.
func TestFetchListsUnreadableShards(t *testing.T) {
	srv, files := startDamagedServer(t)
	clients := map[string]heraldv1connect.HeraldServiceClient{
		"connect":      heraldv1connect.NewHeraldServiceClient(srv.Client(), srv.URL),
		"connect+json": heraldv1connect.NewHeraldServiceClient(srv.Client(), srv.URL, connect.WithProtoJSON()),
		"grpc":         heraldv1connect.NewHeraldServiceClient(srv.Client(), srv.URL, connect.WithGRPC()),
	}
	for proto, c := range clients {
		resp, err := c.Fetch(context.Background(), connect.NewRequest(&heraldv1.FetchRequest{Topic: "part", MaxEvents: 10}))
		if err != nil {
			t.Fatalf("%s: fetch with a healthy shard: %v", proto, err)
		}
		if len(resp.Msg.Events) == 0 {
			t.Errorf("%s: no events from the healthy shard", proto)
		}
		checkUnreadableProto(t, proto, resp.Msg.UnreadableShards, files, "part.1")
	}

	// Plain HTTP with JSON, as curl would send it.
	resp, err := srv.Client().Post(srv.URL+"/herald.v1.HeraldService/Fetch", "application/json",
		strings.NewReader(`{"topic":"part","maxEvents":10}`))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var body struct {
		Events           []json.RawMessage `json:"events"`
		UnreadableShards []struct {
			Shard        int
			Name, Reason string
		} `json:"unreadableShards"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("JSON fetch: status %d, %v", resp.StatusCode, err)
	}
	u := body.UnreadableShards
	if len(body.Events) == 0 || len(u) != 1 || u[0].Shard != 1 || u[0].Name != "part.1" || !strings.Contains(u[0].Reason, files["part.1"]) {
		t.Fatalf("JSON fetch: %d events, unreadable shards %+v; want events and part.1 naming %s", len(body.Events), u, files["part.1"])
	}
}

func TestFetchWithNoReadableShardIsUnavailable(t *testing.T) {
	srv, files := startDamagedServer(t)
	clients := map[string]heraldv1connect.HeraldServiceClient{
		"connect": heraldv1connect.NewHeraldServiceClient(srv.Client(), srv.URL),
		"grpc":    heraldv1connect.NewHeraldServiceClient(srv.Client(), srv.URL, connect.WithGRPC()),
	}
	for proto, c := range clients {
		_, err := c.Fetch(context.Background(), connect.NewRequest(&heraldv1.FetchRequest{Topic: "all"}))
		var ce *connect.Error
		if !errors.As(err, &ce) || ce.Code() != connect.CodeUnavailable {
			t.Fatalf("%s: fetch with every shard broken: %v; want unavailable", proto, err)
		}
		var detail *heraldv1.FetchResponse
		for _, d := range ce.Details() {
			if m, err := d.Value(); err == nil {
				detail, _ = m.(*heraldv1.FetchResponse)
			}
		}
		if detail == nil {
			t.Fatalf("%s: error %v carries no FetchResponse detail", proto, err)
		}
		checkUnreadableProto(t, proto, detail.UnreadableShards, files, "all", "all.1")
	}

	resp, err := srv.Client().Post(srv.URL+"/herald.v1.HeraldService/Fetch", "application/json", strings.NewReader(`{"topic":"all"}`))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var e struct{ Code, Message string }
	json.NewDecoder(resp.Body).Decode(&e)
	if resp.StatusCode != http.StatusServiceUnavailable || e.Code != "unavailable" ||
		!strings.Contains(e.Message, files["all"]) || !strings.Contains(e.Message, files["all.1"]) {
		t.Fatalf("JSON fetch: status %d, error %+v; want 503 naming both damaged files", resp.StatusCode, e)
	}
}

// checkUnreadableProto fails unless got lists exactly the shards named
// want, in order, each with a reason naming its damaged file.
func checkUnreadableProto(t *testing.T, proto string, got []*heraldv1.UnreadableShard, files map[string]string, want ...string) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: unreadable shards %v, want %v", proto, got, want)
	}
	for i, name := range want {
		if got[i].Name != name || !strings.Contains(got[i].Reason, files[name]) {
			t.Errorf("%s: unreadable shard %v, want %s naming %s", proto, got[i], name, files[name])
		}
	}
	if got[len(got)-1].Shard != 1 {
		t.Errorf("%s: last unreadable shard has index %d, want 1", proto, got[len(got)-1].Shard)
	}
}
