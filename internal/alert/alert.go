// Package alert tells an operator about what needs a person: it POSTs
// small JSON alerts, such as a subscription that herald disabled because
// its endpoint is gone or kept failing, to a webhook of the operator's
// (a chat bridge, an incident tool, a script).
//
// A Notifier never holds up the code that raises an alert: Notify queues
// the alert and returns, and the Notifier's own goroutine delivers the
// queue in order, retrying each alert with backoff. The queue is bounded;
// when it is full, the oldest alert is dropped (and counted), because an
// operator is better served by what is happening now than by what was
// happening when the receiver went away. Delivery is at least once: a
// receiver may see an alert twice, when its answer was lost.
//
// Each POST carries one Alert as JSON:
//
//	{"type":"subscription.disabled","topic":"orders","subscription":"billing",
//	 "reason":"the endpoint no longer exists: ...","time":"2026-11-26T16:05:32.123456789Z","node":"n1"}
//
// With a secret, it is signed as herald signs webhook deliveries
// (X-Herald-Timestamp and X-Herald-Signature, see package webhook), so
// that a receiver checks both with webhook.Verify.
package alert

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"sync"
	"time"

	"herald/internal/backoff"
	"herald/internal/endpoint"
	"herald/internal/endpoint/webhook"
	"herald/internal/topic"
)

// Type says what an alert is about.
type Type string

// The types of alert.
const (
	// SubscriptionDisabled: herald stopped delivering to a subscription's
	// endpoint, keeping its events, until someone enables it again.
	SubscriptionDisabled Type = "subscription.disabled"
	// SubscriptionEnabled: a disabled subscription was enabled again and
	// its backlog is being delivered.
	SubscriptionEnabled Type = "subscription.enabled"
)

// Alert is what the operator's webhook receives, as JSON.
type Alert struct {
	Type         Type      `json:"type"`
	Topic        string    `json:"topic"`
	Subscription string    `json:"subscription"`
	Reason       string    `json:"reason"`
	Time         time.Time `json:"time"` // RFC 3339 with nanoseconds, in UTC
	Node         string    `json:"node"` // the node that raised it
}

// Config configures a Notifier. Only URL is required.
type Config struct {
	// URL is the operator's webhook, http:// or https://.
	URL string
	// Secret, if set, signs every POST (X-Herald-Signature).
	Secret string
	// Node names this node in alerts that do not name one.
	Node string
	// Timeout bounds each POST: 10 seconds if 0.
	Timeout time.Duration
	// QueueSize bounds the alerts waiting to be sent: 100 if 0.
	QueueSize int
	// MaxAttempts is how many times an alert is sent before it is given
	// up: 10 if 0.
	MaxAttempts int
	// Retry is the pause between attempts: if its Initial is 0, from 1
	// second, doubling to a minute, with 20% jitter. A Retry-After from
	// the receiver (429 or 503) makes it longer, up to
	// endpoint.MaxRetryAfter.
	Retry backoff.Policy
	// CloseTimeout bounds how long Close goes on delivering what is
	// queued: 5 seconds if 0.
	CloseTimeout time.Duration
	// Guard, if set, decides what the webhook's connections may reach.
	//
	// The guard exists because a push endpoint is chosen by whoever may
	// create a topic, who must not make herald reach what only herald
	// can. This URL is chosen by the operator, in the server's own
	// configuration, like the guard's allow-list itself, and usually
	// points at an internal service on a private address that the guard
	// refuses by default. So no guard applies unless one is given: give
	// one when the URL comes from someone less trusted than the operator.
	Guard *endpoint.Guard
	// Logger, if set, is told of alerts that could not be delivered.
	Logger interface {
		Warn(msg string, args ...any)
	}

	now func() time.Time // for tests
}

// Stats counts what became of the alerts given to Notify.
type Stats struct {
	Sent    uint64 // accepted by the receiver (2xx)
	Failed  uint64 // refused for good, or still failing after MaxAttempts
	Dropped uint64 // pushed out of a full queue, or not sent by Close
	Queued  int    // waiting now
}

// Notifier delivers alerts to one webhook. Its methods are safe for
// concurrent use.
type Notifier struct {
	cfg    Config
	shown  string // cfg.URL for messages: topic.RedactEndpoint
	client *http.Client

	mu     sync.Mutex
	queue  []Alert
	closed bool
	stats  Stats

	ready     chan struct{}      // an alert was queued (capacity 1)
	stopping  chan struct{}      // closed by Close
	ctx       context.Context    // ends when Close gives up delivering
	cancel    context.CancelFunc // ends ctx
	done      chan struct{}      // closed when the goroutine returns
	closeOnce sync.Once
}

