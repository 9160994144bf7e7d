package natsjs

import (
	"context"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"herald/bench/load"
	"herald/internal/testkit"
)

func TestLoadThroughJetStream(t *testing.T) {
	s := testkit.StartNATS(t)
	url, monitor := s.URL(), s.MonitorURL()
	ctx := context.Background()
	target := Target{URL: url, Stream: "BENCHTEST"}
	if err := Prepare(ctx, target); err != nil {
		t.Fatal(err)
	}
	for _, batch := range []int{1, 7} {
		// Prepare again: the stream starts empty.
		if err := Prepare(ctx, target); err != nil {
			t.Fatal(err)
		}
		cfg := load.Config{Producers: 3, Batch: batch, EventBytes: 64, Keys: 5, Count: 100}
		res, err := load.Run(ctx, cfg, NewProducer(target, batch))
		if err != nil {
			t.Fatal(err)
		}
		if res.Events != 100 || res.Errors != 0 {
			t.Errorf("batch %d: events %d errors %d (%s)", batch, res.Events, res.Errors, res.FirstError)
		}
		nc, err := nats.Connect(url)
		if err != nil {
			t.Fatal(err)
		}
		js, _ := jetstream.New(nc)
		s, err := js.Stream(ctx, target.Stream)
		if err != nil {
			t.Fatal(err)
		}
		info, err := s.Info(ctx, jetstream.WithSubjectFilter(target.Stream+".>"))
		if err != nil {
			t.Fatal(err)
		}
		if info.State.Msgs != 100 || info.State.Bytes < 100*64 || info.Config.Storage != jetstream.FileStorage ||
			info.Config.Replicas != 1 || info.State.NumSubjects > 5 {
			t.Errorf("batch %d: stream state %+v, config storage %v replicas %d", batch, info.State, info.Config.Storage, info.Config.Replicas)
		}
		nc.Close()
	}
	if err := Delete(ctx, target); err != nil {
		t.Fatal(err)
	}

	sync, err := ReadSync(ctx, monitor)
	if err != nil {
		t.Fatal(err)
	}
	if sync.Always || sync.Version == "" {
		t.Errorf("ReadSync = %+v, want sync_always false (the default) and a version", sync)
	}
}

func TestReadSyncWithoutJetStream(t *testing.T) {
	if _, err := ReadSync(context.Background(), "http://127.0.0.1:1"); err == nil {
		t.Error("no error from a monitoring URL where nothing listens")
	}
}

func TestProducersTakeTheServersInTurn(t *testing.T) {
	target := Target{URL: "nats://127.0.0.1:1, nats://127.0.0.1:2,nats://127.0.0.1:3"}
	want := []string{"nats://127.0.0.1:1", "nats://127.0.0.1:2", "nats://127.0.0.1:3", "nats://127.0.0.1:1"}
	for i, w := range want {
		if got := target.urlFor(i); got != w {
			t.Errorf("producer %d connects to %q, want %q", i, got, w)
		}
	}
	if got := (Target{URL: "nats://127.0.0.1:4222"}).urlFor(5); got != "nats://127.0.0.1:4222" {
		t.Errorf("with one URL, producer 5 connects to %q", got)
	}
}
