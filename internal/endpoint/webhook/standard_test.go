package webhook

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"

	"herald/internal/endpoint"
	"herald/internal/topic"
)

// Secrets in the form the specification gives them: whsec_ and base64.
const (
	secretOld   = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	secretNew   = "whsec_c2VjcmV0LWtleS1udW1iZXItdHdvLTEyMzQ1Njc4"
	secretOther = "whsec_b3RoZXItc2VjcmV0LW5vdC1zaWduaW5nLXdpdGg="
)

// received is one request a test server got.
type received struct {
	header http.Header
	body   []byte
}

func receiver(t *testing.T, status int, header http.Header) (*httptest.Server, <-chan received) {
	got := make(chan received, 10)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		got <- received{r.Header.Clone(), b}
		for k, v := range header {
			w.Header()[k] = v
		}
		w.WriteHeader(status)
	}))
	t.Cleanup(srv.Close)
	return srv, got
}

// TestStandardWebhooksSignaturesVerifyWithTheReferenceLibrary signs with
// two secrets, as while a secret rotates, and checks each signature with
// the specification's own Go library.
func TestStandardWebhooksSignaturesVerifyWithTheReferenceLibrary(t *testing.T) {
	srv, got := receiver(t, http.StatusNoContent, nil)
	a := attributes(srv.URL)
	a.SignatureScheme = topic.SignatureStandardWebhooks
	a.SigningSecret = secretNew + " " + secretOld
	e := startEndpoint(t, a)
	m := message(17)
	if err := e.Send(context.Background(), m); err != nil {
		t.Fatal(err)
	}
	r := <-got
	if id := r.header.Get("webhook-id"); id != m.ID {
		t.Errorf("webhook-id %q, want the event id %q", id, m.ID)
	}
	if sigs := strings.Fields(r.header.Get("webhook-signature")); len(sigs) != 2 || !strings.HasPrefix(sigs[0], "v1,") {
		t.Errorf("webhook-signature %q, want two v1 signatures", r.header.Get("webhook-signature"))
	}
	if r.header.Get(HeaderSignature) != "" || r.header.Get(HeaderTimestamp) != "" {
		t.Errorf("the herald scheme's headers were sent too: %v", r.header)
	}
	// The timestamp is the time of sending; the library's tolerance check
	// would make this test depend on the clock, so it is left out.
	for _, secret := range []string{secretOld, secretNew} {
		wh, err := standardwebhooks.NewWebhook(secret)
		if err != nil {
			t.Fatal(err)
		}
		if err := wh.VerifyIgnoringTimestamp(r.body, r.header); err != nil {
			t.Errorf("reference library, secret %s: %v", secret, err)
		}
	}
	wh, _ := standardwebhooks.NewWebhook(secretOther)
	if err := wh.VerifyIgnoringTimestamp(r.body, r.header); err == nil {
		t.Error("a secret the topic does not have verified the request")
	}
	tampered := append([]byte(nil), r.body...)
	tampered[len(tampered)-2] ^= 1
	wh, _ = standardwebhooks.NewWebhook(secretOld)
	if err := wh.VerifyIgnoringTimestamp(tampered, r.header); err == nil {
		t.Error("a changed body verified")
	}
}

// TestStandardWebhooksSignatureMatchesTheLibrarysSign compares with the
// specification's published example and with the reference library's own
// signing at fixed ids and times.
func TestStandardWebhooksSignatureMatchesTheLibrarysSign(t *testing.T) {
	keys, err := topic.StandardWebhooksKeys(secretOld)
	if err != nil {
		t.Fatal(err)
	}
	const published = "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="
	if got := signStandard(keys, "msg_p5jXN8AQM9LWM0D4loKWxJek", "1614265330", []byte(`{"test": 2432232314}`)); got != published {
		t.Errorf("the specification's example: %q, want %q", got, published)
	}
	wh, _ := standardwebhooks.NewWebhook(secretOld)
	for _, c := range []struct {
		id   string
		ts   int64
		body string
	}{
		{"msg_p5jXN8AQM9LWM0D4loKWxJek", 1614265330, `{"test": 2432232314}`},
		{"orders/2/17", 1763719200, `{"id":"orders/2/17"}`},
	} {
		want, err := wh.Sign(c.id, time.Unix(c.ts, 0), []byte(c.body))
		if err != nil {
			t.Fatal(err)
		}
		if got := signStandard(keys, c.id, strconv.FormatInt(c.ts, 10), []byte(c.body)); got != want {
			t.Errorf("%s: signature %q, the library's %q", c.id, got, want)
		}
	}
}

