package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"herald/client"
	"herald/internal/testkit"
)

// smallFileSystem mounts a tmpfs of size bytes for the test, and unmounts
// it when the test ends (after the servers it started are killed: cleanups
// run last first). Mounting needs root, which make test runs as (CI too).
func smallFileSystem(t *testing.T, size int) string {
	t.Helper()
	dir := t.TempDir()
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", fmt.Sprintf("size=%d", size), "tmpfs", dir).CombinedOutput(); err != nil {
		t.Fatalf("mount a %d-byte tmpfs on %s (the disk-full tests need root): %v\n%s", size, dir, err, out)
	}
	t.Cleanup(func() {
		if out, err := exec.Command("umount", dir).CombinedOutput(); err != nil {
			t.Errorf("umount %s: %v\n%s", dir, err, out)
		}
	})
	return dir
}

// TestDiskFreeLimit fills a small file system with events until the node
// refuses them for lack of space, then checks that every acknowledged
// event can still be consumed, that publishing resumes by itself once
// consuming has freed space, and that the node starts on a disk that is
// completely full (another program filled it) and serves reads.
func TestDiskFreeLimit(t *testing.T) {
	mnt := smallFileSystem(t, 320<<20)
	dataDir := filepath.Join(mnt, "data")
	start := func() *server {
		return startServer(t, dataDir, testkit.FreeAddr(t), "--disk-free-limit", fmt.Sprint(64<<20), "--segment-size", fmt.Sprint(4<<20))
	}
	s := start()
	c := client.New("http://" + s.addr)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if _, err := c.CreateTopic(ctx, "big", map[string]string{"shards": "2", "max_queue_bytes": "0"}); err != nil {
		t.Fatal(err)
	}

	acked := fillUntilRefused(t, ctx, c)
	// The refusal leaves more than the limit's worth free: nothing stopped.
	if _, err := c.CreateTopic(ctx, "small", map[string]string{"shards": "1"}); err != nil {
		t.Fatalf("create a topic while publishing is refused: %v", err)
	}

	// Reads on a disk filled to the last byte, after a restart.
	s.kill()
	filler := fillDisk(t, mnt)
	s = start()
	c = client.New("http://" + s.addr)
	checkEachOnceInOrder(t, acked, consumeAll(t, c, "big", len(acked)))
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}

	// Consuming freed the space: publishing resumes by itself.
	deadline := time.Now().Add(time.Minute)
	for {
		_, err := c.Publish(ctx, "big", client.Event{Key: "k0", Payload: []byte("again")})
		if err == nil {
			break
		}
		if !client.IsResourceExhausted(err) || time.Now().After(deadline) {
			t.Fatalf("publish after consuming everything: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// fillUntilRefused publishes 256 KiB events over 8 keys until the server
// refuses them for lack of disk space, and returns the ids acknowledged.
func fillUntilRefused(t *testing.T, ctx context.Context, c *client.Client) []string {
	t.Helper()
	payload := bytes.Repeat([]byte("x"), 256<<10)
	var acked []string
	for i := 0; ; i++ {
		if i > 2000 { // 500 MiB: more than the file system holds
			t.Fatalf("%d events acknowledged on a 320 MiB file system without a refusal", len(acked))
		}
		ids, err := c.Publish(ctx, "big", client.Event{Key: fmt.Sprintf("k%d", i%8), Payload: payload})
		if err != nil {
			if !client.IsResourceExhausted(err) || !strings.Contains(err.Error(), "--disk-free-limit") {
				t.Fatalf("after %d events: %v, want resource_exhausted naming --disk-free-limit", len(acked), err)
			}
			t.Logf("refused after %d events: %v", len(acked), err)
			return acked
		}
		acked = append(acked, ids...)
	}
}

// fillDisk writes a file into dir until its file system is full, and
// returns its name.
func fillDisk(t *testing.T, dir string) string {
	t.Helper()
	name := filepath.Join(dir, "filler")
	f, err := os.Create(name)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	chunk := make([]byte, 1<<20)
	for {
		if _, err := f.Write(chunk); err != nil {
			if !errors.Is(err, syscall.ENOSPC) {
				t.Fatal(err)
			}
			break
		}
	}
	for len(chunk) > 1 { // the last blocks
		chunk = chunk[:len(chunk)/2]
		f.Write(chunk)
	}
	return name
}

// checkEachOnceInOrder checks that got holds each acknowledged id exactly
// once, nothing else, and each key's events in the order published.
func checkEachOnceInOrder(t *testing.T, acked []string, got []client.Delivery) {
	t.Helper()
	at := make(map[string]int) // position in acked, by id
	for i, id := range acked {
		at[id] = i
	}
	last := make(map[string]int) // position in acked of each key's last event
	for _, d := range got {
		i, ok := at[d.ID]
		if !ok {
			t.Fatalf("consumed %s, which was never acknowledged, or twice", d.ID)
		}
		delete(at, d.ID)
		if prev, ok := last[d.Key]; ok && i < prev {
			t.Errorf("key %s: %s consumed after a later event", d.Key, d.ID)
		}
		last[d.Key] = i
	}
	for id := range at {
		t.Errorf("acknowledged event %s was not consumed", id)
	}
}
