package natsjs

import (
	"context"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"herald/bench/load"
)

// consumerName is the durable pull consumer that a drain's consumers share.
const consumerName = "herald-bench"

// fetchWait is how long a fetch waits for messages when none is
// available, as herald's consumers do.
const fetchWait = 200 * time.Millisecond

// PrepareConsumer creates the durable pull consumer of t's stream that
// NewConsumer's consumers share: explicit acks, from the first message, and
// room for every consumer's batch to be pending at once.
func PrepareConsumer(ctx context.Context, t Target, cc load.ConsumeConfig) error {
	nc, js, err := t.admin("herald-bench setup")
	if err != nil {
		return err
	}
	defer nc.Close()
	_, err = js.CreateOrUpdateConsumer(ctx, t.Stream, jetstream.ConsumerConfig{
		Durable:       consumerName,
		AckPolicy:     jetstream.AckExplicitPolicy,
		DeliverPolicy: jetstream.DeliverAllPolicy,
		MaxAckPending: max(2*cc.Consumers*cc.Batch, 1000),
		Replicas:      t.replicas(),
	})
	if err != nil {
		return fmt.Errorf("create consumer %s of %s: %w", consumerName, t.Stream, err)
	}
	return nil
}

// NewConsumer returns consumers of the durable pull consumer made by
// PrepareConsumer, each over its own connection. A fetch takes what is
// there, up to the batch, without waiting for a full batch; only when
// nothing is there does it wait, up to fetchWait. Each message is acked
// explicitly, the batch's last one with a double ack, which the server
// confirms: it handles a connection's acks in order, so the confirmation
// covers the whole batch, as herald's ack response does.
func NewConsumer(t Target) load.NewConsumer {
	return func(ctx context.Context, i int) (load.Consumer, error) {
		url := t.urlFor(i)
		nc, err := nats.Connect(url, nats.Name(fmt.Sprintf("herald-bench consumer %d", i)))
		if err != nil {
			return nil, fmt.Errorf("connect to %s: %w", url, err)
		}
		js, err := jetstream.New(nc)
		if err != nil {
			nc.Close()
			return nil, err
		}
		cons, err := js.Consumer(ctx, t.Stream, consumerName)
		if err != nil {
			nc.Close()
			return nil, fmt.Errorf("consumer %s of %s: %w", consumerName, t.Stream, err)
		}
		return &consumer{nc: nc, cons: cons}, nil
	}
}

type consumer struct {
	nc   *nats.Conn
	cons jetstream.Consumer
	msgs []jetstream.Msg
}

func (c *consumer) Fetch(ctx context.Context, max int) (int, error) {
	c.msgs = c.msgs[:0]
	batch, err := c.cons.FetchNoWait(max)
	if err == nil {
		err = c.collect(batch)
	}
	if err == nil && len(c.msgs) == 0 {
		if batch, err = c.cons.Fetch(max, jetstream.FetchMaxWait(fetchWait)); err == nil {
			err = c.collect(batch)
		}
	}
	return len(c.msgs), err
}

func (c *consumer) collect(batch jetstream.MessageBatch) error {
	for m := range batch.Messages() {
		c.msgs = append(c.msgs, m)
	}
	return batch.Error()
}

func (c *consumer) Ack(ctx context.Context) error {
	last := len(c.msgs) - 1
	for _, m := range c.msgs[:last] {
		if err := m.Ack(); err != nil {
			return err
		}
	}
	return c.msgs[last].DoubleAck(ctx)
}

func (c *consumer) Close() error {
	c.nc.Close()
	return nil
}
