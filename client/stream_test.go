package client

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"

	"herald/internal/protocol"
	heraldv1 "herald/proto/herald/v1"
)

// streamServer serves publish streams whose nth connection (from 1)
// answers answers[n-1] calls and then drops the connection without a word;
// further connections answer every call.
func streamServer(t *testing.T, answers ...int) (*httptest.Server, *atomic.Int32) {
	t.Helper()
	var conns atomic.Int32
	srv := httptest.NewServer(streamHandler(t, &conns, answers))
	t.Cleanup(srv.Close)
	return srv, &conns
}

// streamHandler is the handler of streamServer, counting connections in
// conns.
func streamHandler(t *testing.T, conns *atomic.Int32, answers []int) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != protocol.PublishStreamPath || r.Header.Get("Upgrade") != protocol.PublishStreamUpgrade {
			http.Error(w, "not a publish stream", http.StatusBadRequest)
			return
		}
		conn, rw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			t.Error(err)
			return
		}
		defer conn.Close()
		n := int(conns.Add(1))
		limit := -1
		if n <= len(answers) {
			limit = answers[n-1]
		}
		rw.WriteString("HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: " + protocol.PublishStreamUpgrade + "\r\n\r\n")
		rw.Flush()
		for answered := 0; limit < 0 || answered < limit; answered++ {
			id, body, err := protocol.ReadFrame(rw.Reader, 1<<20, nil)
			if err != nil {
				return
			}
			var req heraldv1.PublishRequest
			if err := proto.Unmarshal(body, &req); err != nil {
				t.Error(err)
				return
			}
			var resp heraldv1.PublishResponse
			for i := range req.Events {
				resp.Ids = append(resp.Ids, fmt.Sprintf("%s/0/%d-%d", req.Topic, id, i))
			}
			payload, _ := proto.Marshal(&resp)
			conn.Write(protocol.AppendResponse(nil, id, protocol.CodeOK, 0, payload))
		}
		// Read the next call, so that it was sent, and drop the connection.
		bufio.NewReader(rw).ReadByte()
	})
}

// TestPublishStreamOverTLS checks that the stream opens on a TLS server
// that also speaks HTTP/2, with a TLS config that offers HTTP/2 (as the
// one shared with the client's own HTTP client does once that client has
// used it): the stream must ask for HTTP/1.1, which alone can switch
// protocols.
func TestPublishStreamOverTLS(t *testing.T) {
	var conns atomic.Int32
	srv := httptest.NewUnstartedServer(streamHandler(t, &conns, nil))
	srv.EnableHTTP2 = true
	srv.StartTLS()
	defer srv.Close()
	tc := srv.Client().Transport.(*http.Transport).TLSClientConfig.Clone()
	tc.NextProtos = []string{"h2", "http/1.1"}
	c := New(srv.URL, WithPublishStream(), WithTLSConfig(tc))
	defer c.Close()
	ids, err := c.Publish(context.Background(), "t", Event{Key: "k", Payload: []byte("x")})
	if err != nil || len(ids) != 1 {
		t.Fatalf("publish over TLS: %v, %v", ids, err)
	}
	if !slices.Contains(tc.NextProtos, "h2") {
		t.Errorf("the stream changed the caller's TLS config: NextProtos %q", tc.NextProtos)
	}
}

// TestPublishStreamReopensAfterABreak checks that a call in flight when
// the connection drops fails as unavailable with its outcome unknown,
// and that the next call opens a new connection.
func TestPublishStreamReopensAfterABreak(t *testing.T) {
	srv, conns := streamServer(t, 1)
	c := New(srv.URL, WithPublishStream())
	defer c.Close()
	ctx := context.Background()
	ids, err := c.Publish(ctx, "t", Event{Key: "k", Payload: []byte("1")}, Event{Key: "k", Payload: []byte("2")})
	if err != nil || len(ids) != 2 {
		t.Fatalf("first call: %v, %v", ids, err)
	}
	_, err = c.Publish(ctx, "t", Event{Key: "k", Payload: []byte("3")})
	if connect.CodeOf(err) != connect.CodeUnavailable || !strings.Contains(err.Error(), "outcome is unknown") {
		t.Fatalf("call on the dropped connection: %v; want unavailable, outcome unknown", err)
	}
	if !IsRetryable(err) {
		t.Errorf("IsRetryable(%v) is false; WithPublishRetries would not resend it", err)
	}
	ids, err = c.Publish(ctx, "t", Event{Key: "k", Payload: []byte("4")})
	if err != nil || len(ids) != 1 {
		t.Fatalf("call after the break: %v, %v", ids, err)
	}
	if n := conns.Load(); n != 2 {
		t.Errorf("%d connections opened, want 2", n)
	}
}

// TestPublishStreamRetriesResend checks that WithPublishRetries resends a
// call whose connection dropped, each time on a new connection.
func TestPublishStreamRetriesResend(t *testing.T) {
	srv, conns := streamServer(t, 0, 0)
	c := New(srv.URL, WithPublishStream(), WithPublishRetries(5))
	defer c.Close()
	ids, err := c.Publish(context.Background(), "t", Event{Key: "k", Payload: []byte("x")})
	if err != nil || len(ids) != 1 {
		t.Fatalf("publish: %v, %v", ids, err)
	}
	if n := conns.Load(); n != 3 {
		t.Errorf("%d connections opened, want 3 (two dropped)", n)
	}
}

// TestPublishStreamRefused checks that a node refusing the stream's
// opening gives the call an error with the node's reason.
func TestPublishStreamRefused(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "publish needs a token with the publish scope", http.StatusForbidden)
	}))
	defer srv.Close()
	c := New(srv.URL, WithPublishStream())
	defer c.Close()
	_, err := c.Publish(context.Background(), "t", Event{Key: "k", Payload: []byte("x")})
	if connect.CodeOf(err) != connect.CodePermissionDenied || !strings.Contains(err.Error(), "publish scope") {
		t.Fatalf("%v; want permission_denied with the node's reason", err)
	}
}
