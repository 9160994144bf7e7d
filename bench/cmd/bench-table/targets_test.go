package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"herald/bench/load"
)

// writeResults writes each result into its own file of a temporary
// directory, with the load of batch, and returns the files.
func writeResults(t *testing.T, batch int, results ...load.Result) []string {
	t.Helper()
	dir := t.TempDir()
	var files []string
	for i, r := range results {
		r.Config = load.Config{Producers: 64, Batch: batch, EventBytes: 1024, Keys: 1024}
		data, err := json.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(dir, string(rune('a'+i))+".json")
		if err := os.WriteFile(p, data, 0o644); err != nil {
			t.Fatal(err)
		}
		files = append(files, p)
	}
	return files
}

func TestR3Targets(t *testing.T) {
	files := writeResults(t, 1,
		load.Result{System: "herald", Label: "R3, 3 shards, async snapshots", FsyncBeforeAck: true, EventsPerSecond: 3000, Latency: load.Latency{P99: 12}},
		load.Result{System: "nats-jetstream", Label: "R3, sync_interval: always", FsyncBeforeAck: true, EventsPerSecond: 1000},
		load.Result{System: "nats-jetstream", Label: "R3, default", EventsPerSecond: 9000},
		load.Result{System: "rabbitmq", Label: "quorum queue of 3 members", FsyncBeforeAck: true, EventsPerSecond: 4000},
	)
	var out strings.Builder
	if err := run(append([]string{"--targets", "r3"}, files...), &out); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"herald (R3, 3 shards, async snapshots): 3.00× JetStream (R3, sync_interval: always) (target ≥ 2×: met)",
		"0.75× RabbitMQ (quorum queue of 3 members) (target ≥ 1×: **not met**)",
		"p99 12.0 ms (target ≤ 10 ms: **not met**)",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
	if strings.Contains(out.String(), "R3, default) (target") || strings.Contains(out.String(), "10×") {
		t.Errorf("the non-fsyncing JetStream, or an R1 target, was checked:\n%s", out.String())
	}
}

func TestSnapshotTargets(t *testing.T) {
	files := writeResults(t, 500,
		load.Result{System: "herald", Label: "R3, sync snapshots", FsyncBeforeAck: true, EventsPerSecond: 100000, Latency: load.Latency{P999: 90, Max: 120}},
		load.Result{System: "herald", Label: "R3, async snapshots", FsyncBeforeAck: true, EventsPerSecond: 99000, Latency: load.Latency{P999: 30, Max: 60}},
	)
	var out strings.Builder
	if err := run(append([]string{"--targets", "snapshots"}, files...), &out); err != nil {
		t.Fatal(err)
	}
	want := "herald (R3, sync snapshots vs async): p99.9 90.0 vs 30.0 ms, 3.00× lower (target ≥ 3×: met); " +
		"max 120 vs 60.0 ms, 2.00× lower (target ≥ 3×: **not met**); throughput 100000 vs 99000 events/s, async 0.99× (target ≥ 1×: **not met**)"
	if !strings.Contains(out.String(), want) {
		t.Errorf("output lacks %q:\n%s", want, out.String())
	}

	err := run(append([]string{"--targets", "r2"}, files...), &out)
	if err == nil || !strings.Contains(err.Error(), `--targets "r2": want r1, r3, snapshots or none`) {
		t.Errorf("--targets r2: %v", err)
	}
	out.Reset()
	if err := run(append([]string{"--targets", "none"}, files...), &out); err != nil || strings.Contains(out.String(), "Targets") {
		t.Errorf("--targets none: %v\n%s", err, out.String())
	}
}
