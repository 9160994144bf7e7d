package rabbitmq

import (
	"context"
	"testing"

	amqp "github.com/rabbitmq/amqp091-go"

	"herald/bench/load"
	"herald/internal/testkit"
)

func TestLoadThroughQuorumQueue(t *testing.T) {
	url := testkit.StartRabbitMQ(t).URL()
	ctx := context.Background()
	target := Target{URL: url, Queue: "bench-test"}
	v, err := Version(url)
	if err != nil || v == "" {
		t.Errorf("Version = %q, %v", v, err)
	}
	for _, batch := range []int{1, 9} {
		if err := Prepare(ctx, target); err != nil {
			t.Fatal(err)
		}
		cfg := load.Config{Producers: 3, Batch: batch, EventBytes: 64, Keys: 5, Count: 90}
		res, err := load.Run(ctx, cfg, NewProducer(target))
		if err != nil {
			t.Fatal(err)
		}
		if res.Events != 90 || res.Errors != 0 {
			t.Errorf("batch %d: events %d errors %d (%s)", batch, res.Events, res.Errors, res.FirstError)
		}
		conn, err := amqp.Dial(url)
		if err != nil {
			t.Fatal(err)
		}
		ch, err := conn.Channel()
		if err != nil {
			t.Fatal(err)
		}
		// Declaring a quorum queue as classic fails: the queue is a quorum queue.
		q, err := ch.QueueDeclarePassive(target.Queue, true, false, false, false, amqp.Table{"x-queue-type": "quorum"})
		if err != nil {
			t.Fatal(err)
		}
		if q.Messages != 90 {
			t.Errorf("batch %d: queue holds %d messages, want 90", batch, q.Messages)
		}
		if _, err := ch.QueueDeclare(target.Queue, true, false, false, false, amqp.Table{"x-queue-type": "classic"}); err == nil {
			t.Errorf("re-declaring the queue as classic succeeded: it is not a quorum queue")
		}
		conn.Close()
	}
	if err := Delete(ctx, target); err != nil {
		t.Fatal(err)
	}
}

func TestProducersTakeTheNodesInTurn(t *testing.T) {
	target := Target{URL: "amqp://127.0.0.1:1/,amqp://127.0.0.1:2/"}
	for i, want := range []string{"amqp://127.0.0.1:1/", "amqp://127.0.0.1:2/", "amqp://127.0.0.1:1/"} {
		if got := target.urlFor(i); got != want {
			t.Errorf("producer %d connects to %q, want %q", i, got, want)
		}
	}
}
