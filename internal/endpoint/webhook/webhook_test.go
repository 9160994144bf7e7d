package webhook

import (
	"context"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"herald/internal/endpoint"
	"herald/internal/endpoint/endpointtest"
	"herald/internal/testkit"
	"herald/internal/topic"
)

// attributes returns valid attributes of a topic pushing to pushEndpoint.
func attributes(pushEndpoint string) topic.Attributes {
	a := topic.Defaults()
	a.PushEndpoint = pushEndpoint
	return a
}

func startEndpoint(t testing.TB, a topic.Attributes) *Endpoint {
	t.Helper()
	e, err := New("orders", a, endpointtest.Guard(t))
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() { e.Close() })
	return e
}

func message(offset uint64) *endpoint.Message {
	return &endpoint.Message{
		ID:         fmt.Sprintf("orders/2/%d", offset),
		Topic:      "orders",
		Shard:      2,
		Offset:     offset,
		Key:        "customer-42",
		Time:       time.Date(2026, 11, 21, 10, 0, 0, 123e6, time.UTC),
		Payload:    []byte(`{"total": 42}`),
		OpaqueData: "tenant-7",
		Attempt:    1,
	}
}

// request is what a test server received.
type request struct {
	method, host, path string
	header             http.Header
	body               []byte
}

// recorder returns a server that answers 204 and records every request.
func recorder(t *testing.T) (*httptest.Server, <-chan request) {
	got := make(chan request, 100)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			t.Errorf("server: read body: %v", err)
		}
		got <- request{r.Method, r.Host, r.URL.Path, r.Header, body}
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(srv.Close)
	return srv, got
}

// answering returns a server that answers every request with status and body.
func answering(t *testing.T, status int, body string) *httptest.Server {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(status)
		io.WriteString(w, body)
	}))
	t.Cleanup(srv.Close)
	return srv
}

func TestSendHealthy(t *testing.T) {
	srv, got := recorder(t)
	a := attributes(srv.URL + "/hooks/orders?token=abc")
	a.SigningSecret = "s3cr3t"
	a.HTTPHeaders = map[string]string{
		"X-Api-Key":      "k1",
		"X-Herald-Topic": "forged", // must not replace herald's own
		"Host":           "hooks.example",
	}
	e := startEndpoint(t, a)
	m := message(17)
	m.Attempt = 3
	m.Headers = map[string]string{"trace": "t-1"}
	before := time.Now().Unix()
	if err := e.Send(context.Background(), m); err != nil {
		t.Fatalf("Send: %v", err)
	}
	r := <-got

	if r.method != http.MethodPost || r.path != "/hooks/orders" || r.host != "hooks.example" {
		t.Errorf("request %s %s%s, want POST hooks.example/hooks/orders", r.method, r.host, r.path)
	}
	var env struct {
		ID         string            `json:"id"`
		Topic      string            `json:"topic"`
		Key        string            `json:"key"`
		Headers    map[string]string `json:"headers"`
		Payload    json.RawMessage   `json:"payload"`
		OpaqueData string            `json:"opaque_data"`
		Attempt    int               `json:"attempt"`
	}
	if err := json.Unmarshal(r.body, &env); err != nil {
		t.Fatalf("body %s is not the JSON envelope: %v", r.body, err)
	}
	if env.ID != "orders/2/17" || env.Topic != "orders" || env.Key != "customer-42" ||
		string(env.Payload) != `{"total":42}` || env.OpaqueData != "tenant-7" ||
		env.Attempt != 3 || env.Headers["trace"] != "t-1" {
		t.Errorf("envelope %s does not match the message", r.body)
	}

	for name, want := range map[string]string{
		"Content-Type":         "application/json",
		"User-Agent":           "herald",
		"X-Api-Key":            "k1",
		endpoint.HeaderEventID: "orders/2/17",
		endpoint.HeaderTopic:   "orders",
		endpoint.HeaderAttempt: "3",
		endpoint.HeaderKey:     "customer-42",
	} {
		if v := r.header.Get(name); v != want {
			t.Errorf("header %s = %q, want %q", name, v, want)
		}
	}
	if n := len(r.header.Values(endpoint.HeaderTopic)); n != 1 {
		t.Errorf("%d %s headers, want 1", n, endpoint.HeaderTopic)
	}

	ts, sig := r.header.Get(HeaderTimestamp), r.header.Get(HeaderSignature)
	sec, err := strconv.ParseInt(ts, 10, 64)
	if err != nil || sec < before || sec > time.Now().Unix() {
		t.Errorf("%s = %q, want the Unix time of the request", HeaderTimestamp, ts)
	}
	if !Verify("s3cr3t", ts, r.body, sig) {
		t.Errorf("Verify rejects the delivered signature %q", sig)
	}
	if Verify("wrong", ts, r.body, sig) {
		t.Error("Verify accepts the signature with the wrong secret")
	}
	tampered := append([]byte(nil), r.body...)
	tampered[len(tampered)-2] ^= 1
	if Verify("s3cr3t", ts, tampered, sig) {
		t.Error("Verify accepts a tampered body")
	}
	if Verify("s3cr3t", strconv.FormatInt(sec+60, 10), r.body, sig) {
		t.Error("Verify accepts a changed timestamp, so old requests could be replayed")
	}
}

