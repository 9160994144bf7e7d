package robustness

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
	"herald/internal/testkit/heraldproc"
	"herald/tests/framework"
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
	start := func() *heraldproc.Server {
		return framework.StartServer(t, dataDir, testkit.FreeAddr(t), "--disk-free-limit", fmt.Sprint(64<<20), "--segment-size", fmt.Sprint(4<<20))
	}
	s := start()
	c := client.New("http://" + s.Addr())
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
	s.Kill()
	filler := fillDisk(t, mnt)
	s = start()
	c = client.New("http://" + s.Addr())
	checkEachOnceInOrder(t, acked, framework.ConsumeAll(t, c, "big", len(acked)))
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

// TestFullDiskWithoutLimit turns the disk alarm off and fills a small file
// system to the last byte: publishing stops (the shards wait for space
// rather than stopping for good), the node still answers, and once space
// is freed publishing resumes by itself and every acknowledged event is
// consumed once, in order per key.
func TestFullDiskWithoutLimit(t *testing.T) {
	mnt := smallFileSystem(t, 200<<20)
	reserve := filepath.Join(mnt, "reserve")
	if err := os.WriteFile(reserve, make([]byte, 24<<20), 0o644); err != nil {
		t.Fatal(err)
	}
	s := framework.StartServer(t, filepath.Join(mnt, "data"), testkit.FreeAddr(t), "--disk-free-limit", "0", "--segment-size", fmt.Sprint(4<<20))
	c := client.New("http://" + s.Addr())
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if _, err := c.CreateTopic(ctx, "big", map[string]string{"shards": "2", "max_queue_bytes": "0"}); err != nil {
		t.Fatal(err)
	}
	var acked []string
	unknown := make(map[string]bool) // payloads whose publish failed: committed or not
	for i := 0; ; i++ {
		if i > 4000 {
			t.Fatalf("%d events acknowledged on a 200 MiB file system", len(acked))
		}
		payload := append(fmt.Appendf(nil, "%06d", i), bytes.Repeat([]byte("z"), 64<<10)...)
		pctx, pcancel := context.WithTimeout(ctx, 3*time.Second)
		ids, err := c.Publish(pctx, "big", client.Event{Key: fmt.Sprintf("k%d", i%8), Payload: payload})
		pcancel()
		if err != nil {
			t.Logf("publishing stopped after %d events: %v", len(acked), err)
			unknown[string(payload)] = true
			break
		}
		acked = append(acked, ids...)
	}
	if _, err := c.ListTopics(ctx); err != nil {
		t.Fatalf("the node on a full disk does not answer: %v", err)
	}

	if err := os.Remove(reserve); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(time.Minute)
	for {
		payload := []byte("after")
		pctx, pcancel := context.WithTimeout(ctx, 3*time.Second)
		ids, err := c.Publish(pctx, "big", client.Event{Key: "k0", Payload: payload})
		pcancel()
		if err == nil {
			acked = append(acked, ids...)
			break
		}
		unknown[string(payload)] = true
		if time.Now().After(deadline) {
			t.Fatalf("publishing did not resume once space was freed: %v\n%s", err, s.Output())
		}
		time.Sleep(100 * time.Millisecond)
	}
	// A publish that failed on the full disk may have committed once
	// space returned (at least once): such an event may come too, once.
	isAcked := make(map[string]bool)
	for _, id := range acked {
		isAcked[id] = true
	}
	var got []client.Delivery
	for _, d := range append(framework.ConsumeAll(t, c, "big", len(acked)), drain(t, c, "big")...) {
		switch {
		case isAcked[d.ID]:
			got = append(got, d)
		case unknown[string(d.Payload)] && string(d.Payload) != "after":
			delete(unknown, string(d.Payload))
		case string(d.Payload) != "after":
			t.Errorf("consumed %s, which was never published", d.ID)
		}
	}
	checkEachOnceInOrder(t, acked, got)
}

// drain fetches and acknowledges what topic still holds, until a fetch
// finds nothing.
func drain(t *testing.T, c *client.Client, topic string) []client.Delivery {
	t.Helper()
	var got []client.Delivery
	for {
		ds, err := c.Fetch(context.Background(), topic, client.FetchOptions{MaxEvents: 100, Wait: time.Second})
		if err != nil {
			t.Fatal(err)
		}
		if len(ds) == 0 {
			return got
		}
		var receipts []string
		for _, d := range ds {
			got = append(got, d)
			receipts = append(receipts, d.Receipt)
		}
		if _, err := c.Ack(context.Background(), receipts...); err != nil {
			t.Fatal(err)
		}
	}
}
