package vfs_test

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"herald/internal/testkit"
	"herald/internal/vfs"
)

func TestDropCacheDropsSyncedWholePagesAndKeepsTheData(t *testing.T) {
	page := os.Getpagesize()
	path := filepath.Join(testkit.PageCacheDir(t), "f")
	f, err := vfs.OS.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	data := bytes.Repeat([]byte("herald"), (16*page+100)/6)
	if _, err := f.WriteAt(data, 0); err != nil {
		t.Fatal(err)
	}
	if err := f.SyncData(); err != nil {
		t.Fatal(err)
	}
	if got := testkit.ResidentPages(t, path); slices.Contains(got, false) {
		t.Fatalf("pages just written and synced should be cached: %v", got)
	}

	if err := vfs.DropCache(f, 0, int64(len(data))); err != nil {
		t.Fatal(err)
	}
	got := testkit.ResidentPages(t, path)
	whole := len(data) / page
	if slices.Contains(got[:whole], true) {
		t.Errorf("whole pages still cached after DropCache: %v", got[:whole])
	}
	if !got[whole] {
		t.Errorf("the partly covered last page was dropped; DropCache must leave it")
	}
	back := make([]byte, len(data))
	if _, err := f.ReadAt(back, 0); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(back, data) {
		t.Fatal("the file's data changed")
	}
}

func TestDropCacheOnAMemoryFileChangesNothing(t *testing.T) {
	fs := vfs.NewMem()
	f, err := fs.OpenFile("f", os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt([]byte("event"), 0); err != nil {
		t.Fatal(err)
	}
	if err := vfs.DropCache(f, 0, 5); err != nil {
		t.Fatal(err)
	}
	back := make([]byte, 5)
	if _, err := f.ReadAt(back, 0); err != nil || string(back) != "event" {
		t.Fatalf("read back %q, %v", back, err)
	}
}