func TestRetryAfter(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	for _, c := range []struct {
		status int
		value  string
		want   time.Duration
		ok     bool
	}{
		{503, "7", 7 * time.Second, true},
		{429, "0", 0, true},
		{429, now.Add(90 * time.Second).Format(http.TimeFormat), 90 * time.Second, true},
		{503, now.Add(-time.Minute).Format(http.TimeFormat), 0, true}, // in the past: at once
		{503, "999999", time.Hour, true},                              // capped
		{503, "99999999999999999999", time.Hour, true},                // too large to parse: capped too
		{503, "soon", 0, false},
		{503, "", 0, false},
		{500, "7", 0, false}, // only 429 and 503 say when
	} {
		resp := &http.Response{StatusCode: c.status, Header: http.Header{}}
		if c.value != "" {
			resp.Header.Set("Retry-After", c.value)
		}
		got, ok := retryAfter(resp, now)
		if got != c.want || ok != c.ok {
			t.Errorf("%d Retry-After %q: %v %v, want %v %v", c.status, c.value, got, ok, c.want, c.ok)
		}
	}
}

func TestSendReportsRetryAfter(t *testing.T) {
	srv, _ := receiver(t, http.StatusServiceUnavailable, http.Header{"Retry-After": {"7"}})
	err := startEndpoint(t, attributes(srv.URL)).Send(context.Background(), message(1))
	if after, ok := endpoint.RetryAfter(err); !ok || after != 7*time.Second || endpoint.IsPermanent(err) {
		t.Fatalf("503 with Retry-After 7: %v (after %v, %v), want a retryable error asking for 7s", err, after, ok)
	}
}

// TestSendReportsRetryAfterDate: an HTTP date in Retry-After is counted
// from the endpoint's clock, here a fixed one, so the test does not depend
// on the wall clock.
func TestSendReportsRetryAfterDate(t *testing.T) {
	now := time.Date(2026, 11, 21, 10, 0, 0, 0, time.UTC)
	srv, _ := receiver(t, http.StatusTooManyRequests, http.Header{"Retry-After": {now.Add(2 * time.Minute).Format(http.TimeFormat)}})
	e := startEndpoint(t, attributes(srv.URL))
	e.now = func() time.Time { return now }
	err := e.Send(context.Background(), message(1))
	if after, ok := endpoint.RetryAfter(err); !ok || after != 2*time.Minute {
		t.Fatalf("429 with Retry-After two minutes ahead: %v (after %v, %v), want a pause of 2m", err, after, ok)
	}
}

// TestSendIgnoresGarbageRetryAfter: a Retry-After that is neither form is
// no advice; the error is an ordinary retryable one.
func TestSendIgnoresGarbageRetryAfter(t *testing.T) {
	srv, _ := receiver(t, http.StatusServiceUnavailable, http.Header{"Retry-After": {"in a bit"}})
	err := startEndpoint(t, attributes(srv.URL)).Send(context.Background(), message(1))
	if _, ok := endpoint.RetryAfter(err); ok || err == nil || endpoint.IsPermanent(err) {
		t.Fatalf("503 with Retry-After %q: %v, want a retryable error without advice", "in a bit", err)
	}
}

// TestSendGone: 410 says the endpoint no longer exists. The error is
// ErrGone, for a dispatcher that disables endpoints, and permanent, for
// callers that do not.
func TestSendGone(t *testing.T) {
	srv := answering(t, http.StatusGone, "subscription deleted")
	err := startEndpoint(t, attributes(srv.URL)).Send(context.Background(), message(1))
	if !errors.Is(err, endpoint.ErrGone) || !endpoint.IsPermanent(err) {
		t.Fatalf("Send to a receiver answering 410 = %v, want an ErrGone error that is permanent", err)
	}
	var se *StatusError
	if !errors.As(err, &se) || se.StatusCode != http.StatusGone {
		t.Errorf("error %v does not hold the 410 StatusError", err)
	}
	for _, want := range []string{"410 Gone", "subscription deleted", "orders/2/1"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not mention %q", err, want)
		}
	}
}

// TestSignMatchesVerify: Sign, for herald's other requests, makes the
// signature Verify accepts and deliveries carry.
func TestSignMatchesVerify(t *testing.T) {
	body := []byte(`{"type":"subscription.disabled"}`)
	sig := Sign("s3cret", "1763719200", body)
	if !Verify("s3cret", "1763719200", body, sig) {
		t.Fatalf("Verify refused Sign's %q", sig)
	}
	if sig != sign([]byte("s3cret"), "1763719200", body) {
		t.Fatal("Sign differs from what deliveries carry")
	}
	if Sign("", "1763719200", body) != "" {
		t.Fatal("Sign signed with an empty secret")
	}
}
