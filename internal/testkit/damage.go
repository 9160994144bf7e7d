package testkit

import (
	"os"
	"path/filepath"
	"testing"
)

// DamageFirstSegment flips the bits of one byte in the middle of the
// first log segment of the shard named shard, in the data directory of a
// stopped node (layout: shards/<id>-<name>/log/<segments>, as
// docs/architecture.md describes), and returns the file's path. The
// shard must have several segments, so that the damage is not in the
// log's tail, which recovery may cut: a test sets a small segment size.
func DamageFirstSegment(t testing.TB, dataDir, shard string) string {
	t.Helper()
	segs, _ := filepath.Glob(filepath.Join(dataDir, "shards", "*-"+shard, "log", "*"))
	if len(segs) < 2 {
		t.Fatalf("shard %s: want several log segments, got %v", shard, segs)
	}
	b, err := os.ReadFile(segs[0])
	if err != nil {
		t.Fatal(err)
	}
	b[len(b)/2] ^= 0xff
	if err := os.WriteFile(segs[0], b, 0o644); err != nil {
		t.Fatal(err)
	}
	return segs[0]
}