func TestSendUnsigned(t *testing.T) {
	srv, got := recorder(t)
	e := startEndpoint(t, attributes(srv.URL))
	if err := e.Send(context.Background(), message(1)); err != nil {
		t.Fatalf("Send: %v", err)
	}
	r := <-got
	if _, ok := r.header[HeaderSignature]; ok {
		t.Errorf("unsigned topic sent %s", HeaderSignature)
	}
	if _, ok := r.header[HeaderTimestamp]; ok {
		t.Errorf("unsigned topic sent %s", HeaderTimestamp)
	}
}

// An event encoded by a wrapper (package envelope) is delivered as it was
// encoded, with its content type and headers, and herald's headers and
// signature still.
func TestSendEncoded(t *testing.T) {
	srv, got := recorder(t)
	a := attributes(srv.URL)
	a.SigningSecret = "s3cret"
	a.HTTPHeaders = map[string]string{"Content-Type": "application/x-mine", "X-Team": "a"}
	e := startEndpoint(t, a)
	m := message(1)
	m.Encoded = &endpoint.Encoded{Body: []byte("as encoded"), ContentType: "text/plain; charset=UTF-8",
		Headers: map[string]string{"x-amz-sns-message-type": "Notification", endpoint.HeaderEventID: "forged"}}
	if err := e.Send(context.Background(), m); err != nil {
		t.Fatalf("Send: %v", err)
	}
	r := <-got
	if string(r.body) != "as encoded" {
		t.Errorf("body %q, want the encoded one", r.body)
	}
	for name, want := range map[string]string{
		"Content-Type": "text/plain; charset=UTF-8", "X-Amz-Sns-Message-Type": "Notification",
		"X-Team": "a", endpoint.HeaderEventID: m.ID,
	} {
		if got := r.header.Get(name); got != want {
			t.Errorf("header %s = %q, want %q", name, got, want)
		}
	}
	if !Verify("s3cret", r.header.Get(HeaderTimestamp), r.body, r.header.Get(HeaderSignature)) {
		t.Error("the encoded body is not signed")
	}
}

// Keys are arbitrary strings; a newline in a header would fail every
// delivery of the event.
func TestSendKeyHeader(t *testing.T) {
	srv, got := recorder(t)
	e := startEndpoint(t, attributes(srv.URL))
	for _, key := range []string{"customer-42", "", "a b", "line\nbreak", "ü/ß?x=%41", " padded "} {
		m := message(1)
		m.Key = key
		if err := e.Send(context.Background(), m); err != nil {
			t.Fatalf("Send with key %q: %v", key, err)
		}
		r := <-got
		h := r.header.Get(endpoint.HeaderKey)
		if k, err := url.PathUnescape(h); err != nil || k != key {
			t.Errorf("key %q sent as %s %q, which decodes to %q (%v)", key, endpoint.HeaderKey, h, k, err)
		}
	}
}

