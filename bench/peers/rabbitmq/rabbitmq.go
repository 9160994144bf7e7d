// Package rabbitmq drives the publish load of package load through a
// RabbitMQ quorum queue with publisher confirms, for comparison with
// herald.
//
// Every producer has its own connection and channel, in confirm mode, to
// one of the target's nodes in turn (a cluster's, so that the load comes in
// through all of them). A
// batch of N is N persistent messages published to the queue (through the
// default exchange) followed by a wait for their N confirms; the confirm is
// the acknowledgement measured. A quorum queue confirms a message once it
// is written to the Raft log of a majority of its members, which RabbitMQ
// fsyncs first; the queue has Target.Replicas members (one on a single
// node).
// An event's key travels in a "key" header, since a queue has no keys.
package rabbitmq

import (
	"context"
	"errors"
	"fmt"
	"strings"

	amqp "github.com/rabbitmq/amqp091-go"

	"herald/bench/load"
)

// Target is the queue a load goes to.
type Target struct {
	// URL is the broker's (amqp://guest:guest@127.0.0.1:5672/), or the
	// URLs of a cluster's nodes separated by commas.
	URL   string
	Queue string
	// Replicas is the quorum queue's initial member count
	// (x-quorum-initial-group-size; 0: RabbitMQ's default).
	Replicas int
}

// urlFor returns the URL producer i connects to: the nodes of URL in turn;
// the first, i 0, is also the one that declares and deletes the queue.
func (t Target) urlFor(i int) string {
	urls := strings.Split(t.URL, ",")
	return strings.TrimSpace(urls[i%len(urls)])
}

// Prepare deletes the queue if it exists and declares it afresh as a
// durable quorum queue.
func Prepare(ctx context.Context, t Target) error {
	conn, err := amqp.Dial(t.urlFor(0))
	if err != nil {
		return fmt.Errorf("connect to %s: %w", t.urlFor(0), err)
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		return err
	}
	// Deleting a queue that does not exist succeeds.
	if _, err := ch.QueueDelete(t.Queue, false, false, false); err != nil {
		return fmt.Errorf("delete queue %s: %w", t.Queue, err)
	}
	args := amqp.Table{"x-queue-type": "quorum"}
	if t.Replicas > 0 {
		args["x-quorum-initial-group-size"] = t.Replicas
	}
	_, err = ch.QueueDeclare(t.Queue, true, false, false, false, args)
	if err != nil {
		return fmt.Errorf("declare quorum queue %s: %w", t.Queue, err)
	}
	return nil
}

// Delete removes the queue and its messages.
func Delete(ctx context.Context, t Target) error {
	conn, err := amqp.Dial(t.urlFor(0))
	if err != nil {
		return err
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		return err
	}
	_, err = ch.QueueDelete(t.Queue, false, false, false)
	return err
}

// Version returns the version the server at url (the first, of several)
// announces.
func Version(url string) (string, error) {
	conn, err := amqp.Dial(Target{URL: url}.urlFor(0))
	if err != nil {
		return "", err
	}
	defer conn.Close()
	v, _ := conn.Properties["version"].(string)
	return v, nil
}

// NewProducer returns producers that publish to t, each over its own
// connection and confirm-mode channel.
func NewProducer(t Target) load.NewProducer {
	return func(ctx context.Context, i int) (load.Producer, error) {
		url := t.urlFor(i)
		conn, err := amqp.Dial(url)
		if err != nil {
			return nil, fmt.Errorf("connect to %s: %w", url, err)
		}
		ch, err := conn.Channel()
		if err == nil {
			err = ch.Confirm(false)
		}
		if err != nil {
			conn.Close()
			return nil, fmt.Errorf("open a confirm-mode channel: %w", err)
		}
		return &producer{t: t, conn: conn, ch: ch}, nil
	}
}

type producer struct {
	t        Target
	conn     *amqp.Connection
	ch       *amqp.Channel
	confirms []*amqp.DeferredConfirmation
}

var errNacked = errors.New("the broker nacked a message")

func (p *producer) Publish(ctx context.Context, events []load.Event) error {
	p.confirms = p.confirms[:0]
	for _, e := range events {
		msg := amqp.Publishing{
			DeliveryMode: amqp.Persistent,
			Headers:      amqp.Table{"key": e.Key},
			Body:         e.Payload,
		}
		c, err := p.ch.PublishWithDeferredConfirmWithContext(ctx, "", p.t.Queue, false, false, msg)
		if err != nil {
			return err
		}
		p.confirms = append(p.confirms, c)
	}
	var first error
	for _, c := range p.confirms {
		ok, err := c.WaitContext(ctx)
		if err != nil {
			return err
		}
		if !ok && first == nil {
			first = errNacked
		}
	}
	return first
}

func (p *producer) Close() error {
	return p.conn.Close()
}
