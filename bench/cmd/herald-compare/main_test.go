package main

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"herald/bench/compare"
)

func TestBadArgs(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"nosuch"}, `unknown scenario "nosuch": want one of shards, snapshots, persistence, or all`},
		{[]string{"--rounds", "0"}, "--rounds 0: want at least 1"},
		{[]string{"--output", "yaml"}, `--output "yaml": want human or json`},
	} {
		var stdout, stderr strings.Builder
		err := run(context.Background(), tc.args, &stdout, &stderr)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: err %v, want %q", tc.args, err, tc.want)
		}
	}
}

// buildHeraldForTest builds the herald binary that the servers run. It
// skips the test under -short: the fast tier starts no herald serve.
func buildHeraldForTest(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("starts herald serve processes; runs without -short (make test)")
	}
	bin := filepath.Join(t.TempDir(), "herald")
	if out, err := exec.Command("go", "build", "-o", bin, "herald/cmd/herald").CombinedOutput(); err != nil {
		t.Fatalf("go build herald: %v\n%s", err, out)
	}
	return bin
}

// TestCompare runs every scenario briefly on servers started from the
// real binary.
func TestCompare(t *testing.T) {
	bin := buildHeraldForTest(t)
	resultsFile := filepath.Join(t.TempDir(), "compare.json")
	var stdout, stderr strings.Builder
	err := run(context.Background(), []string{"--herald-binary", bin,
		"--rounds", "2", "--duration", "200ms", "--warmup", "0s", "--producers", "2", "--keys", "8",
		"--snapshot-entries", "50", "--results", resultsFile}, &stdout, &stderr)
	if err != nil {
		t.Fatalf("%v\nstderr:\n%s", err, stderr.String())
	}
	for _, want := range []string{
		"shards-1KiB: 1 shard vs 11 shards, 1KiB events", "shards-4KiB", "snapshots-batch1", "snapshots-batch500",
		"persistence: persistent (fsync) vs non-persistent", "median of 2 rounds",
		"SETTING", "EVENTS/S", "P99.9 MS", "11 shards vs 1 shard:", "async snapshots vs sync snapshots:",
		"non-persistent vs persistent:",
	} {
		if !strings.Contains(stdout.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, stdout.String())
		}
	}
	if !strings.Contains(stderr.String(), "starting herald with snapshots on the apply loop") || !strings.Contains(stderr.String(), "round 2 of 2") {
		t.Errorf("progress:\n%s", stderr.String())
	}

	data, err := os.ReadFile(resultsFile)
	if err != nil {
		t.Fatal(err)
	}
	var rep compare.Report
	if err := json.Unmarshal(data, &rep); err != nil {
		t.Fatal(err)
	}
	if rep.Rounds != 2 || len(rep.Scenarios) != 5 {
		t.Fatalf("rounds %d, %d scenarios; want 2 and 5", rep.Rounds, len(rep.Scenarios))
	}
	for _, sc := range rep.Scenarios {
		for _, side := range sc.Sides {
			if len(side.Runs) != 2 || side.Median.Rounds != 2 || side.Median.Events == 0 || side.Median.Errors != 0 {
				t.Errorf("%s, %s: %d runs, median %+v", sc.Name, side.Label, len(side.Runs), side.Median)
			}
		}
	}
	byName := map[string]compare.ScenarioResult{}
	for _, sc := range rep.Scenarios {
		byName[sc.Name] = sc
	}
	if s := byName["shards-4KiB"].Sides; s[0].Median.Settings["shards"] != "1" || s[1].Median.Settings["shards"] != "11" ||
		s[0].Median.Config.EventBytes != 4096 {
		t.Errorf("shards-4KiB sides: %+v / %+v", s[0].Median, s[1].Median)
	}
	if s := byName["snapshots-batch500"].Sides; s[0].Median.Settings["sync_snapshots"] != "true" ||
		s[1].Median.Settings["sync_snapshots"] != "false" || s[0].Median.Config.Batch != 500 {
		t.Errorf("snapshots-batch500 sides: %+v / %+v", s[0].Median, s[1].Median)
	}
	if s := byName["persistence"].Sides; !s[0].Median.FsyncBeforeAck || s[1].Median.FsyncBeforeAck ||
		!strings.HasPrefix(s[1].Median.Settings["push_endpoint"], "http://127.0.0.1:") {
		t.Errorf("persistence sides: %+v / %+v", s[0].Median, s[1].Median)
	}
}
