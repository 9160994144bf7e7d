// Package amqp delivers herald events to an AMQP 0-9-1 broker such as
// RabbitMQ.
//
// The push endpoint is amqp://user:password@host:port/vhost, or amqps://
// for TLS (verified with the system roots, the tls_ca_file attribute, or
// not at all with tls_insecure_skip_verify). Each event is published to the
// exchange named by the amqp_exchange attribute with the routing key
// amqp_routing_key, or the herald topic name when that is empty. The body
// is endpoint.Body, and each message carries the same headers as herald's
// HTTP deliveries, the key verbatim:
//
//	X-Herald-Event-Id: orders/2/17   the event id, what receivers de-duplicate on
//	X-Herald-Topic: orders
//	X-Herald-Attempt: 1              an integer, 1 for the first attempt
//	X-Herald-Key: customer-42
//
// The message id is the event id too, the content type application/json,
// and messages are persistent, so that a durable queue keeps them across a
// broker restart.
//
// With amqp_ack_level=broker (the default) the endpoint publishes on a
// channel in confirm mode and Send returns nil only once the broker has
// confirmed the message: for a durable queue, once it has been written to
// disk. A negative confirm is a retryable error. With amqp_ack_level=none,
// Send returns as soon as the message has been written to the connection,
// and a message the broker then drops is lost.
//
// Messages are not mandatory: one that the exchange routes to no queue is
// confirmed and discarded by the broker, as AMQP specifies. Bind a queue,
// or give the exchange an alternate exchange, to keep such messages.
//
// A missing exchange is a permanent error (the event is dead-lettered),
// because retrying cannot create it. Every other failure, a lost
// connection included, is retryable. The endpoint connects on the first
// Send rather than in New, so herald starts while the broker is down, and
// after a failure the next Send connects again.
package amqp

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"herald/internal/endpoint"
	"herald/internal/topic"
)

// sendTimeout limits a Send whose context has no deadline, connecting and
// waiting for the confirm included: a broker that neither answers nor
// drops the connection must not hold an event forever.
const sendTimeout = 30 * time.Second

// Endpoint publishes to one exchange of one broker. It is safe for
// concurrent use: all Sends share one connection and one channel.
type Endpoint struct {
	uri        string // with the password: what is dialled
	shown      string // without the password: what errors show
	name       string // connection name, shown by the broker's management tools
	exchange   string
	routingKey string
	confirm    bool        // amqp_ack_level=broker
	tls        *tls.Config // nil for amqp://
	guard      *endpoint.Guard

	// lock guards the fields below. It is a channel rather than a mutex
	// so that a Send waiting while another one connects can give up when
	// its context ends.
	lock   chan struct{}
	conn   *amqp.Connection
	ch     *channel
	closed bool
}

// channel is an open AMQP channel and, once it has closed, why.
type channel struct {
	ch   *amqp.Channel
	done chan struct{} // closed once the channel has closed
	err  *amqp.Error   // why; nil if closed by Close. Written before done closes.
}