func TestSendRetryableStatus(t *testing.T) {
	for _, status := range []int{http.StatusTooManyRequests, http.StatusInternalServerError, http.StatusServiceUnavailable} {
		t.Run(strconv.Itoa(status), func(t *testing.T) {
			// The receiver fails once, then recovers.
			var calls atomic.Int32
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if calls.Add(1) == 1 {
					http.Error(w, "busy, try later", status)
					return
				}
				w.WriteHeader(http.StatusOK)
			}))
			defer srv.Close()
			e := startEndpoint(t, attributes(srv.URL))

			err := e.Send(context.Background(), message(1))
			if err == nil || endpoint.IsPermanent(err) {
				t.Fatalf("Send to a receiver answering %d = %v, want a retryable error", status, err)
			}
			var se *StatusError
			if !errors.As(err, &se) || se.StatusCode != status {
				t.Errorf("error %v does not hold a StatusError of %d", err, status)
			}
			for _, want := range []string{"orders/2/1", strconv.Itoa(status), "busy, try later"} {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error %q does not mention %q", err, want)
				}
			}
			if err := e.Send(context.Background(), message(1)); err != nil {
				t.Errorf("Send to the recovered receiver: %v", err)
			}
		})
	}
}

func TestSendPermanentStatus(t *testing.T) {
	for _, tc := range []struct {
		status int
		want   string
	}{
		{http.StatusBadRequest, "400 Bad Request"},
		{http.StatusNotFound, "404 Not Found"},
		{http.StatusUnauthorized, "401 Unauthorized"},
	} {
		t.Run(strconv.Itoa(tc.status), func(t *testing.T) {
			srv := answering(t, tc.status, `{"error": "missing field customer"}`+"\n")
			e := startEndpoint(t, attributes(srv.URL))
			err := e.Send(context.Background(), message(1))
			if !endpoint.IsPermanent(err) {
				t.Fatalf("Send to a receiver answering %d = %v, want a permanent error", tc.status, err)
			}
			for _, want := range []string{tc.want, `{"error": "missing field customer"}`} {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error %q does not mention %q", err, want)
				}
			}
		})
	}
}

func TestSendRedirectNotFollowed(t *testing.T) {
	var followed atomic.Int32
	mux := http.NewServeMux()
	mux.HandleFunc("/old", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "/new", http.StatusFound)
	})
	mux.HandleFunc("/new", func(w http.ResponseWriter, r *http.Request) { followed.Add(1) })
	srv := httptest.NewServer(mux)
	defer srv.Close()
	e := startEndpoint(t, attributes(srv.URL+"/old"))

	err := e.Send(context.Background(), message(1))
	if !endpoint.IsPermanent(err) {
		t.Fatalf("Send to a redirect = %v, want a permanent error", err)
	}
	for _, want := range []string{"302 Found", "/new", "not followed"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not mention %q", err, want)
		}
	}
	if n := followed.Load(); n != 0 {
		t.Errorf("the redirect was followed %d times", n)
	}
}

func TestSendTimeout(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
		case <-release:
		case <-time.After(10 * time.Second): // fail, rather than hang, if the timeout is lost
		}
	}))
	defer srv.Close()
	defer close(release)
	a := attributes(srv.URL)
	a.HTTPTimeout = 1
	e := startEndpoint(t, a)

	start := time.Now()
	err := e.Send(context.Background(), message(1))
	took := time.Since(start)
	if err == nil || endpoint.IsPermanent(err) {
		t.Fatalf("Send to a receiver that does not answer = %v, want a retryable error", err)
	}
	if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "no response within http_timeout (1s)") {
		t.Errorf("error %q does not say the attempt timed out", err)
	}
	if took < time.Second || took > 5*time.Second {
		t.Errorf("Send gave up after %v, want about http_timeout, 1s", took)
	}
}

