package main

import (
	"encoding/json"
	"testing"

	"herald/bench/load"
	"herald/internal/testkit/fakeherald"
	heraldv1 "herald/proto/herald/v1"
)

// TestBenchPublishThroughSeveralNodes: with --through, the producers
// publish through --server and the other nodes in turn, so that every
// node takes its share of the load.
func TestBenchPublishThroughSeveralNodes(t *testing.T) {
	var nodes []*fakeherald.Server
	var urls []string
	for range 3 {
		f := fakeherald.New(eventTime)
		urls = append(urls, f.Start(t))
		f.AddTopic("b", map[string]string{"shards": "3", "persistent": "true"})
		nodes = append(nodes, f)
	}
	out := cli(t, urls[0], "", "bench", "publish", "--topic", "b", "--through", urls[1]+","+urls[2],
		"--producers", "6", "--batch", "2", "--count", "60", "-o", "json")
	var res load.Result
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatalf("output is not a result: %v\n%s", err, out)
	}
	if res.Events != 60 || res.Errors != 0 || res.Settings["through"] != urls[1]+","+urls[2] {
		t.Errorf("events %d errors %d settings %v", res.Events, res.Errors, res.Settings)
	}
	total := 0
	for i, f := range nodes {
		n := 0
		for _, req := range fakeherald.Received[*heraldv1.PublishRequest](f) {
			n += len(req.GetEvents())
		}
		if n == 0 {
			t.Errorf("node %d received no publish", i+1)
		}
		total += n
	}
	if total < 60 {
		t.Errorf("the nodes received %d events in all, want at least 60", total)
	}
}