// New returns an endpoint that publishes the events of topicName as a's
// attributes say. It checks the attributes but does not connect: the first
// Send does, and only where g allows.
func New(topicName string, a topic.Attributes, g *endpoint.Guard) (*Endpoint, error) {
	shown := topic.RedactEndpoint(a.PushEndpoint)
	// amqp.ParseURI's errors repeat the URI: ParseEndpoint's do not.
	if _, err := topic.ParseEndpoint(a.PushEndpoint); err != nil {
		return nil, fmt.Errorf("amqp endpoint %s: invalid URI: %w; use amqp://user:password@host:port/vhost or amqps://..., with reserved characters in the user or password percent-encoded", shown, err)
	}
	uri, err := amqp.ParseURI(a.PushEndpoint)
	if err != nil {
		return nil, fmt.Errorf("amqp endpoint %s: %w; use amqp://user:password@host:port/vhost (amqps:// for TLS)", shown, err)
	}
	e := &Endpoint{
		uri:        a.PushEndpoint,
		shown:      shown,
		name:       "herald topic " + topicName,
		exchange:   a.AMQPExchange,
		routingKey: a.AMQPRoutingKey,
		lock:       make(chan struct{}, 1),
		guard:      g,
	}
	if e.routingKey == "" {
		e.routingKey = topicName
	}
	if e.exchange == "" {
		return nil, fmt.Errorf("amqp endpoint %s: no exchange to publish to; set the amqp_exchange attribute", shown)
	}
	switch a.AMQPAckLevel {
	case "broker":
		e.confirm = true
	case "none":
	default:
		return nil, fmt.Errorf("amqp endpoint %s: amqp_ack_level must be none or broker, got %q", shown, a.AMQPAckLevel)
	}
	if s, _ := topic.LookupScheme(uri.Scheme); s.TLS {
		if e.tls, err = g.TLSConfig(a.TLSCAFile, a.TLSInsecureSkipVerify); err != nil {
			return nil, fmt.Errorf("amqp endpoint %s: %w", shown, err)
		}
		e.tls.ServerName = uri.Host
	}
	return e, nil
}

// Send publishes m and, with amqp_ack_level=broker, waits for the broker
// to confirm it. A missing exchange is a permanent error; every other
// failure is retryable.
func (e *Endpoint) Send(ctx context.Context, m *endpoint.Message) error {
	body, err := endpoint.Body(m)
	if err != nil {
		return endpoint.Permanent(fmt.Errorf("amqp endpoint %s: encode event %s: %w", e.shown, m.ID, err))
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, sendTimeout)
		defer cancel()
	}
	c, err := e.channel(ctx)
	if err != nil {
		return err
	}
	confirm, err := c.ch.PublishWithDeferredConfirmWithContext(ctx, e.exchange, e.routingKey, false, false, publishing(m, body))
	if err != nil {
		return e.closedErr(ctx, c, fmt.Errorf("publish: %w", err))
	}
	if !e.confirm {
		return nil
	}
	acked, err := confirm.WaitContext(ctx)
	switch {
	case err != nil:
		return fmt.Errorf("amqp endpoint %s: waiting for the broker to confirm event %s: %w; herald retries", e.shown, m.ID, err)
	case acked:
		return nil
	case c.ch.IsClosed():
		// The library reports the confirms of a closed channel as
		// negative; the close reason says what really happened.
		return e.closedErr(ctx, c, errors.New("channel closed before the broker confirmed the message"))
	}
	return fmt.Errorf("amqp endpoint %s: the broker refused event %s (negative confirm), e.g. because the queue is full; herald retries", e.shown, m.ID)
}

func publishing(m *endpoint.Message, body []byte) amqp.Publishing {
	contentType := "application/json"
	if m.Encoded != nil && m.Encoded.ContentType != "" {
		contentType = m.Encoded.ContentType
	}
	return amqp.Publishing{
		Headers: amqp.Table{
			endpoint.HeaderEventID: m.ID,
			endpoint.HeaderTopic:   m.Topic,
			endpoint.HeaderAttempt: int32(m.Attempt),
			endpoint.HeaderKey:     m.Key,
		},
		ContentType:  contentType,
		DeliveryMode: amqp.Persistent,
		MessageId:    m.ID,
		Timestamp:    m.Time,
		AppId:        "herald",
		Body:         body,
	}
}

// closedErr explains a failure on channel c: permanent if the broker
// closed the channel because the exchange does not exist, else retryable.
func (e *Endpoint) closedErr(ctx context.Context, c *channel, cause error) error {
	if !c.ch.IsClosed() {
		return fmt.Errorf("amqp endpoint %s: %w; herald retries", e.shown, cause)
	}
	// The reason is recorded right after the channel is marked closed.
	select {
	case <-c.done:
	case <-ctx.Done():
		return fmt.Errorf("amqp endpoint %s: %w; herald retries", e.shown, cause)
	}
	if c.err != nil && c.err.Code == amqp.NotFound {
		return endpoint.Permanent(fmt.Errorf(
			"amqp endpoint %s: exchange %q does not exist on the broker (%s); declare it (e.g. rabbitmqadmin declare exchange name=%s type=topic durable=true) or set amqp_exchange to an existing exchange",
			e.shown, e.exchange, c.err.Reason, e.exchange))
	}
	if c.err != nil {
		return fmt.Errorf("amqp endpoint %s: %w: %v; herald reconnects and retries", e.shown, cause, c.err)
	}
	return fmt.Errorf("amqp endpoint %s: %w; herald reconnects and retries", e.shown, cause)
}

