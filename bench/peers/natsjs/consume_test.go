package natsjs

import (
	"context"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"herald/bench/load"
	"herald/internal/testkit"
)

// TestDrainThroughJetStream: the pull consumers drain a backlog, acking
// every message, and the stream's consumer has none pending afterwards.
func TestDrainThroughJetStream(t *testing.T) {
	url := testkit.StartNATS(t).URL()
	ctx := context.Background()
	target := Target{URL: url, Stream: "BENCHCONSUME"}
	if err := Prepare(ctx, target); err != nil {
		t.Fatal(err)
	}
	cc := load.DefaultConsumeConfig()
	cc.Backlog, cc.Consumers, cc.Batch, cc.EventBytes, cc.Keys, cc.FillProducers = 250, 3, 7, 64, 5, 2
	if _, err := load.Run(ctx, cc.Fill(), NewProducer(target, cc.FillBatch)); err != nil {
		t.Fatal(err)
	}
	if err := PrepareConsumer(ctx, target, cc); err != nil {
		t.Fatal(err)
	}
	res, err := load.Drain(ctx, cc, NewConsumer(target))
	if err != nil {
		t.Fatal(err)
	}
	if res.Events != 250 || res.Errors != 0 || res.Batches < 250/7 {
		t.Errorf("events %d batches %d errors %d (%s)", res.Events, res.Batches, res.Errors, res.FirstError)
	}
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	cons, err := js.Consumer(ctx, target.Stream, consumerName)
	if err != nil {
		t.Fatal(err)
	}
	info, err := cons.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.NumAckPending != 0 || info.NumPending != 0 || info.AckFloor.Stream != 250 {
		t.Errorf("consumer after the drain: %d ack pending, %d pending, ack floor %d; want 0, 0, 250",
			info.NumAckPending, info.NumPending, info.AckFloor.Stream)
	}
}
