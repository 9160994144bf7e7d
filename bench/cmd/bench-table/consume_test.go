package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"herald/bench/load"
)

func TestConsumeTable(t *testing.T) {
	dir := t.TempDir()
	write := func(name, system string, backlog int64, rate float64) string {
		cc := load.DefaultConsumeConfig()
		cc.Backlog, cc.Keys = backlog, 40
		r := load.Result{System: system, Label: "pull", Consume: &cc, Config: cc.Fill(), EventsPerSecond: rate,
			FetchLatency: &load.Latency{P50: 1, P99: 2}, AckLatency: &load.Latency{P50: 3, P99: 4}}
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
		write("h1.json", "herald", 10_000, 1000),
		write("h2.json", "herald", 10_000, 3000),
		write("h3.json", "herald", 100_000, 500),
		write("n1.json", "nats-jetstream", 10_000, 1500),
		write("n2.json", "nats-jetstream", 100_000, 400),
	}
	var out strings.Builder
	if err := run(files, &out); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"| herald | pull | 40 | 10000 | 4 | 100 | 2000 | 0.0 | 1.00 | 2.00 | 3.00 | 4.00 | – | 2 | 0 |",
		"| nats-jetstream | pull | 40 | 100000 | 4 | 100 | 400 |",
		"- 40 keys, backlog 10000: herald (pull) 1.33× JetStream (pull) (target ≥ 1×: met)",
		"- 40 keys, backlog 100000: herald (pull) 1.25× JetStream (pull) (target ≥ 1×: met)",
		"- 40 keys, herald (pull): backlog 100000 drains at 0.25× the rate of backlog 10000 (target within 20 %: **not met**)",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
	// Publish and consumption results do not mix.
	pub := filepath.Join(dir, "pub.json")
	if err := os.WriteFile(pub, []byte(`{"system":"herald","config":{"producers":1,"batch":1}}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := run(append(files, pub), &out); err == nil || !strings.Contains(err.Error(), "mixed") {
		t.Errorf("mixed results: %v", err)
	}
}
