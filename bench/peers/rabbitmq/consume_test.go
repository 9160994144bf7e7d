package rabbitmq

import (
	"context"
	"testing"

	amqp "github.com/rabbitmq/amqp091-go"

	"herald/bench/load"
	"herald/internal/testkit"
)

// TestDrainThroughQuorumQueue: the consumers drain a backlog, acking every
// message, and the queue is empty afterwards.
func TestDrainThroughQuorumQueue(t *testing.T) {
	url := testkit.StartRabbitMQ(t).URL()
	ctx := context.Background()
	target := Target{URL: url, Queue: "bench-consume"}
	if err := Prepare(ctx, target); err != nil {
		t.Fatal(err)
	}
	cc := load.DefaultConsumeConfig()
	cc.Backlog, cc.Consumers, cc.Batch, cc.EventBytes, cc.Keys, cc.FillProducers = 200, 3, 9, 64, 5, 2
	if _, err := load.Run(ctx, cc.Fill(), NewProducer(target)); err != nil {
		t.Fatal(err)
	}
	res, err := load.Drain(ctx, cc, NewConsumer(target, cc.Batch))
	if err != nil {
		t.Fatal(err)
	}
	if res.Events != 200 || res.Errors != 0 || res.Batches < 200/9 {
		t.Errorf("events %d batches %d errors %d (%s)", res.Events, res.Batches, res.Errors, res.FirstError)
	}
	conn, err := amqp.Dial(url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	q, err := ch.QueueDeclarePassive(target.Queue, true, false, false, false, amqp.Table{"x-queue-type": "quorum"})
	if err != nil {
		t.Fatal(err)
	}
	// The consumers are closed, so an unacked message would be back as ready.
	if q.Messages != 0 {
		t.Errorf("queue holds %d messages after the drain, want 0", q.Messages)
	}
}
