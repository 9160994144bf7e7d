// Package webhook delivers herald events to HTTP and HTTPS push endpoints:
// topics whose push_endpoint is an http:// or https:// URL.
//
// # Requests
//
// Each delivery attempt is one POST of [endpoint.Body]: herald's JSON
// envelope, or the S3 event records when the event is an S3 notification.
// The request carries these headers:
//
//	Content-Type: application/json
//	User-Agent: herald
//	X-Herald-Event-Id: orders/2/17   the event id, what receivers de-duplicate on
//	X-Herald-Topic: orders
//	X-Herald-Attempt: 1              1 for the first attempt
//	X-Herald-Key: customer-42        the event key, percent-encoded
//
// and the topic's http_headers, which may replace Content-Type, User-Agent
// and Host but never an X-Herald header. An event that a wrapper has
// encoded in another format ([endpoint.Encoded], such as SNS's JSON
// notification of package envelope) is sent as it was encoded, its
// content type and headers replacing those, again except X-Herald ones. Event keys may contain bytes that
// a header cannot, so X-Herald-Key is percent-encoded as by
// [url.PathEscape] ([url.PathUnescape] restores it); the body carries the
// key verbatim.
//
// Delivery is at least once: a receiver may see an event again, for
// example when its 2xx response was lost, and should de-duplicate on the
// event id.
//
// # Signatures
//
// When the topic has a signing_secret, every attempt also carries
//
//	X-Herald-Timestamp: 1763719200
//	X-Herald-Signature: sha256=<64 hex digits>
//
// The timestamp is the Unix time, in seconds, at which the attempt was
// sent. The signature is the lowercase hex HMAC-SHA256, keyed with the
// secret, of the timestamp, a '.', and the body exactly as sent:
//
//	"sha256=" + hex(HMAC-SHA256(secret, timestamp + "." + body))
//
// A receiver recomputes it over the raw body before parsing it and
// compares in constant time, as [Verify] does, which proves that the
// request came from a holder of the secret and was not altered. It must
// also reject a timestamp more than a few minutes away from its own clock:
// the timestamp is signed, so that is what stops a captured request from
// being replayed later. Each attempt is signed afresh, so a retry after a
// long outage is not stale.
//
// With signature_scheme standard-webhooks, deliveries are signed as the
// Standard Webhooks specification says instead, so that its libraries
// verify them:
//
//	webhook-id: orders/2/17                 the event id
//	webhook-timestamp: 1763719200
//	webhook-signature: v1,<base64> v1,<base64>
//
// Each "v1," signature is the base64 HMAC-SHA256 of id, '.', timestamp,
// '.' and the body, keyed with one of the topic's whsec_ secrets (the
// base64-decoded part after "whsec_"); with several secrets, during a
// rotation, there is one signature per secret.
//
// # Responses
//
// A 2xx response means the receiver has the event. 429 and 5xx responses,
// network errors and attempts that take longer than http_timeout are
// retryable errors; after a 429 or 503 with Retry-After the dispatcher
// sends nothing to the endpoint, from that shard, before the time it asks
// for (at most an hour). Every other status is a permanent error
// ([endpoint.Permanent]) and the event goes to the dead-letter queue with
// the status and the start of the response body, with one exception: 410
// Gone says that the endpoint no longer exists, and is an [endpoint.ErrGone]
// error, on which a dispatcher with a disable policy disables the endpoint
// and keeps the event (without one, it is dead-lettered like the rest).
// The permanent statuses include 3xx:
// redirects are not followed, because following one would turn the POST
// into a GET or send the signed event to another host; the fix is to set
// push_endpoint to the final URL.
package webhook

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
	"unicode"

	"herald/internal/endpoint"
	"herald/internal/topic"
)

// The headers herald adds to signed requests, besides the endpoint.Header* ones
// every request carries.
const (
	HeaderTimestamp = "X-Herald-Timestamp"
	HeaderSignature = "X-Herald-Signature"
)

