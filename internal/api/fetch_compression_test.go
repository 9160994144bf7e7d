package api

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	"connectrpc.com/connect"

	heraldv1 "herald/proto/herald/v1"
	"herald/proto/herald/v1/heraldv1connect"
)

// TestFetchNotCompressed checks that a Fetch response is sent as it is,
// even to a client that accepts gzip and even when it would compress well
// (see NewHandler).
func TestFetchNotCompressed(t *testing.T) {
	srv, c := startServer(t)
	ctx := context.Background()
	if _, err := c.CreateTopic(ctx, connect.NewRequest(&heraldv1.CreateTopicRequest{Name: "zeros", Attributes: map[string]string{"shards": "1"}})); err != nil {
		t.Fatal(err)
	}
	// 100 events of 2 KiB of one letter: well over compressMinBytes, and
	// compressible to almost nothing.
	var evs []*heraldv1.PublishEvent
	for range 100 {
		evs = append(evs, &heraldv1.PublishEvent{Key: strings.Repeat("k", 1000), Payload: bytes.Repeat([]byte("a"), 2048)})
	}
	if _, err := c.Publish(ctx, connect.NewRequest(&heraldv1.PublishRequest{Topic: "zeros", Events: evs})); err != nil {
		t.Fatal(err)
	}

	post := func(procedure string, body any) (*http.Response, []byte) {
		t.Helper()
		b, err := json.Marshal(body)
		if err != nil {
			t.Fatal(err)
		}
		req, err := http.NewRequest(http.MethodPost, srv.URL+procedure, bytes.NewReader(b))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/json")
		// Set by hand, so that the transport leaves the body as sent.
		req.Header.Set("Accept-Encoding", "gzip")
		resp, err := srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		out, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("%s: %d %s", procedure, resp.StatusCode, out)
		}
		return resp, out
	}

	resp, body := post(heraldv1connect.HeraldServiceFetchProcedure, map[string]any{"topic": "zeros", "max_events": 100})
	if enc := resp.Header.Get("Content-Encoding"); enc != "" {
		t.Fatalf("Fetch response encoded %q, want none", enc)
	}
	var f struct {
		Events []json.RawMessage `json:"events"`
	}
	if err := json.Unmarshal(body, &f); err != nil {
		t.Fatalf("Fetch response: %v: %.200s", err, body)
	}
	if len(f.Events) != 100 {
		t.Fatalf("fetched %d events, want 100", len(f.Events))
	}

}