// New returns a Notifier for cfg and starts its goroutine; Close stops it.
func New(cfg Config) (*Notifier, error) {
	shown := topic.RedactEndpoint(cfg.URL)
	u, err := url.Parse(cfg.URL)
	if err != nil {
		return nil, fmt.Errorf("alert webhook %s: %w", shown, err)
	}
	if u.Scheme != "http" && u.Scheme != "https" || u.Host == "" {
		return nil, fmt.Errorf("alert webhook %q is not an http:// or https:// URL with a host", shown)
	}
	cfg = withDefaults(cfg)
	ctx, cancel := context.WithCancel(context.Background())
	n := &Notifier{
		cfg: cfg, shown: shown, client: newClient(cfg.Guard),
		ready: make(chan struct{}, 1), stopping: make(chan struct{}),
		ctx: ctx, cancel: cancel, done: make(chan struct{}),
	}
	go n.run()
	return n, nil
}

func withDefaults(cfg Config) Config {
	if cfg.Timeout <= 0 {
		cfg.Timeout = 10 * time.Second
	}
	if cfg.QueueSize <= 0 {
		cfg.QueueSize = 100
	}
	if cfg.MaxAttempts <= 0 {
		cfg.MaxAttempts = 10
	}
	if cfg.Retry.Initial <= 0 {
		cfg.Retry = backoff.Policy{Initial: time.Second, Max: time.Minute, Jitter: 0.2}
	}
	if cfg.CloseTimeout <= 0 {
		cfg.CloseTimeout = 5 * time.Second
	}
	if cfg.now == nil {
		cfg.now = time.Now
	}
	return cfg
}

