package e2e

import (
	"context"
	"io/fs"
	"path/filepath"
	"strings"
	"testing"

	"herald/client"
	"herald/internal/testkit"
	"herald/tests/framework"
)

// TestServeSegmentSize: with --segment-size a shard's log is split into
// files of about that size, so a few KiB of events fill several.
func TestServeSegmentSize(t *testing.T) {
	dir, addr := t.TempDir(), testkit.FreeAddr(t)
	framework.StartServer(t, dir, addr, "--segment-size", "4096")
	c := client.New("http://" + addr)
	ctx := context.Background()
	if _, err := c.CreateTopic(ctx, "orders", nil); err != nil {
		t.Fatal(err)
	}
	for i := range 400 {
		if _, err := c.Publish(ctx, "orders", client.Event{Key: "k", Payload: []byte(strings.Repeat("x", 1000))}); err != nil {
			t.Fatalf("publish %d: %v", i, err)
		}
	}
	// 400 events of 1,000 bytes make 400 KiB of log, more than a shard
	// keeps in memory before writing its log (256 KiB): at least five
	// files of 4 KiB in the shard's directory (the default, 64 MiB, would
	// be one).
	perDir := map[string]int{}
	filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err == nil && strings.HasSuffix(path, ".seg") {
			perDir[filepath.Dir(path)]++
		}
		return nil
	})
	most := 0
	for _, n := range perDir {
		most = max(most, n)
	}
	if most < 5 {
		t.Errorf("log files per directory %v, want a shard's log in 5 or more", perDir)
	}
}
