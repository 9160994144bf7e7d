package log

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"herald/internal/testkit"
)

// TestDropSyncedLeavesThePageCacheOnceSynced checks Options.DropSynced:
// the whole pages of every segment leave the page cache once synced (at
// Sync, and when a full segment is synced before the log rolls), while a
// log without it keeps them cached; either way every record reads back
// after a reopen.
func TestDropSyncedLeavesThePageCacheOnceSynced(t *testing.T) {
	page := int64(os.Getpagesize())
	recs := make([]Record, 200)
	for i := range recs {
		recs[i] = Record{Index: uint64(i + 1), Term: 1, Data: bytes.Repeat([]byte{byte(i)}, 1000+i)}
	}
	for _, drop := range []bool{true, false} {
		dir := filepath.Join(testkit.PageCacheDir(t), "log")
		opts := Options{SegmentSize: 64 << 10, DropSynced: drop}
		l := mustOpen(t, dir, opts)
		mustAppend(t, l, recs[:150])
		if err := l.Sync(); err != nil {
			t.Fatal(err)
		}
		mustAppend(t, l, recs[150:])
		if err := l.Sync(); err != nil {
			t.Fatal(err)
		}
		segs := segFiles(t, dir)
		if len(segs) < 3 {
			t.Fatalf("want several segments, got %v", segs)
		}
		for _, name := range segs {
			path := filepath.Join(dir, name)
			fi, err := os.Stat(path)
			if err != nil {
				t.Fatal(err)
			}
			whole := testkit.ResidentPages(t, path)[:fi.Size()/page]
			switch {
			case drop && slices.Contains(whole, true):
				t.Errorf("DropSynced: synced pages of %s still cached: %v", name, whole)
			case !drop && slices.Contains(whole, false):
				t.Errorf("without DropSynced: pages of %s left the cache: %v", name, whole)
			}
		}
		mustClose(t, l)
		l = mustOpen(t, dir, opts)
		expect(t, l, 1, 0, recs)
		mustClose(t, l)
	}
}
