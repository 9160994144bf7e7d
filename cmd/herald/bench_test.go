package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"herald/bench/load"
	"herald/client"
	"herald/internal/testkit"
	"herald/tests/framework"
)

// inProcessServer is serve running in the test's process.
type inProcessServer struct {
	logs   *framework.SyncBuffer
	exited chan struct{} // closed when serve returns, with err set
	err    error
}

// serveInProcess runs serve with cfg until the test ends, and fails the
// test if serve fails.
func serveInProcess(t *testing.T, cfg serveConfig) *inProcessServer {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	s := &inProcessServer{logs: new(framework.SyncBuffer), exited: make(chan struct{})}
	go func() {
		s.err = serve(ctx, cfg, s.logs)
		close(s.exited)
	}()
	t.Cleanup(func() {
		cancel()
		<-s.exited
		if s.err != nil {
			t.Errorf("serve: %v\n%s", s.err, s.logs.String())
		}
	})
	return s
}

// startInProcessServer runs a real herald server (serve) in this process
// and returns its URL once it answers.
func startInProcessServer(t *testing.T) string {
	t.Helper()
	return startInProcessServerWith(t, func(*serveConfig) {})
}

// startInProcessServerWith is startInProcessServer with the configuration
// changed by edit first.
func startInProcessServerWith(t *testing.T, edit func(*serveConfig)) string {
	t.Helper()
	cfg := defaultServeConfig()
	cfg.DataDir = t.TempDir()
	cfg.Listen = testkit.FreeAddr(t)
	cfg.LogLevel = "warn"
	edit(&cfg)
	srv := serveInProcess(t, cfg)
	url := "http://" + cfg.Listen
	c := client.New(url)
	deadline := time.Now().Add(30 * time.Second)
	for {
		cctx, ccancel := context.WithTimeout(context.Background(), time.Second)
		_, err := c.ListTopics(cctx)
		ccancel()
		if err == nil {
			return url
		}
		select {
		case <-srv.exited:
			t.Fatalf("serve exited: %v\n%s", srv.err, srv.logs.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("server did not answer: %v\n%s", err, srv.logs.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestBenchPublishAgainstServer(t *testing.T) {
	url := startInProcessServer(t)
	resultsFile := filepath.Join(t.TempDir(), "r.json")
	out := cli(t, url, "", "bench", "publish", "--topic", "b", "--shards", "2", "--producers", "4",
		"--batch", "3", "--event-bytes", "100", "--keys", "10", "--count", "60", "--results", resultsFile, "-o", "json")
	var res load.Result
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatalf("output is not a result: %v\n%s", err, out)
	}
	if res.System != "herald" || res.Label != "2 shards" || !res.FsyncBeforeAck {
		t.Errorf("system %q label %q fsync %v", res.System, res.Label, res.FsyncBeforeAck)
	}
	if res.Events != 60 || res.Batches != 20 || res.Bytes != 6000 || res.Errors != 0 {
		t.Errorf("events %d batches %d bytes %d errors %d, want 60 20 6000 0", res.Events, res.Batches, res.Bytes, res.Errors)
	}
	want := load.Config{Producers: 4, Batch: 3, EventBytes: 100, Keys: 10, Count: 60}
	if res.Config != want {
		t.Errorf("config %+v, want %+v", res.Config, want)
	}
	if res.EventsPerSecond <= 0 || res.Latency.P50 <= 0 || res.Latency.Max < res.Latency.P99 {
		t.Errorf("figures: %+v", res)
	}
	data, err := os.ReadFile(resultsFile)
	if err != nil {
		t.Fatal(err)
	}
	var fromFile load.Result
	if err := json.Unmarshal(data, &fromFile); err != nil || fromFile.Events != 60 {
		t.Errorf("--results file: %v, %s", err, data)
	}

	// The events are really there, with the unlimited queue size.
	c := client.New(url)
	stats, err := c.TopicStats(context.Background(), "b")
	if err != nil {
		t.Fatal(err)
	}
	if stats.Total.Published != 60 {
		t.Errorf("published %d, want 60", stats.Total.Published)
	}
	topic, err := c.GetTopic(context.Background(), "b")
	if err != nil || topic.Attributes["max_queue_bytes"] != "0" {
		t.Errorf("topic: %v, %v; want max_queue_bytes 0", topic, err)
	}

	// A second run adds to the topic; a different shard count needs --fresh.
	stderr := cliFails(t, url, "", "bench", "publish", "--topic", "b", "--shards", "3", "--count", "10")
	if !strings.Contains(stderr, "exists with 2 shards, not 3; pass --fresh") {
		t.Errorf("stderr = %q", stderr)
	}
	out = cli(t, url, "", "bench", "publish", "--topic", "b", "--fresh", "--shards", "1", "--producers", "2",
		"--count", "10", "--warmup", "50ms")
	for _, want := range []string{"herald (1 shard): fsync before every acknowledgement",
		"2 producers, batch 1, 1024-byte events, 1024 keys, 10 events after a 50ms warm-up",
		"events:     10 in", "events/s", "p99.9"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	stats, err = c.TopicStats(context.Background(), "b")
	if err != nil {
		t.Fatal(err)
	}
	if len(stats.Shards) != 1 || stats.Total.Published < 10 {
		t.Errorf("after --fresh: %d shards, %d published; want 1 shard, at least 10", len(stats.Shards), stats.Total.Published)
	}
}

func TestBenchPublishDuration(t *testing.T) {
	url := startInProcessServer(t)
	start := time.Now()
	out := cli(t, url, "", "bench", "publish", "--topic", "d", "--producers", "3", "--duration", "300ms", "-o", "json")
	if took := time.Since(start); took > 20*time.Second {
		t.Errorf("a 300ms run took %v", took)
	}
	var res load.Result
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatal(err)
	}
	if res.Events == 0 || res.Seconds < 0.3 || res.Config.Duration != 300*time.Millisecond || res.Label != "11 shards" {
		t.Errorf("events %d seconds %v config %+v label %q", res.Events, res.Seconds, res.Config, res.Label)
	}
}

func TestBenchPublishBadFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--producers", "0"}, "--producers 0: want at least 1"},
		{[]string{"--batch", "-1"}, "--batch -1: want at least 1"},
		{[]string{"--keys", "0"}, "--keys 0: want at least 1"},
		{[]string{"--duration", "0s"}, "give --duration or --count"},
		{[]string{"--attr", "nope"}, `--attr "nope": want name=value`},
		{[]string{"extra"}, "wrong number of arguments"},
	} {
		// No server: the flags are checked before anything is sent.
		stderr := cliFails(t, "http://127.0.0.1:1", "", append([]string{"bench", "publish"}, tc.args...)...)
		if !strings.Contains(stderr, tc.want) {
			t.Errorf("%v: stderr %q, want %q", tc.args, stderr, tc.want)
		}
	}
	stderr := cliFails(t, "http://127.0.0.1:1", "", "bench", "publish", "--count", "1")
	if !strings.Contains(stderr, "cannot reach the herald server") {
		t.Errorf("no server: stderr %q", stderr)
	}
}

func TestBenchShardsBadFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--shards", "15"}, "multiple of 10"},
		{[]string{"--shards", "0"}, "multiple of 10"},
		{[]string{"--runs", "0"}, "--runs 0"},
		{[]string{"--idle-window", "0s"}, "--idle-window"},
		{[]string{"--settle", "-1s"}, "--settle"},
	} {
		root := newRootCommand()
		root.SetArgs(append([]string{"bench", "shards"}, tc.args...))
		var out strings.Builder
		root.SetOut(&out)
		root.SetErr(&out)
		err := root.Execute()
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("bench shards %v: err %v, want one saying %q", tc.args, err, tc.want)
		}
	}
}

func TestBenchTierBadFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--nodes", "0"}, "--nodes 0"},
		{[]string{"--topics", "0"}, "--topics"},
		{[]string{"--parallelism", "1,0"}, "--parallelism 0"},
		{[]string{"--rounds", "0"}, "--rounds"},
		{[]string{"--warmup", "-1"}, "--warmup"},
		{[]string{"--interval", "0s"}, "--interval 0s"},
		{[]string{"--events", "0"}, "--events"},
		{[]string{"--min-advanced", "1.5"}, "--min-advanced 1.5"},
	} {
		root := newRootCommand()
		root.SetArgs(append([]string{"bench", "tier"}, tc.args...))
		var out strings.Builder
		root.SetOut(&out)
		root.SetErr(&out)
		err := root.Execute()
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("bench tier %v: err %v, want one saying %q", tc.args, err, tc.want)
		}
	}
}
