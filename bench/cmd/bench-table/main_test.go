package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"herald/bench/load"
)

func TestTable(t *testing.T) {
	dir := t.TempDir()
	cfg := load.Config{Producers: 64, Batch: 1, EventBytes: 1024, Keys: 1024}
	write := func(name string, r load.Result) string {
		r.Config = cfg
		data, err := json.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, data, 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	files := []string{
		write("r1.json", load.Result{System: "rabbitmq", Label: "quorum", FsyncBeforeAck: true, EventsPerSecond: 500}),
		write("h1.json", load.Result{System: "herald", Label: "11 shards", FsyncBeforeAck: true, EventsPerSecond: 30000, Latency: load.Latency{P99: 4}, ServerCPU: &load.ProcessesCPU{MicrosPerEvent: 30}}),
		write("h2.json", load.Result{System: "herald", Label: "11 shards", FsyncBeforeAck: true, EventsPerSecond: 10000, Latency: load.Latency{P99: 8}, ServerCPU: &load.ProcessesCPU{MicrosPerEvent: 50}}),
		write("h3.json", load.Result{System: "herald", Label: "11 shards", FsyncBeforeAck: true, EventsPerSecond: 20000, Latency: load.Latency{P99: 6}, ServerCPU: &load.ProcessesCPU{MicrosPerEvent: 40.5}}),
		write("na.json", load.Result{System: "nats-jetstream", Label: "sync_interval: always", FsyncBeforeAck: true, EventsPerSecond: 1000}),
		write("nd.json", load.Result{System: "nats-jetstream", Label: "default", EventsPerSecond: 25000}),
	}
	summary := filepath.Join(dir, "summary.json")
	var out strings.Builder
	if err := run(append([]string{"--summary", summary}, files...), &out); err != nil {
		t.Fatal(err)
	}
	text := out.String()
	lines := strings.Split(text, "\n")
	// Header, rule, then herald, JetStream (fsyncing first), RabbitMQ.
	for i, want := range []string{"| herald | 11 shards | yes |", "| nats-jetstream | sync_interval: always | yes |",
		"| nats-jetstream | default | **no** |", "| rabbitmq | quorum | yes |"} {
		if !strings.HasPrefix(lines[2+i], want) {
			t.Errorf("row %d = %q, want it to start with %q", i, lines[2+i], want)
		}
	}
	if !strings.Contains(lines[2], "| 20000 |") || !strings.Contains(lines[2], "| 6.00 |") || !strings.Contains(lines[2], "| 40.5 | 3 | 0 |") {
		t.Errorf("herald row should hold the medians of 3 runs: %q", lines[2])
	}
	if !strings.Contains(lines[5], "| – | 1 | 0 |") {
		t.Errorf("a row without server CPU should show –: %q", lines[5])
	}
	for _, want := range []string{
		"20.0× JetStream sync_interval: always (target ≥ 10×: met)",
		"0.80× JetStream's non-fsyncing default (target ≥ 1×: **not met**)",
		"p99 6.00 ms (target < 5 ms: **not met**)",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("output lacks %q:\n%s", want, text)
		}
	}
	data, err := os.ReadFile(summary)
	if err != nil {
		t.Fatal(err)
	}
	var medians []load.Result
	if err := json.Unmarshal(data, &medians); err != nil || len(medians) != 4 || medians[0].Rounds != 3 {
		t.Errorf("summary: %v, %d results", err, len(medians))
	}
}