func TestSendCanceled(t *testing.T) {
	srv, _ := recorder(t)
	e := startEndpoint(t, attributes(srv.URL))
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	err := e.Send(ctx, message(1))
	if err == nil || endpoint.IsPermanent(err) || !errors.Is(err, context.Canceled) {
		t.Fatalf("Send with a canceled context = %v, want a retryable context.Canceled", err)
	}
	if strings.Contains(err.Error(), "http_timeout") {
		t.Errorf("error %q blames http_timeout for a cancellation", err)
	}
}

func TestSendConnectionRefused(t *testing.T) {
	addr := testkit.FreeAddr(t) // nothing listens there
	e := startEndpoint(t, attributes("http://"+addr+"/hooks?token=secret-token"))

	err := e.Send(context.Background(), message(1))
	if err == nil || endpoint.IsPermanent(err) {
		t.Fatalf("Send to a closed port = %v, want a retryable error", err)
	}
	if !errors.Is(err, syscall.ECONNREFUSED) || !strings.Contains(err.Error(), "connection refused") {
		t.Errorf("error %q does not say the connection was refused", err)
	}
	if strings.Contains(err.Error(), "secret-token") {
		t.Errorf("error %q shows the URL's query, which may hold a credential", err)
	}
}

func TestSendTLS(t *testing.T) {
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	srv.Config.ErrorLog = log.New(io.Discard, "", 0) // the untrusted handshake is expected to fail
	srv.StartTLS()
	defer srv.Close()
	caFile := filepath.Join(t.TempDir(), "ca.pem")
	pemCert := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})
	if err := os.WriteFile(caFile, pemCert, 0o600); err != nil {
		t.Fatal(err)
	}

	t.Run("untrusted", func(t *testing.T) {
		e := startEndpoint(t, attributes(srv.URL))
		err := e.Send(context.Background(), message(1))
		if err == nil || endpoint.IsPermanent(err) {
			t.Fatalf("Send to an untrusted certificate = %v, want a retryable error", err)
		}
		if !strings.Contains(err.Error(), "certificate") || !strings.Contains(err.Error(), "tls_ca_file") {
			t.Errorf("error %q does not say the certificate is not trusted and what to do", err)
		}
	})
	t.Run("tls_ca_file", func(t *testing.T) {
		a := attributes(srv.URL)
		a.TLSCAFile = caFile
		if err := startEndpoint(t, a).Send(context.Background(), message(1)); err != nil {
			t.Errorf("Send trusting the server's CA: %v", err)
		}
	})
	t.Run("tls_insecure_skip_verify", func(t *testing.T) {
		a := attributes(srv.URL)
		a.TLSInsecureSkipVerify = true
		if err := startEndpoint(t, a).Send(context.Background(), message(1)); err != nil {
			t.Errorf("Send without verification: %v", err)
		}
	})
}