// newClient returns a client of its own, dialling through g if there is
// one. It does not follow redirects: following one would send the signed
// alert elsewhere, or turn the POST into a GET.
func newClient(g *endpoint.Guard) *http.Client {
	dial := (&net.Dialer{KeepAlive: 30 * time.Second}).DialContext
	if g != nil {
		dial = g.DialContext
	}
	return &http.Client{
		Transport: &http.Transport{
			Proxy:             http.ProxyFromEnvironment,
			DialContext:       dial,
			ForceAttemptHTTP2: true,
			MaxIdleConns:      1, // one alert at a time
			IdleConnTimeout:   90 * time.Second,
		},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
}

// Notify queues a for delivery and returns at once. An alert without a
// time gets the present, one without a node the Config's. If the queue is
// full, its oldest alert is dropped; after Close, a is.
func (n *Notifier) Notify(a Alert) {
	if a.Time.IsZero() {
		a.Time = n.cfg.now()
	}
	a.Time = a.Time.UTC()
	if a.Node == "" {
		a.Node = n.cfg.Node
	}
	n.mu.Lock()
	switch {
	case n.closed:
		n.stats.Dropped++
	case len(n.queue) >= n.cfg.QueueSize:
		n.queue = append(n.queue[1:], a) // the oldest makes room
		n.stats.Dropped++
	default:
		n.queue = append(n.queue, a)
	}
	n.mu.Unlock()
	select {
	case n.ready <- struct{}{}:
	default: // the goroutine is already told
	}
}

// Stats returns what became of the alerts so far.
func (n *Notifier) Stats() Stats {
	n.mu.Lock()
	defer n.mu.Unlock()
	s := n.stats
	s.Queued = len(n.queue)
	return s
}

// Close stops taking alerts, goes on delivering the queued ones for up to
// Config.CloseTimeout, and returns once the Notifier's goroutine has
// ended. What is still queued then is dropped. Close may be called more
// than once.
func (n *Notifier) Close() error {
	n.closeOnce.Do(func() {
		n.mu.Lock()
		n.closed = true
		n.mu.Unlock()
		close(n.stopping)
		giveUp := time.AfterFunc(n.cfg.CloseTimeout, n.cancel)
		<-n.done
		giveUp.Stop()
		n.cancel()
		n.client.CloseIdleConnections()
	})
	return nil
}

// run delivers the queue, one alert at a time, until Close.
func (n *Notifier) run() {
	defer close(n.done)
	for {
		a, ok := n.next()
		if !ok {
			return
		}
		n.deliver(a)
	}
}

// next waits for the next alert to deliver. It returns false once the
// Notifier is closed and its queue empty, or Close has given up on it.
func (n *Notifier) next() (Alert, bool) {
	for {
		n.mu.Lock()
		if n.ctx.Err() != nil {
			n.stats.Dropped += uint64(len(n.queue))
			n.queue = nil
			n.mu.Unlock()
			return Alert{}, false
		}
		if len(n.queue) > 0 {
			a := n.queue[0]
			n.queue = n.queue[1:]
			n.mu.Unlock()
			return a, true
		}
		closed := n.closed
		n.mu.Unlock()
		if closed {
			return Alert{}, false
		}
		select {
		case <-n.ready:
		case <-n.stopping:
		}
	}
}

// deliver sends a until the receiver takes it, refuses it for good, or
// MaxAttempts are spent, pausing between attempts.
func (n *Notifier) deliver(a Alert) {
	body, err := json.Marshal(a)
	if err != nil { // an Alert always encodes; but never send a broken one
		n.gaveUp(a, 0, fmt.Errorf("encode alert: %w", err))
		return
	}
	pause := backoff.New(n.cfg.Retry)
	for attempt := 1; ; attempt++ {
		err := n.post(body)
		switch {
		case err == nil:
			n.count(func(s *Stats) { s.Sent++ })
			return
		case n.ctx.Err() != nil:
			n.count(func(s *Stats) { s.Dropped++ }) // Close gave up on it
			return
		case endpoint.IsPermanent(err) || attempt >= n.cfg.MaxAttempts:
			n.gaveUp(a, attempt, err)
			return
		}
		wait := pause.Next()
		if after, ok := endpoint.RetryAfter(err); ok {
			wait = max(wait, after)
		}
		if backoff.Sleep(n.ctx, wait) != nil {
			n.count(func(s *Stats) { s.Dropped++ })
			return
		}
	}
}

func (n *Notifier) count(f func(*Stats)) {
	n.mu.Lock()
	defer n.mu.Unlock()
	f(&n.stats)
}

func (n *Notifier) gaveUp(a Alert, attempts int, err error) {
	n.count(func(s *Stats) { s.Failed++ })
	if n.cfg.Logger != nil {
		n.cfg.Logger.Warn("operator alert not delivered", "webhook", n.shown, "type", a.Type,
			"topic", a.Topic, "subscription", a.Subscription, "attempts", attempts, "err", err)
	}
}

// post sends body once. Its error is permanent (endpoint.IsPermanent) if
// sending it again cannot help, and carries the receiver's Retry-After
// (endpoint.RetryAfter) if it gave one.
func (n *Notifier) post(body []byte) error {
	ctx, cancel := context.WithTimeout(n.ctx, n.cfg.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, n.cfg.URL, bytes.NewReader(body))
	if err != nil {
		return endpoint.Permanent(fmt.Errorf("alert webhook %s: %w", n.shown, err))
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "herald")
	if n.cfg.Secret != "" {
		ts := strconv.FormatInt(n.cfg.now().Unix(), 10)
		req.Header.Set(webhook.HeaderTimestamp, ts)
		req.Header.Set(webhook.HeaderSignature, webhook.Sign(n.cfg.Secret, ts, body))
	}
	resp, err := n.client.Do(req)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err // url.Error repeats the URL, whose query may hold a token
		}
		err = fmt.Errorf("alert webhook %s: %w", n.shown, err)
		if errors.Is(err, endpoint.ErrRefused) {
			return endpoint.Permanent(err)
		}
		return err
	}
	defer func() {
		io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10)) // so the connection can be reused
		resp.Body.Close()
	}()
	return classify(resp, n.shown, n.cfg.now())
}

// classify turns a response into nil (2xx), a retryable error (429, 5xx)
// or a permanent one (anything else, including a redirect).
func classify(resp *http.Response, shown string, now time.Time) error {
	code := resp.StatusCode
	if code >= 200 && code <= 299 {
		return nil
	}
	err := fmt.Errorf("alert webhook %s answered %s", shown, resp.Status)
	if code != http.StatusTooManyRequests && (code < 500 || code > 599) {
		return endpoint.Permanent(err)
	}
	if code == http.StatusTooManyRequests || code == http.StatusServiceUnavailable {
		if after, ok := endpoint.ParseRetryAfter(resp.Header.Get("Retry-After"), now); ok {
			return &endpoint.RetryAfterError{Err: err, After: after}
		}
	}
	return err
}
