package api

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"

	"herald/client"
	"herald/internal/auth"
	"herald/internal/node"
	"herald/internal/protocol"
	heraldv1 "herald/proto/herald/v1"
)

// TestPublishStream publishes from many goroutines over one stream and
// checks that every call got its own events' ids, and that the events
// are stored in each key's order.
func TestPublishStream(t *testing.T) {
	tt := makeTokens(t, time.Now())
	url, _ := serveOrders(t, Options{Tokens: tt.store}, 3)
	ctx := context.Background()
	c := client.New(url, client.WithToken(tt.secrets["publish"]), client.WithPublishStream())
	defer c.Close()

	const producers, perProducer = 16, 40
	idOf := make(map[string]string) // payload -> id
	var mu sync.Mutex
	var wg sync.WaitGroup
	for p := range producers {
		wg.Go(func() {
			for i := range perProducer {
				payload := fmt.Sprintf("p%d-%03d", p, i)
				ids, err := c.Publish(ctx, "orders", client.Event{Key: fmt.Sprint("key-", p), Payload: []byte(payload)})
				if err != nil {
					t.Errorf("publish %s: %v", payload, err)
					return
				}
				mu.Lock()
				idOf[payload] = ids[0]
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if len(idOf) != producers*perProducer {
		t.Fatalf("%d events acknowledged, want %d", len(idOf), producers*perProducer)
	}
	metrics := httpGet(t, url+"/metrics")
	for _, want := range []string{
		fmt.Sprintf(`herald_request_duration_seconds_count{code="ok",method="/stream/publish"} %d`, producers*perProducer),
		"herald_publish_streams 1",
	} {
		if !strings.Contains(metrics, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}

	plain := client.New(url, client.WithToken(tt.secrets["consume"]))
	got := make(map[string]string)
	last := make(map[string]string) // key -> last payload fetched
	for len(got) < len(idOf) {
		ds, err := plain.Fetch(ctx, "orders", client.FetchOptions{MaxEvents: 100, Wait: time.Second})
		if err != nil {
			t.Fatal(err)
		}
		if len(ds) == 0 {
			t.Fatalf("fetched %d of %d events, then nothing", len(got), len(idOf))
		}
		var ids []string
		for _, d := range ds {
			ids = append(ids, d.ID)
			payload := string(d.Payload)
			if payload <= last[d.Key] {
				t.Errorf("key %s: %s fetched after %s", d.Key, payload, last[d.Key])
			}
			last[d.Key] = payload
			got[payload] = d.ID
		}
		// A key's next event is handed out once this one is acknowledged.
		if _, err := plain.Ack(ctx, ids...); err != nil {
			t.Fatal(err)
		}
	}
	for payload, id := range idOf {
		if got[payload] != id {
			t.Errorf("%s was acknowledged with id %s but stored under %q", payload, id, got[payload])
		}
	}
}

// TestPublishStreamErrors checks that a call refused on the stream gets
// the code and message the same call gets as a request, and that the
// stream goes on serving after it.
func TestPublishStreamErrors(t *testing.T) {
	forEachStream(t, testPublishStreamErrors)
}

func testPublishStreamErrors(t *testing.T, stream client.Option) {
	url, n := serveOrders(t, Options{}, 1)
	ctx := context.Background()
	streamed := client.New(url, stream)
	defer streamed.Close()
	plain := client.New(url)
	for name, tc := range map[string]struct {
		topic string
		event client.Event
		code  connect.Code
	}{
		"unknown topic":     {"nope", client.Event{Key: "k", Payload: []byte("x")}, connect.CodeNotFound},
		"invalid topic":     {"bad name!", client.Event{Key: "k", Payload: []byte("x")}, connect.CodeInvalidArgument},
		"oversized payload": {"orders", client.Event{Key: "k", Payload: make([]byte, node.DefaultMaxPayloadBytes+1)}, connect.CodeInvalidArgument},
	} {
		t.Run(name, func(t *testing.T) {
			_, want := plain.Publish(ctx, tc.topic, tc.event)
			_, err := streamed.Publish(ctx, tc.topic, tc.event)
			if connect.CodeOf(err) != tc.code || connect.CodeOf(want) != tc.code {
				t.Fatalf("stream: %v; request: %v; want code %v from both", err, want, tc.code)
			}
			if err.Error() != want.Error() {
				t.Errorf("stream says %q, a request %q", err, want)
			}
			if _, err := streamed.Publish(ctx, "orders", client.Event{Key: "k", Payload: []byte("ok")}); err != nil {
				t.Fatalf("the stream broke after the refusal: %v", err)
			}
		})
	}
	if pending := totals(t, n, "orders").Events; pending != 3 {
		t.Errorf("%d events pending, want the 3 accepted ones", pending)
	}
}

// TestPublishStreamNeedsAPublishToken checks that the stream opens only
// with a token of the publish scope.
func TestPublishStreamNeedsAPublishToken(t *testing.T) {
	forEachStream(t, testPublishStreamNeedsAPublishToken)
}

func testPublishStreamNeedsAPublishToken(t *testing.T, stream client.Option) {
	tt := makeTokens(t, time.Now())
	url, n := serveOrders(t, Options{Tokens: tt.store}, 1)
	ctx := context.Background()
	for token, code := range map[string]connect.Code{
		"":         connect.CodeUnauthenticated,
		"consume":  connect.CodePermissionDenied,
		"expired":  connect.CodeUnauthenticated,
		"not-real": connect.CodeUnauthenticated,
	} {
		secret := tt.secrets[token]
		if token == "not-real" {
			secret = "hrld_not-a-token"
		}
		c := client.New(url, client.WithToken(secret), stream)
		_, err := c.Publish(ctx, "orders", client.Event{Key: "k", Payload: []byte("x")})
		c.Close()
		if connect.CodeOf(err) != code || !strings.Contains(err.Error(), "publish scope") {
			t.Errorf("token %q: %v; want %v naming the publish scope", token, err, code)
		}
	}
	if pending := totals(t, n, "orders").Events; pending != 0 {
		t.Errorf("%d events were published without a publish token", pending)
	}
}

// forEachStream runs test with the Go client on each publish stream: the
// custom one, and the PublishStream RPC.
func forEachStream(t *testing.T, test func(*testing.T, client.Option)) {
	for name, opt := range map[string]client.Option{
		"custom": client.WithPublishStream(),
		"rpc":    client.WithPublishStreamRPC(),
	} {
		t.Run(name, func(t *testing.T) { test(t, opt) })
	}
}

// serveOrders serves a node with opts, holding a topic "orders" of
// shards shards, and returns its URL and the node.
func serveOrders(t *testing.T, opts Options, shards int) (string, *node.Node) {
	t.Helper()
	url, n := startAuthServer(t, opts)
	if _, err := n.CreateTopic(context.Background(), "orders", map[string]string{"shards": fmt.Sprint(shards)}); err != nil {
		t.Fatal(err)
	}
	return url, n
}

// httpGet returns the body of a GET of url.
func httpGet(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %s, %v", url, resp.Status, err)
	}
	return string(b)
}

// totals returns the counters of topic name, summed over its shards.
func totals(t *testing.T, n *node.Node, name string) node.QueueStats {
	t.Helper()
	st, err := n.TopicStats(context.Background(), name)
	if err != nil {
		t.Fatal(err)
	}
	return st.Total.Stats
}

// rawStream opens a publish stream by hand, for what the client never
// sends.
func rawStream(t *testing.T, url string) (net.Conn, *bufio.Reader) {
	t.Helper()
	conn, err := net.Dial("tcp", strings.TrimPrefix(url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	fmt.Fprintf(conn, "GET %s HTTP/1.1\r\nHost: herald\r\nConnection: Upgrade\r\nUpgrade: %s\r\n\r\n", protocol.PublishStreamPath, protocol.PublishStreamUpgrade)
	r := bufio.NewReader(conn)
	resp, err := http.ReadResponse(r, nil)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusSwitchingProtocols {
		t.Fatalf("opening the stream: %s", resp.Status)
	}
	return conn, r
}

// readAnswer reads one response frame.
func readAnswer(t *testing.T, r *bufio.Reader) (id uint64, code connect.Code, payload []byte) {
	t.Helper()
	id, body, err := protocol.ReadFrame(r, 1<<20, nil)
	if err != nil {
		t.Fatal(err)
	}
	c, _, payload, err := protocol.ParseResponse(body)
	if err != nil {
		t.Fatal(err)
	}
	return id, connect.Code(c), payload
}

func publishFrame(t *testing.T, id uint64, topic, payload string) []byte {
	t.Helper()
	body, err := proto.Marshal(&heraldv1.PublishRequest{Topic: topic, Events: []*heraldv1.PublishEvent{{Key: "k", Payload: []byte(payload)}}})
	if err != nil {
		t.Fatal(err)
	}
	return protocol.AppendFrame(nil, id, body)
}

// TestPublishStreamBadFrames sends what is not a publish request, and a
// request over the size limit: each is refused by id, and the stream
// serves the next request.
func TestPublishStreamBadFrames(t *testing.T) {
	url, _ := serveOrders(t, Options{}, 1)
	conn, r := rawStream(t, url)

	conn.Write(protocol.AppendFrame(nil, 7, []byte{0xff, 0xff, 0xff}))
	if id, code, msg := readAnswer(t, r); id != 7 || code != connect.CodeInvalidArgument || !strings.Contains(string(msg), "PublishRequest") {
		t.Errorf("garbage: answer %d %v %q; want 7, invalid_argument naming PublishRequest", id, code, msg)
	}

	big := protocol.AppendFrame(nil, 8, make([]byte, MaxRequestBytes+1))
	go conn.Write(big)
	if id, code, msg := readAnswer(t, r); id != 8 || code != connect.CodeInvalidArgument || !strings.Contains(string(msg), "fewer or smaller events") {
		t.Errorf("oversized: answer %d %v %q; want 8, invalid_argument saying what to do", id, code, msg)
	}

	conn.Write(publishFrame(t, 9, "orders", "fine"))
	if id, code, msg := readAnswer(t, r); id != 9 || code != connect.Code(protocol.CodeOK) {
		t.Errorf("good request after bad ones: answer %d %v %q", id, code, msg)
	}
}

// TestPublishStreamStop stops the server's streams while requests are
// queued: every request answered before the stream says it stops was
// published, and none after it was read.
func TestPublishStreamStop(t *testing.T) {
	stop := make(chan struct{})
	url, n := serveOrders(t, Options{Stop: stop}, 1)
	ctx := context.Background()
	conn, r := rawStream(t, url)
	const sent = 200
	var frames []byte
	for i := 1; i <= sent; i++ {
		frames = append(frames, publishFrame(t, uint64(i), "orders", fmt.Sprint(i))...)
	}
	conn.Write(frames[:len(frames)/2])
	answered := 0
	for ; answered < 10; answered++ {
		if _, code, msg := readAnswer(t, r); code != connect.Code(protocol.CodeOK) {
			t.Fatalf("before the stop: %v %q", code, msg)
		}
	}
	close(stop)
	go conn.Write(frames[len(frames)/2:])
	for {
		id, code, msg := readAnswer(t, r)
		if id == 0 {
			if code != connect.CodeUnavailable || !strings.Contains(string(msg), "shutting down") {
				t.Errorf("last frame: %v %q; want unavailable saying it shuts down", code, msg)
			}
			break
		}
		if code != connect.Code(protocol.CodeOK) {
			t.Fatalf("request %d: %v %q", id, code, msg)
		}
		answered++
	}
	if _, err := r.ReadByte(); err == nil {
		t.Error("the stream went on after saying it stops")
	}
	if pending := totals(t, n, "orders").Events; pending != int64(answered) {
		t.Errorf("%d events published, but %d answered", pending, answered)
	}
	t.Logf("%d of %d requests answered before the stop", answered, sent)

	c := client.New(url, client.WithPublishStream())
	defer c.Close()
	if _, err := c.Publish(ctx, "orders", client.Event{Key: "k", Payload: []byte("late")}); connect.CodeOf(err) != connect.CodeUnavailable {
		t.Errorf("publish on a stopped stream: %v; want unavailable", err)
	}
}

// TestPublishStreamEndsWhenItsTokenIsRevoked revokes the token of an open
// stream: within the recheck interval its calls are refused, the stream
// ends, and nothing refused was published.
func TestPublishStreamEndsWhenItsTokenIsRevoked(t *testing.T) {
	forEachStream(t, testPublishStreamEndsWhenItsTokenIsRevoked)
}

func testPublishStreamEndsWhenItsTokenIsRevoked(t *testing.T, stream client.Option) {
	tt := makeTokens(t, time.Now())
	url, n := serveOrders(t, Options{Tokens: tt.store}, 1)
	ctx := context.Background()
	c := client.New(url, client.WithToken(tt.secrets["publish"]), stream)
	defer c.Close()
	if _, err := c.Publish(ctx, "orders", client.Event{Key: "k", Payload: []byte("before")}); err != nil {
		t.Fatal(err)
	}
	revoke(t, tt, "publish")

	ok := 1
	deadline := time.Now().Add(time.Minute)
	for {
		_, err := c.Publish(ctx, "orders", client.Event{Key: "k", Payload: []byte("after")})
		if err == nil {
			ok++
			if time.Now().After(deadline) {
				t.Fatalf("%d publishes went through in a minute after the token was revoked", ok)
			}
			time.Sleep(10 * time.Millisecond)
			continue
		}
		if connect.CodeOf(err) != connect.CodeUnauthenticated || !strings.Contains(err.Error(), "publish scope") {
			t.Fatalf("after the revocation: %v; want unauthenticated naming the publish scope", err)
		}
		break
	}
	if pending := totals(t, n, "orders").Events; pending != int64(ok) {
		t.Errorf("%d events stored, but %d publishes succeeded", pending, ok)
	}
	if _, err := c.Publish(ctx, "orders", client.Event{Key: "k", Payload: []byte("again")}); connect.CodeOf(err) != connect.CodeUnauthenticated {
		t.Errorf("reopening with the revoked token: %v; want unauthenticated", err)
	}
}

// revoke takes the test token name out of the store.
func revoke(t *testing.T, tt testTokens, name string) {
	t.Helper()
	gone, _ := tt.store.Lookup(tokenID(t, tt, name))
	var others []auth.Token
	for name := range tt.secrets {
		if tok, ok := tt.store.Lookup(tokenID(t, tt, name)); ok && tok.ID != gone.ID {
			others = append(others, tok)
		}
	}
	tt.store.Replace(others)
}

// tokenID returns the id of the test token name.
func tokenID(t *testing.T, tt testTokens, name string) string {
	t.Helper()
	tok, err := tt.store.Authenticate(tt.secrets[name], time.Now())
	if err != nil && name != "expired" {
		t.Fatal(err)
	}
	return tok.ID
}

// TestPublishStreamSlowCallHoldsUpNoOther sends calls in one write, which
// the server publishes together, the first to a topic whose push endpoint
// hangs: the others are answered while it still waits, and it is
// answered once the endpoint answers.
func TestPublishStreamSlowCallHoldsUpNoOther(t *testing.T) {
	url, n := startSNSServer(t, 0) // its push endpoints may be on loopback
	if _, err := n.CreateTopic(context.Background(), "orders", map[string]string{"shards": "4"}); err != nil {
		t.Fatal(err)
	}
	release := make(chan struct{})
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		<-release
	}))
	defer hook.Close()
	defer close(release)
	if _, err := n.CreateTopic(context.Background(), "live", map[string]string{"persistent": "false", "push_endpoint": hook.URL}); err != nil {
		t.Fatal(err)
	}
	conn, r := rawStream(t, url)
	const calls = 10
	frames := publishFrame(t, 1, "live", "slow")
	for i := uint64(2); i <= calls; i++ {
		frames = append(frames, publishFrame(t, i, "orders", fmt.Sprint(i))...)
	}
	if _, err := conn.Write(frames); err != nil {
		t.Fatal(err)
	}
	conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	for range calls - 1 {
		id, code, msg := readAnswer(t, r)
		if id == 1 || code != connect.Code(protocol.CodeOK) {
			t.Fatalf("answer %d %v %q while the slow call's endpoint hangs; want the other calls answered, published", id, code, msg)
		}
	}
	release <- struct{}{}
	if id, code, msg := readAnswer(t, r); id != 1 || code != connect.Code(protocol.CodeOK) {
		t.Fatalf("answer %d %v %q once the endpoint answered; want call 1, published", id, code, msg)
	}
}