func TestNewErrors(t *testing.T) {
	bad := testkit.WriteBadCAFiles(t)

	for _, tc := range []struct {
		name   string
		change func(*topic.Attributes)
		want   []string
	}{
		{"scheme", func(a *topic.Attributes) { a.PushEndpoint = "amqp://broker/x" }, []string{"amqp://broker/x", "not an http"}},
		{"no host", func(a *topic.Attributes) { a.PushEndpoint = "http:///x" }, []string{"no host"}},
		{"unparsable", func(a *topic.Attributes) { a.PushEndpoint = "http://user:pw@[::1/x" }, []string{"invalid push_endpoint"}},
		{"password shown", func(a *topic.Attributes) { a.PushEndpoint = "ftp://user:hunter2@host/" }, []string{"ftp://user:xxxxx@host/"}},
		{"query shown", func(a *topic.Attributes) { a.PushEndpoint = "ftp://host/x?token=hunter2" }, []string{"ftp://host/x?token=xxxxx"}},
		{"unparsable, query", func(a *topic.Attributes) { a.PushEndpoint = "http://bad host/x?token=hunter2" }, []string{"http://bad host/x?token=xxxxx", "invalid character in host name"}},
		{"timeout", func(a *topic.Attributes) { a.HTTPTimeout = 0 }, []string{"http_timeout", "got 0"}},
		{"missing CA", func(a *topic.Attributes) { a.TLSCAFile = bad.Missing }, []string{bad.Missing, "no such file"}},
		{"garbage CA", func(a *topic.Attributes) { a.TLSCAFile = bad.Garbage }, []string{bad.Garbage, "no PEM certificate"}},
		{"key, not CA", func(a *topic.Attributes) { a.TLSCAFile = bad.KeyOnly }, []string{bad.KeyOnly, "no PEM certificate"}},
		{"corrupt CA", func(a *topic.Attributes) { a.TLSCAFile = bad.Corrupt }, []string{bad.Corrupt, "certificate 1"}},
		{"header name", func(a *topic.Attributes) { a.HTTPHeaders = map[string]string{"X Bad": "v"} }, []string{`"X Bad"`}},
		{"header value", func(a *topic.Attributes) { a.HTTPHeaders = map[string]string{"X-Ok": "a\r\nX-Evil: 1"} }, []string{"X-Ok", "control character"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := attributes("https://hooks.example/x")
			tc.change(&a)
			e, err := New("orders", a, endpointtest.Guard(t))
			if err == nil {
				e.Close()
				t.Fatal("New succeeded")
			}
			for _, want := range append(tc.want, "topic orders") {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error %q does not mention %q", err, want)
				}
			}
			if strings.Contains(err.Error(), "hunter2") || strings.Contains(err.Error(), ":pw@") {
				t.Errorf("error %q shows the password", err)
			}
		})
	}
}

func TestSendConcurrent(t *testing.T) {
	srv, got := recorder(t)
	e := startEndpoint(t, attributes(srv.URL))
	const n = 100
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			if err := e.Send(context.Background(), message(uint64(i))); err != nil {
				t.Errorf("Send %d: %v", i, err)
			}
		})
	}
	wg.Wait()
	seen := make(map[string]bool)
	for range n {
		r := <-got
		seen[r.header.Get(endpoint.HeaderEventID)] = true
	}
	if len(seen) != n {
		t.Errorf("receiver saw %d distinct events, want %d", len(seen), n)
	}
}

// Error responses are read to the end, so the connection is used again
// rather than a new one opened for each delivery.
func TestSendReusesConnections(t *testing.T) {
	var conns atomic.Int32
	var calls atomic.Int32
	errorPage := strings.Repeat("error page ", 1000) // more than the quoted snippet
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if calls.Add(1)%2 == 0 {
			http.Error(w, errorPage, http.StatusBadRequest)
			return
		}
		w.Write([]byte("ok"))
	}))
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns.Add(1)
		}
	}
	srv.Start()
	defer srv.Close()
	e := startEndpoint(t, attributes(srv.URL))
	for i := range 20 {
		e.Send(context.Background(), message(uint64(i)))
	}
	if n := conns.Load(); n != 1 {
		t.Errorf("20 sequential sends opened %d connections, want 1", n)
	}
}

func TestSendTruncatesResponse(t *testing.T) {
	srv := answering(t, http.StatusInternalServerError, "first line\n\tsecond\x00line "+strings.Repeat("é", 10000))
	e := startEndpoint(t, attributes(srv.URL))
	err := e.Send(context.Background(), message(1))
	var se *StatusError
	if !errors.As(err, &se) {
		t.Fatalf("Send = %v, want a StatusError", err)
	}
	if !strings.HasPrefix(se.Body, "first line second line éé") || !strings.HasSuffix(se.Body, "é …") {
		t.Errorf("response body quoted as %q, want it on one line and cut short", se.Body)
	}
	if len(se.Body) > snippetBytes+10 {
		t.Errorf("response body quoted in %d bytes, want at most about %d", len(se.Body), snippetBytes)
	}
	if len(err.Error()) > 2*snippetBytes {
		t.Errorf("error is %d bytes long: %q", len(err.Error()), err)
	}
}