// channel returns the open channel, connecting or reopening it if needed.
func (e *Endpoint) channel(ctx context.Context) (*channel, error) {
	select {
	case e.lock <- struct{}{}:
	case <-ctx.Done():
		return nil, fmt.Errorf("amqp endpoint %s: waiting for the connection: %w; herald retries", e.shown, ctx.Err())
	}
	defer func() { <-e.lock }()
	if e.closed {
		return nil, fmt.Errorf("amqp endpoint %s: send on a closed endpoint", e.shown)
	}
	if e.ch != nil && !e.ch.ch.IsClosed() {
		return e.ch, nil
	}
	if e.conn == nil || e.conn.IsClosed() {
		conn, err := e.dial(ctx)
		if err != nil {
			return nil, fmt.Errorf("amqp endpoint %s: connect: %w; check that the broker is up and reachable and that the user, password and vhost are right; herald retries", e.shown, err)
		}
		e.conn = conn
	}
	c, err := e.open()
	if err != nil {
		// The connection may be broken in a way not noticed yet: start
		// afresh next time.
		_ = e.conn.Close()
		e.conn = nil
		return nil, fmt.Errorf("amqp endpoint %s: open a channel: %w; herald retries", e.shown, err)
	}
	e.ch = c
	return c, nil
}

// dial connects to the broker before ctx's deadline.
func (e *Endpoint) dial(ctx context.Context) (*amqp.Connection, error) {
	props := amqp.NewConnectionProperties()
	props.SetClientConnectionName(e.name)
	cfg := amqp.Config{
		Properties: props,
		Dial: func(network, addr string) (net.Conn, error) {
			conn, err := e.guard.DialContext(ctx, network, addr)
			if err != nil {
				return nil, err
			}
			// For the handshake: the library clears it once done.
			deadline, _ := ctx.Deadline()
			if err := conn.SetDeadline(deadline); err != nil {
				conn.Close()
				return nil, err
			}
			return conn, nil
		},
	}
	if e.tls != nil {
		cfg.TLSClientConfig = e.tls.Clone() // the library may modify it
	}
	return amqp.DialConfig(e.uri, cfg)
}

// open opens a channel on e.conn, in confirm mode if the ack level says so.
func (e *Endpoint) open() (*channel, error) {
	ch, err := e.conn.Channel()
	if err != nil {
		return nil, err
	}
	c := &channel{ch: ch, done: make(chan struct{})}
	closes := ch.NotifyClose(make(chan *amqp.Error, 1))
	go func() {
		c.err = <-closes // nil when the channel is closed normally
		close(c.done)
	}()
	if e.confirm {
		if err := ch.Confirm(false); err != nil {
			_ = ch.Close()
			return nil, fmt.Errorf("enable publisher confirms: %w", err)
		}
	}
	return c, nil
}

// Close closes the connection. Sends still waiting for a confirm fail
// with a retryable error.
func (e *Endpoint) Close() error {
	e.lock <- struct{}{}
	defer func() { <-e.lock }()
	if e.closed || e.conn == nil {
		e.closed = true
		return nil
	}
	e.closed = true
	err := e.conn.Close()
	e.conn, e.ch = nil, nil
	if err != nil && !errors.Is(err, amqp.ErrClosed) {
		return fmt.Errorf("amqp endpoint %s: close: %w", e.shown, err)
	}
	return nil
}