const (
	// maxIdleConns is how many keep-alive connections to the endpoint stay
	// open between requests. The dispatcher sends events of different keys
	// in parallel; with fewer idle connections than concurrent sends, every
	// burst would open (and handshake) new ones.
	maxIdleConns = 256

	// snippetBytes is how much of an error response is quoted in the error,
	// and so in the dead-letter queue: enough for a typical error message.
	snippetBytes = 256

	// drainBytes is how much of a response is read, and thrown away, so
	// that its connection can be reused. Past that, dropping the connection
	// is cheaper than reading on.
	drainBytes = 64 << 10
)

// errHTTPTimeout is the cause of the context of an attempt that took
// longer than http_timeout. It tells that apart from an attempt whose
// caller canceled it or whose caller's own deadline passed.
var errHTTPTimeout = errors.New("http_timeout exceeded")

// Endpoint delivers events to one HTTP or HTTPS URL. It is safe for
// concurrent use.
type Endpoint struct {
	url     string // push_endpoint, as given
	shown   string // push_endpoint for messages: topic.RedactEndpoint
	timeout time.Duration
	header  http.Header // http_headers and defaults, copied into each request
	host    string      // a Host in http_headers; net/http takes it from Request.Host
	secret  []byte      // nil: do not sign with X-Herald-Signature
	keys    [][]byte    // signature_scheme standard-webhooks: sign with each
	client  *http.Client
	now     func() time.Time // the clock a Retry-After date is counted from
}

var _ endpoint.Endpoint = (*Endpoint)(nil)

// New returns an Endpoint that delivers the events of topic topicName to
// a.PushEndpoint, an http:// or https:// URL, with the topic's HTTP
// headers, timeout, signing secret and TLS settings. It reads
// a.TLSCAFile, if set, now, so a missing or malformed file is reported here
// rather than on every delivery. Its connections go only where g allows.
func New(topicName string, a topic.Attributes, g *endpoint.Guard) (*Endpoint, error) {
	e, err := newEndpoint(a, g)
	if err != nil {
		return nil, fmt.Errorf("webhook for topic %s: %w", topicName, err)
	}
	return e, nil
}

func newEndpoint(a topic.Attributes, g *endpoint.Guard) (*Endpoint, error) {
	shown := topic.RedactEndpoint(a.PushEndpoint)
	u, err := topic.ParseEndpoint(a.PushEndpoint)
	if err != nil {
		return nil, fmt.Errorf("invalid push_endpoint %s: %w", shown, err)
	}
	if s, _ := topic.LookupScheme(u.Scheme); s.Protocol != topic.ProtocolWebhook {
		return nil, fmt.Errorf("push_endpoint %s is not an http:// or https:// URL", shown)
	}
	if u.Host == "" {
		return nil, fmt.Errorf("push_endpoint %s has no host", shown)
	}
	if a.HTTPTimeout < 1 || a.HTTPTimeout > topic.MaxSeconds {
		return nil, fmt.Errorf("http_timeout must be between 1 and %d seconds, got %d", int64(topic.MaxSeconds), a.HTTPTimeout)
	}
	header, host, err := requestHeader(a.HTTPHeaders)
	if err != nil {
		return nil, err
	}
	tc, err := g.TLSConfig(a.TLSCAFile, a.TLSInsecureSkipVerify)
	if err != nil {
		return nil, err
	}
	e := &Endpoint{
		url:     a.PushEndpoint,
		shown:   shown,
		timeout: time.Duration(a.HTTPTimeout) * time.Second,
		header:  header,
		host:    host,
		client:  newClient(tc, g),
		now:     time.Now,
	}
	switch {
	case a.SigningSecret == "":
	case a.SignatureScheme == topic.SignatureStandardWebhooks:
		if e.keys, err = topic.StandardWebhooksKeys(a.SigningSecret); err != nil {
			return nil, err
		}
	default:
		e.secret = []byte(a.SigningSecret)
	}
	return e, nil
}