func TestClose(t *testing.T) {
	closed := make(chan struct{}, 1)
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateClosed {
			select {
			case closed <- struct{}{}:
			default:
			}
		}
	}
	srv.Start()
	defer srv.Close()
	e := startEndpoint(t, attributes(srv.URL))
	if err := e.Send(context.Background(), message(1)); err != nil {
		t.Fatalf("Send: %v", err)
	}
	select {
	case <-closed:
		t.Fatal("the connection closed before Close")
	case <-time.After(50 * time.Millisecond):
	}
	if err := e.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	select {
	case <-closed:
	case <-time.After(5 * time.Second):
		t.Error("the idle connection is still open 5s after Close")
	}
}

func TestVerify(t *testing.T) {
	// Computed with: printf '1700000000.{"a":1}' | openssl dgst -sha256 -hmac s3cr3t
	const want = "sha256=8dbbbbf4523b10bbb793e74d854144c45acccc2d233667b1c06b805b6ded8a84"
	body := []byte(`{"a":1}`)
	if got := sign([]byte("s3cr3t"), "1700000000", body); got != want {
		t.Errorf("sign = %s, want %s", got, want)
	}
	for _, tc := range []struct {
		secret, ts, sig string
		ok              bool
	}{
		{"s3cr3t", "1700000000", want, true},
		{"s3cr3t", "1700000000", strings.ToUpper(want[:7]) + want[7:], false},
		{"s3cr3t", "1700000000", want[:7] + strings.ToUpper(want[7:]), true},
		{"s3cr3t", "1700000001", want, false},
		{"s3cr3t", "1700000000", want[7:], false},
		{"s3cr3t", "1700000000", want[:len(want)-2], false},
		{"s3cr3t", "1700000000", want + "00", false},
		{"s3cr3t", "1700000000", "sha256=zz", false},
		{"s3cr3t", "1700000000", "", false},
		{"other", "1700000000", want, false},
		{"", "1700000000", sign(nil, "1700000000", body), false},
	} {
		if got := Verify(tc.secret, tc.ts, body, tc.sig); got != tc.ok {
			t.Errorf("Verify(%q, %q, body, %q) = %v, want %v", tc.secret, tc.ts, tc.sig, got, tc.ok)
		}
	}
}

// BenchmarkSend measures deliveries to a local receiver from many
// goroutines at once, as the dispatcher sends them.
func BenchmarkSend(b *testing.B) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.WriteHeader(http.StatusNoContent)
	}))
	defer srv.Close()
	a := attributes(srv.URL)
	a.SigningSecret = "s3cr3t"
	e := startEndpoint(b, a)
	var offset atomic.Uint64
	b.SetParallelism(8)
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if err := e.Send(context.Background(), message(offset.Add(1))); err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "sends/s")
}

// Connections opened for a burst of concurrent sends stay open for the
// next burst, instead of all but a few being closed and opened again.
func TestSendKeepsConnectionsForConcurrentSends(t *testing.T) {
	const n = 50
	var conns atomic.Int32
	var arrived sync.WaitGroup
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// Hold every request until the whole burst has arrived, so each
		// needs a connection of its own.
		arrived.Done()
		arrived.Wait()
	}))
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns.Add(1)
		}
	}
	srv.Start()
	defer srv.Close()
	e := startEndpoint(t, attributes(srv.URL))
	for burst := range 2 {
		arrived.Add(n)
		var wg sync.WaitGroup
		for i := range n {
			wg.Go(func() {
				if err := e.Send(context.Background(), message(uint64(i))); err != nil {
					t.Errorf("burst %d: Send: %v", burst, err)
				}
			})
		}
		wg.Wait()
		time.Sleep(100 * time.Millisecond) // let the connections go back to the pool
	}
	if got := conns.Load(); got > n+n/5 {
		t.Errorf("two bursts of %d concurrent sends opened %d connections, want about %d", n, got, n)
	}
}
