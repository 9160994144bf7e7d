package api

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"herald/internal/node"
)

type readyzBody struct {
	Ready      bool `json:"ready"`
	ShardsOpen int  `json:"shards_open"`
	Shards     int  `json:"shards"`
}

func getReadyz(t *testing.T, url string) (int, readyzBody, http.Header) {
	t.Helper()
	resp, err := http.Get(url + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var body readyzBody
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		t.Fatalf("/readyz answered %d with a body that is not JSON: %v", resp.StatusCode, err)
	}
	return resp.StatusCode, body, resp.Header
}

// TestReadyzSaysHowManyShardsAreOpen restarts a node one of whose shards
// opens only when the test lets it: /readyz answers 503 with the count of
// open shards until then, and 200 after.
func TestReadyzSaysHowManyShardsAreOpen(t *testing.T) {
	dir := t.TempDir()
	cfg := node.Config{DataDir: dir, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
	ctx := context.Background()
	n, err := node.Open(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := n.CreateTopic(ctx, "t", map[string]string{"shards": "4"}); err != nil {
		t.Fatal(err)
	}
	n.Close()

	release := make(chan struct{})
	first := true
	cfg.BootParallelism = 1
	cfg.BeforeShardOpen = func(uint64) {
		if first { // the boot opens one shard at a time: the first holds the rest
			first = false
			<-release
		}
	}
	n, err = node.Open(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(Handler(n, prometheus.NewRegistry()))
	t.Cleanup(func() {
		srv.Close()
		n.Close()
	})
	status, body, h := getReadyz(t, srv.URL)
	if status != http.StatusServiceUnavailable || body != (readyzBody{Ready: false, ShardsOpen: 0, Shards: 4}) || h.Get("Retry-After") == "" {
		t.Fatalf("/readyz while shards open: %d %+v (Retry-After %q), want 503 with 0 of 4 open and a Retry-After", status, body, h.Get("Retry-After"))
	}
	close(release)
	<-n.Opened()
	status, body, _ = getReadyz(t, srv.URL)
	if status != http.StatusOK {
		t.Fatalf("/readyz once every shard opened: %d %+v, want 200", status, body)
	}
	if body != (readyzBody{Ready: true, ShardsOpen: 4, Shards: 4}) {
		t.Fatalf("/readyz once every shard opened: %+v, want ready with 4 of 4 open", body)
	}
}