// requestHeader builds the headers every request starts with. It checks
// the topic's headers even though topic validation already has: a header
// net/http refuses would otherwise fail every delivery, retried forever.
func requestHeader(configured map[string]string) (http.Header, string, error) {
	h := http.Header{"Content-Type": {"application/json"}, "User-Agent": {"herald"}}
	var host string
	for _, name := range slices.Sorted(maps.Keys(configured)) { // the same error each time
		value := configured[name]
		if !isToken(name) {
			return nil, "", fmt.Errorf("http_headers: %q is not a valid header name", name)
		}
		if strings.ContainsFunc(value, isCtl) {
			return nil, "", fmt.Errorf("http_headers: the value of %s contains a control character; remove it", name)
		}
		if strings.EqualFold(name, "Host") {
			host = value
			continue
		}
		h.Set(name, value)
	}
	return h, host, nil
}

// isToken reports whether s is a valid header name (RFC 9110, 5.6.2).
func isToken(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' ||
			strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0) {
			return false
		}
	}
	return true
}

// isCtl reports the control characters a header value must not contain.
func isCtl(r rune) bool { return r < ' ' && r != '\t' || r == 0x7f }

// newClient returns a client with its own connection pool, so that one
// endpoint's connections and TLS settings are not shared with another's.
// Its connections are dialled by g, which checks every address after DNS
// resolution (with a proxy from the environment, the proxy's).
func newClient(tc *tls.Config, g *endpoint.Guard) *http.Client {
	t := &http.Transport{
		Proxy:               http.ProxyFromEnvironment,
		DialContext:         g.DialContext,
		TLSClientConfig:     tc,
		ForceAttemptHTTP2:   true, // a custom TLSClientConfig turns HTTP/2 off otherwise
		MaxIdleConns:        maxIdleConns,
		MaxIdleConnsPerHost: maxIdleConns,
		IdleConnTimeout:     90 * time.Second,
		// No dial or handshake timeouts: each attempt's context is limited
		// to http_timeout, which is the one limit users set.
	}
	return &http.Client{
		Transport: t,
		CheckRedirect: func(*http.Request, []*http.Request) error {
			return http.ErrUseLastResponse // see the package comment
		},
	}
}

// Send delivers m in one POST and reports how it went: nil on a 2xx
// response, a permanent error on a response that retrying cannot change,
// and a retryable error otherwise. See the package comment.
func (e *Endpoint) Send(ctx context.Context, m *endpoint.Message) error {
	body, err := endpoint.Body(m)
	if err != nil {
		return endpoint.Permanent(fmt.Errorf("deliver %s: encode body: %w", m.ID, err))
	}
	ctx, cancel := context.WithTimeoutCause(ctx, e.timeout, errHTTPTimeout)
	defer cancel()
	req, err := e.request(ctx, m, body)
	if err != nil {
		return endpoint.Permanent(fmt.Errorf("deliver %s to %s: %w", m.ID, e.shown, err))
	}
	resp, err := e.client.Do(req)
	if err != nil {
		return fmt.Errorf("deliver %s to %s: %w", m.ID, e.shown, e.describe(ctx, err))
	}
	defer drain(resp.Body)
	if resp.StatusCode >= 200 && resp.StatusCode < 300 {
		return nil
	}
	err = fmt.Errorf("deliver %s to %s: %w", m.ID, e.shown, statusError(resp))
	switch {
	case resp.StatusCode == http.StatusGone:
		return endpoint.Gone(err)
	case !retryable(resp.StatusCode):
		return endpoint.Permanent(err)
	}
	if after, ok := retryAfter(resp, e.now()); ok {
		return &endpoint.RetryAfterError{Err: err, After: after}
	}
	return err
}

// request builds the POST of body for m.
func (e *Endpoint) request(ctx context.Context, m *endpoint.Message, body []byte) (*http.Request, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, e.url, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header = e.header.Clone()
	if e.host != "" {
		req.Host = e.host
	}
	h := req.Header
	if enc := m.Encoded; enc != nil {
		for name, value := range enc.Headers {
			h.Set(name, value)
		}
		if enc.ContentType != "" {
			h.Set("Content-Type", enc.ContentType)
		}
	}
	h.Set(endpoint.HeaderEventID, m.ID)
	h.Set(endpoint.HeaderTopic, m.Topic)
	h.Set(endpoint.HeaderAttempt, strconv.Itoa(m.Attempt))
	h.Set(endpoint.HeaderKey, url.PathEscape(m.Key))
	ts := strconv.FormatInt(time.Now().Unix(), 10)
	switch {
	case e.keys != nil:
		h.Set(HeaderWebhookID, m.ID)
		h.Set(HeaderWebhookTimestamp, ts)
		h.Set(HeaderWebhookSignature, signStandard(e.keys, m.ID, ts, body))
	case e.secret != nil:
		h.Set(HeaderTimestamp, ts)
		h.Set(HeaderSignature, sign(e.secret, ts, body))
	}
	return req, nil
}

