// Package nats delivers herald events to a NATS server, through core NATS
// or JetStream.
//
// The push endpoint is nats://[user:password@]host:port. Each event is
// published on the subject named by the nats_subject attribute, or on the
// herald topic name when that is empty. The body is endpoint.Body, and each
// message carries the same headers as herald's HTTP deliveries:
//
//	X-Herald-Event-Id: orders/2/17   the event id, what receivers de-duplicate on
//	X-Herald-Topic: orders
//	X-Herald-Attempt: 1              1 for the first attempt
//	X-Herald-Key: customer-42        the event key, percent-encoded
//
// NATS header values cannot hold every byte an event key may, so
// X-Herald-Key is percent-encoded as by [url.PathEscape] ([url.PathUnescape]
// restores it); the body carries the key verbatim. The header Nats-Msg-Id
// is the event id too, so that a JetStream stream drops an event that
// herald delivers again within the stream's duplicate window.
//
// Core NATS has no delivery guarantee beyond the server: Send publishes,
// then flushes the connection and waits for the server to answer, so nil
// means the server has received the message, not that any subscriber has
// (with none listening, the server drops it). With nats_jetstream=true,
// Send publishes through JetStream and returns nil only once the stream
// that captures the subject has stored the message. No stream capturing
// the subject is a permanent error, as is an event larger than the
// server's max_payload; every other failure is retryable.
//
// The endpoint connects on the first Send rather than in New, so herald
// starts while the server is down. A lost connection is re-established in
// the background; Sends fail (retryably) until it is, rather than queueing
// messages in the client, so that every Send that returns nil was really
// delivered.
package nats

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"herald/internal/backoff"
	"herald/internal/endpoint"
	"herald/internal/topic"
)

const (
	// connectTimeout bounds connecting, within the time Send has left:
	// the rest is for publishing.
	connectTimeout = 5 * time.Second
	// sendTimeout limits a Send whose context has no deadline: a server
	// that does not answer must not hold an event forever.
	sendTimeout = 30 * time.Second
)

// reconnectPause is how long the client pauses after failing to reconnect
// before it tries again: a second, less some jitter so that the
// connections of many topics do not all come back at the same instant.
var reconnectPause = backoff.Policy{Initial: time.Second, Max: time.Second, Jitter: 0.1}

// Endpoint publishes to one subject of one NATS server. It is safe for
// concurrent use: all Sends share one connection.
type Endpoint struct {
	url       string // with the password: what is dialled
	shown     string // without the password: what errors show
	name      string // connection name, shown by the server's monitoring
	subject   string
	jetStream bool
	guard     *endpoint.Guard

	// lock guards the fields below. It is a channel rather than a mutex
	// so that a Send waiting while another one connects can give up when
	// its context ends.
	lock   chan struct{}
	conn   *nats.Conn
	js     jetstream.JetStream
	closed bool
}

// New returns an endpoint that publishes the events of topicName as a's
// attributes say. It checks the attributes but does not connect: the first
// Send does, and only where g allows.
func New(topicName string, a topic.Attributes, g *endpoint.Guard) (*Endpoint, error) {
	shown := topic.RedactEndpoint(a.PushEndpoint)
	u, err := topic.ParseEndpoint(a.PushEndpoint)
	if err != nil {
		return nil, fmt.Errorf("nats endpoint %s: the push endpoint is not a URI (%w); use nats://host:port", shown, err)
	}
	e := &Endpoint{
		url:       a.PushEndpoint,
		shown:     shown,
		name:      "herald topic " + topicName,
		subject:   a.NATSSubject,
		jetStream: a.NATSJetStream,
		lock:      make(chan struct{}, 1),
		guard:     g,
	}
	if e.subject == "" {
		e.subject = topicName
	}
	if s, _ := topic.LookupScheme(u.Scheme); s.Protocol != topic.ProtocolNATS || u.Hostname() == "" || (u.Path != "" && u.Path != "/") || u.RawQuery != "" {
		return nil, fmt.Errorf("nats endpoint %s: use nats://[user:password@]host:port, without path or query", e.shown)
	}
	if p := u.Port(); p != "" {
		if n, err := strconv.Atoi(p); err != nil || n < 1 || n > 65535 {
			return nil, fmt.Errorf("nats endpoint %s: port %q is not a number from 1 to 65535", e.shown, p)
		}
	}
	return e, nil
}

