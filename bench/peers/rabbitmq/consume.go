package rabbitmq

import (
	"context"
	"errors"
	"fmt"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"herald/bench/load"
)

// Waits of a consumer's fetch: for the first delivery, when none is there,
// and for each further one of the batch.
const (
	fetchWait = 200 * time.Millisecond
	nextWait  = time.Millisecond
)

// NewConsumer returns consumers of t's queue, each over its own connection
// and channel, with a prefetch of batch unacknowledged messages and manual
// acks. A fetch takes the deliveries that arrive until it has batch of
// them, or none comes for a millisecond; the ack is one basic.ack with
// multiple set, for the whole batch. AMQP does not confirm a basic.ack:
// Ack returns once it is sent, a weaker promise than herald's committed
// ack or JetStream's double ack.
func NewConsumer(t Target, batch int) load.NewConsumer {
	return func(ctx context.Context, i int) (load.Consumer, error) {
		url := t.urlFor(i)
		conn, err := amqp.Dial(url)
		if err != nil {
			return nil, fmt.Errorf("connect to %s: %w", url, err)
		}
		c, err := consume(conn, t.Queue, batch, i)
		if err != nil {
			conn.Close()
			return nil, err
		}
		return c, nil
	}
}

func consume(conn *amqp.Connection, queue string, batch, i int) (*consumer, error) {
	ch, err := conn.Channel()
	if err != nil {
		return nil, err
	}
	if err := ch.Qos(batch, 0, false); err != nil {
		return nil, fmt.Errorf("set the prefetch to %d: %w", batch, err)
	}
	tag := fmt.Sprintf("herald-bench-%d", i)
	deliveries, err := ch.Consume(queue, tag, false, false, false, false, nil)
	if err != nil {
		return nil, fmt.Errorf("consume from %s: %w", queue, err)
	}
	return &consumer{conn: conn, ch: ch, deliveries: deliveries}, nil
}

type consumer struct {
	conn       *amqp.Connection
	ch         *amqp.Channel
	deliveries <-chan amqp.Delivery
	last       uint64 // delivery tag of the last message fetched
}

var errClosed = errors.New("the broker closed the channel")

func (c *consumer) Fetch(ctx context.Context, max int) (int, error) {
	n := 0
	wait := time.NewTimer(fetchWait)
	defer wait.Stop()
	for n < max {
		select {
		case d, ok := <-c.deliveries:
			if !ok {
				return n, errClosed
			}
			c.last = d.DeliveryTag
			n++
			wait.Reset(nextWait)
		case <-wait.C:
			return n, nil
		case <-ctx.Done():
			return n, ctx.Err()
		}
	}
	return n, nil
}

func (c *consumer) Ack(ctx context.Context) error {
	return c.ch.Ack(c.last, true)
}

func (c *consumer) Close() error {
	return c.conn.Close()
}