// describe turns an error of http.Client.Do, for an attempt whose context
// is ctx, into one that says what happened.
func (e *Endpoint) describe(ctx context.Context, err error) error {
	// url.Error repeats the whole URL, and its query may hold a token.
	var ue *url.Error
	if errors.As(err, &ue) {
		err = ue.Err
	}
	var unknownCA x509.UnknownAuthorityError
	var netErr net.Error
	switch {
	case errors.Is(context.Cause(ctx), errHTTPTimeout):
		// err is errHTTPTimeout or the like, which adds nothing.
		return fmt.Errorf("no response within http_timeout (%v): %w", e.timeout, context.DeadlineExceeded)
	case ctx.Err() != nil:
		return fmt.Errorf("attempt canceled: %w", err)
	case errors.Is(err, syscall.ECONNREFUSED):
		return fmt.Errorf("connection refused, is the receiver running? (%w)", err)
	case errors.As(err, &unknownCA):
		return fmt.Errorf("%w; set tls_ca_file to a PEM file of the CA that signed the endpoint's certificate", err)
	case errors.As(err, &netErr) && netErr.Timeout():
		return fmt.Errorf("timed out: %w", err)
	}
	return err
}

// retryable reports whether a response with status code may succeed if
// sent again: the receiver is overloaded (429) or failing (5xx).
func retryable(code int) bool {
	return code == http.StatusTooManyRequests || code >= 500 && code <= 599
}

// StatusError is a response other than 2xx. Send wraps it, so callers can
// get at the response with errors.As, for example to record it in the
// dead-letter queue.
type StatusError struct {
	StatusCode int
	Status     string // "404 Not Found"
	Body       string // the start of the response body, on one line
	Location   string // where a redirect pointed
}

func (e *StatusError) Error() string {
	msg := "endpoint answered " + e.Status
	if e.Location != "" && e.StatusCode >= 300 && e.StatusCode <= 399 {
		msg += " (a redirect to " + e.Location + ", not followed; set push_endpoint to the final URL)"
	}
	if e.Body != "" {
		msg += ": " + e.Body
	}
	return msg
}

func statusError(resp *http.Response) *StatusError {
	return &StatusError{
		StatusCode: resp.StatusCode,
		Status:     resp.Status,
		Body:       snippet(resp.Body),
		// A redirect may point at a URL with a token in its query.
		Location: topic.RedactEndpoint(oneLine(resp.Header.Get("Location"))),
	}
}

// snippet reads the start of a response body, for an error message.
func snippet(r io.Reader) string {
	b, _ := io.ReadAll(io.LimitReader(r, snippetBytes+1))
	return oneLine(string(b))
}

// oneLine shortens s to snippetBytes and puts it on one line, so that a
// receiver's error page cannot make a log line unreadable.
func oneLine(s string) string {
	cut := len(s) > snippetBytes
	// Cutting may split a character; ToValidUTF8 drops its remains.
	s = strings.ToValidUTF8(s[:min(len(s), snippetBytes)], "")
	s = strings.Join(strings.FieldsFunc(s, func(r rune) bool {
		return unicode.IsSpace(r) || unicode.IsControl(r)
	}), " ")
	if cut {
		s += " …"
	}
	return s
}

// drain reads what is left of a response body, up to drainBytes, and
// closes it: net/http reuses a connection only once its last response has
// been read to the end.
func drain(body io.ReadCloser) {
	io.Copy(io.Discard, io.LimitReader(body, drainBytes))
	body.Close()
}

// Close closes the endpoint's idle connections. Sends in progress finish
// normally.
func (e *Endpoint) Close() error {
	e.client.CloseIdleConnections()
	return nil
}
