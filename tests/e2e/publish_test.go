package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"herald/internal/testkit"
	"herald/tests/framework"
)

// TestPublishFileOverRequestLimit runs the real binaries: 70 lines of a
// megabyte, each under the server's payload limit and together over its
// request limit, are sent as several requests and every one is published.
// (They were sent as one request, which the server refused: "message size
// 70003298 is larger than configured max 67108864".)
func TestPublishFileOverRequestLimit(t *testing.T) {
	const lines, lineBytes = 70, 1_000_000
	addr := testkit.FreeAddr(t)
	framework.StartServer(t, t.TempDir(), addr, "--max-payload-bytes", "1100000")
	run := func(args ...string) string {
		t.Helper()
		out, err := exec.Command(framework.Binary(), append([]string{"--server", "http://" + addr}, args...)...).Output()
		if err != nil {
			t.Fatalf("herald %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	run("topic", "create", "big", "--shards", "2")
	path := filepath.Join(t.TempDir(), "events")
	var file bytes.Buffer
	for i := range lines {
		file.WriteString(strings.Repeat(fmt.Sprintf("%02d", i), lineBytes/2) + "\n")
	}
	if err := os.WriteFile(path, file.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	ids := strings.Fields(run("publish", "big", "--file", path))
	if len(ids) != lines {
		t.Fatalf("printed %d ids, want %d", len(ids), lines)
	}
	var stats struct {
		Total struct {
			Published int64 `json:"published,string"` // a 64-bit number, as the API writes it
		} `json:"total"`
	}
	out := run("topic", "stats", "big", "-o", "json")
	if err := json.Unmarshal([]byte(out), &stats); err != nil || stats.Total.Published != lines {
		t.Fatalf("stats %s (%v), want %d published", out, err, lines)
	}
}
