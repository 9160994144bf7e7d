package main

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"herald/bench/load"
	"herald/client"
)

func TestBenchConsumePull(t *testing.T) {
	url := startInProcessServer(t)
	out := cli(t, url, "", "bench", "consume", "--topic", "c", "--shards", "2", "--backlog", "300",
		"--event-bytes", "100", "--keys", "40", "--consumers", "3", "--batch", "7", "--producers", "2", "-o", "json")
	var res load.Result
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatalf("output is not a result: %v\n%s", err, out)
	}
	if res.System != "herald" || res.Label != "2 shards, pull" || res.Consume == nil {
		t.Fatalf("system %q label %q consume %+v", res.System, res.Label, res.Consume)
	}
	want := load.ConsumeConfig{Mode: "pull", Backlog: 300, Consumers: 3, Batch: 7, EventBytes: 100, Keys: 40, FillProducers: 2, FillBatch: 100}
	if *res.Consume != want {
		t.Errorf("consume %+v, want %+v", *res.Consume, want)
	}
	if res.Events != 300 || res.Bytes != 30000 || res.Batches < 300/7 || res.Errors != 0 {
		t.Errorf("events %d bytes %d batches %d errors %d (%s)", res.Events, res.Bytes, res.Batches, res.Errors, res.FirstError)
	}
	if res.FetchLatency == nil || res.AckLatency == nil || res.EventsPerSecond <= 0 || res.Latency.Max <= 0 {
		t.Errorf("figures: %+v", res)
	}
	// The topic is gone afterwards.
	if _, err := client.New(url).GetTopic(context.Background(), "c"); !client.IsNotFound(err) {
		t.Errorf("topic after the run: %v, want not found", err)
	}
}

func TestBenchConsumePush(t *testing.T) {
	url := startInProcessServerWith(t, func(cfg *serveConfig) { cfg.PushAllow = "127.0.0.1/32" })
	out := cli(t, url, "", "bench", "consume", "--mode", "push", "--topic", "p", "--shards", "2",
		"--backlog", "200", "--keys", "40", "--event-bytes", "10")
	for _, want := range []string{"herald (2 shards, push)", "push to a local receiver",
		"drained:    200 events in", "events/s"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
}

func TestBenchConsumeBadFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--mode", "poll"}, `--mode "poll": want pull or push`},
		{[]string{"--backlog", "0"}, "--backlog 0: want at least 1"},
		{[]string{"--consumers", "0"}, "--consumers 0: want at least 1"},
		{[]string{"--batch", "0"}, "--batch 0: want at least 1"},
		{[]string{"--fill-batch", "0"}, "--fill-batch 0: want at least 1"},
		{[]string{"--producers", "0"}, "--producers 0: want at least 1"},
		{[]string{"--keys", "0"}, "--keys 0: want at least 1"},
		{[]string{"--timeout", "0s"}, "--timeout 0s: want a positive duration"},
		{[]string{"--attr", "nope"}, `--attr "nope": want name=value`},
		{[]string{"extra"}, "wrong number of arguments"},
	} {
		// No server: the flags are checked before anything is sent.
		stderr := cliFails(t, "http://127.0.0.1:1", "", append([]string{"bench", "consume"}, tc.args...)...)
		if !strings.Contains(stderr, tc.want) {
			t.Errorf("%v: stderr %q, want %q", tc.args, stderr, tc.want)
		}
	}
}

func TestBenchConsumeDrainAfter(t *testing.T) {
	url := startInProcessServer(t)
	start := time.Now()
	out := cli(t, url, "", "bench", "consume", "--topic", "d", "--shards", "1", "--backlog", "20",
		"--keys", "4", "--drain-after", "300ms", "-o", "json")
	var res load.Result
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatalf("output is not a result: %v\n%s", err, out)
	}
	if res.Events != 20 || res.Settings["drain_after"] != "300ms" {
		t.Errorf("events %d, settings %v; want 20 events and drain_after 300ms", res.Events, res.Settings)
	}
	if took := time.Since(start); took < 300*time.Millisecond {
		t.Errorf("the run took %s, less than its pause", took)
	}
}
