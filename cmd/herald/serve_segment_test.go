package main

import (
	"context"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"herald/client"
	"herald/internal/testkit"
)

// TestServeSegmentSize: with --segment-size a shard's log is split into
// files of about that size, so a few KiB of events fill several.
func TestServeSegmentSize(t *testing.T) {
	dir, addr := t.TempDir(), testkit.FreeAddr(t)
	startServer(t, dir, addr, "--segment-size", "4096")
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

// TestServeRefusesABadSegmentSize: a segment size out of bounds is
// refused with what to give instead, before anything is written.
func TestServeRefusesABadSegmentSize(t *testing.T) {
	for _, size := range []string{"-1", "100", "4095", "1073741825"} {
		dir := t.TempDir()
		r := runCLI(context.Background(), "", "serve", "--data-dir", dir, "--listen", testkit.FreeAddr(t), "--segment-size="+size)
		want := "segment size " + size + ": give --segment-size (segment_size, HERALD_SEGMENT_SIZE) in bytes, from 4096 (4 KiB) to 1073741824 (1 GiB), or 0 for the default of 64 MiB"
		if r.code == 0 || !strings.Contains(r.stderr, want) {
			t.Errorf("serve --segment-size %s: exit %d, stderr %q; want it to say %q", size, r.code, r.stderr, want)
		}
		if entries, err := os.ReadDir(dir); err != nil || len(entries) != 0 {
			t.Errorf("serve --segment-size %s wrote %d entries in its data directory (%v), want none", size, len(entries), err)
		}
	}
}