// Send publishes m and waits until the server (core NATS) or the stream
// (JetStream) has it.
func (e *Endpoint) Send(ctx context.Context, m *endpoint.Message) error {
	body, err := endpoint.Body(m)
	if err != nil {
		return endpoint.Permanent(fmt.Errorf("nats endpoint %s: encode event %s: %w", e.shown, m.ID, err))
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, sendTimeout)
		defer cancel()
	}
	conn, js, err := e.connection(ctx)
	if err != nil {
		return err
	}
	msg := &nats.Msg{Subject: e.subject, Data: body, Header: nats.Header{
		endpoint.HeaderEventID: {m.ID},
		endpoint.HeaderTopic:   {m.Topic},
		endpoint.HeaderAttempt: {strconv.Itoa(m.Attempt)},
		endpoint.HeaderKey:     {url.PathEscape(m.Key)},
		jetstream.MsgIDHeader:  {m.ID},
	}}
	if e.jetStream {
		_, err = js.PublishMsg(ctx, msg)
	} else if err = conn.PublishMsg(msg); err == nil {
		err = conn.FlushWithContext(ctx)
	}
	if err != nil {
		return e.publishErr(conn, m, err)
	}
	return nil
}

// publishErr classifies a failed publish.
func (e *Endpoint) publishErr(conn *nats.Conn, m *endpoint.Message, err error) error {
	switch {
	case errors.Is(err, jetstream.ErrNoStreamResponse):
		return endpoint.Permanent(fmt.Errorf("nats endpoint %s: no JetStream stream captures subject %q (or JetStream is not enabled on the server); create a stream for it (e.g. nats stream add --subjects %s), or set nats_jetstream=false for core NATS", e.shown, e.subject, e.subject))
	case errors.Is(err, nats.ErrMaxPayload):
		return endpoint.Permanent(fmt.Errorf("nats endpoint %s: event %s is larger than the server's max_payload of %d bytes; publish smaller payloads or raise max_payload", e.shown, m.ID, conn.MaxPayload()))
	case !conn.IsConnected():
		return fmt.Errorf("nats endpoint %s: publish event %s: not connected to the server (%v, connection %s); herald retries, and the client reconnects", e.shown, m.ID, err, conn.Status())
	}
	return fmt.Errorf("nats endpoint %s: publish event %s on %q: %w; herald retries", e.shown, m.ID, e.subject, err)
}

// connection returns the connection, connecting first if there is none
// or it has closed for good.
func (e *Endpoint) connection(ctx context.Context) (*nats.Conn, jetstream.JetStream, error) {
	select {
	case e.lock <- struct{}{}:
	case <-ctx.Done():
		return nil, nil, fmt.Errorf("nats endpoint %s: waiting for the connection: %w; herald retries", e.shown, ctx.Err())
	}
	defer func() { <-e.lock }()
	if e.closed {
		return nil, nil, fmt.Errorf("nats endpoint %s: send on a closed endpoint", e.shown)
	}
	if e.conn != nil && !e.conn.IsClosed() {
		return e.conn, e.js, nil
	}
	timeout := connectTimeout
	if d, ok := ctx.Deadline(); ok && time.Until(d) < timeout {
		timeout = max(time.Until(d), time.Millisecond)
	}
	conn, err := nats.Connect(e.url,
		nats.Name(e.name),
		nats.Timeout(timeout),
		nats.SetCustomDialer(e.guard.Dialer(timeout)),
		// Fail publishes while reconnecting instead of buffering them:
		// a buffered message would be reported delivered, or failed
		// and then delivered anyway.
		nats.ReconnectBufSize(-1),
		nats.MaxReconnects(-1),
		nats.CustomReconnectDelay(reconnectPause.Delay),
	)
	if err != nil {
		return nil, nil, fmt.Errorf("nats endpoint %s: connect: %w; check that the server is up and reachable and the credentials are right; herald retries", e.shown, err)
	}
	js, err := jetstream.New(conn)
	if err != nil {
		conn.Close()
		return nil, nil, fmt.Errorf("nats endpoint %s: %w", e.shown, err)
	}
	e.conn, e.js = conn, js
	return conn, js, nil
}

// Close closes the connection.
func (e *Endpoint) Close() error {
	e.lock <- struct{}{}
	defer func() { <-e.lock }()
	e.closed = true
	if e.conn != nil {
		e.conn.Close()
		e.conn, e.js = nil, nil
	}
	return nil
}
