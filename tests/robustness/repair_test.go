package robustness

import (
	"bytes"
	"context"
	"crypto/sha256"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"herald/client"
	"herald/internal/testkit"
	"herald/tests/framework"
)

// TestRepairDamagedWAL damages a record in the middle of a single node's
// write-ahead log after a SIGKILL: the node refuses to start and sends the
// operator to herald repair, which reports the damage and what cutting it
// would lose without changing anything, then, with --discard-damaged,
// cuts it. The node then starts, and every key's events are still there,
// once and in order, up to where the cut took the rest; no more are lost
// than the report said at most.
func TestRepairDamagedWAL(t *testing.T) {
	dataDir := t.TempDir()
	s := framework.StartServer(t, dataDir, testkit.FreeAddr(t))
	c := client.New("http://" + s.Addr())
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if _, err := c.CreateTopic(ctx, "orders", map[string]string{"shards": "3"}); err != nil {
		t.Fatal(err)
	}
	const keys, perKey = 6, 50
	published := make(map[string][]string) // key -> payloads, in order
	for i := range perKey {
		for k := range keys {
			key := fmt.Sprintf("k%d", k)
			payload := fmt.Sprintf("%s-%d-%s", key, i, strings.Repeat("x", 200))
			if _, err := c.Publish(ctx, "orders", client.Event{Key: key, Payload: []byte(payload)}); err != nil {
				t.Fatal(err)
			}
			published[key] = append(published[key], payload)
		}
	}
	s.Kill()
	damageMiddleOfWAL(t, filepath.Join(dataDir, "wal"))

	// The node does not start, and says what to do.
	out, err := exec.Command(framework.Binary(), "serve", "--data-dir", dataDir, "--listen", testkit.FreeAddr(t)).CombinedOutput()
	if err == nil || !strings.Contains(string(out), "write-ahead log") || !strings.Contains(string(out), "herald repair --data-dir "+dataDir) {
		t.Fatalf("serve on a damaged WAL: %v\n%s", err, out)
	}

	before := snapshotDir(t, dataDir)
	report, err := exec.Command(framework.Binary(), "repair", "--data-dir", dataDir).CombinedOutput()
	if err == nil {
		t.Fatalf("repair found nothing to cut, or did not say so with its status:\n%s", report)
	}
	for _, want := range []string{"Damaged: the node's write-ahead log", "byte offset", "--discard-damaged", "acknowledged events can be lost"} {
		if !strings.Contains(string(report), want) {
			t.Errorf("the report does not say %q:\n%s", want, report)
		}
	}
	if after := snapshotDir(t, dataDir); after != before {
		t.Fatalf("repair without --discard-damaged changed the data directory:\nbefore %s\nafter  %s", before, after)
	}
	t.Logf("herald repair:\n%s", report)
	atMost, unreadable := reportedLoss(t, string(report))

	out, err = exec.Command(framework.Binary(), "repair", "--data-dir", dataDir, "--discard-damaged").CombinedOutput()
	if err != nil || !strings.Contains(string(out), filepath.Join(dataDir, "damaged")) {
		t.Fatalf("repair --discard-damaged: %v\n%s", err, out)
	}
	out, err = exec.Command(framework.Binary(), "repair", "--data-dir", dataDir).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "No damage") {
		t.Fatalf("repair after the cut: %v\n%s", err, out)
	}

	s = framework.StartServer(t, dataDir, testkit.FreeAddr(t))
	c = client.New("http://" + s.Addr())
	got := make(map[string][]string)
	total := 0
	for _, d := range drain(t, c, "orders") {
		got[d.Key] = append(got[d.Key], string(d.Payload))
		total++
	}
	for key, want := range published {
		if len(got[key]) > len(want) || !slicesEqual(got[key], want[:len(got[key])]) {
			t.Errorf("key %s: consumed %d events that are not the first ones published, in order", key, len(got[key]))
		}
	}
	// An unreadable event takes more than its 200-byte payload.
	lost, bound := keys*perKey-total, atMost+unreadable/200
	t.Logf("the cut lost %d of %d events; the report said at most %d, and %d bytes unreadable", lost, keys*perKey, atMost, unreadable)
	if lost > bound {
		t.Errorf("the cut lost %d events, but the report said at most %d and %d bytes unreadable", lost, atMost, unreadable)
	}
	// The node takes events again, and its log said what the repair did.
	if _, err := c.Publish(ctx, "orders", client.Event{Key: "k0", Payload: []byte("after")}); err != nil {
		t.Fatal(err)
	}
	s.Kill()
	if !strings.Contains(s.Output(), "accepted what the repair of the write-ahead log discarded") {
		t.Errorf("the node's log does not say that it started after a repair:\n%s", s.Output())
	}
}

// damageMiddleOfWAL flips a byte halfway through the written part of the
// WAL's last file.
func damageMiddleOfWAL(t *testing.T, dir string) {
	t.Helper()
	names, err := filepath.Glob(filepath.Join(dir, "*.seg"))
	if err != nil || len(names) == 0 {
		t.Fatalf("no WAL files in %s: %v", dir, err)
	}
	path := names[len(names)-1]
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	written := len(bytes.TrimRight(data, "\x00"))
	if written < 4096 {
		t.Fatalf("the WAL file %s holds only %d bytes", path, written)
	}
	data[written/2] ^= 0x40
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
}

// snapshotDir describes every file under dir by path, size and content
// digest, to tell whether anything changed.
func snapshotDir(t *testing.T, dir string) string {
	t.Helper()
	var b strings.Builder
	err := filepath.Walk(dir, func(path string, info os.FileInfo, err error) error {
		if err != nil || info.IsDir() || filepath.Base(path) == "LOCK" {
			return err
		}
		data, err := os.ReadFile(path)
		fmt.Fprintf(&b, "%s:%d:%x ", path, len(data), sha256.Sum256(data))
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return b.String()
}

var (
	lossPattern       = regexp.MustCompile(`At most (\d+) acknowledged`)
	unreadablePattern = regexp.MustCompile(`(\d+) of those bytes cannot be read`)
)

// reportedLoss adds up the "at most N acknowledged events" of a report,
// and the bytes it says cannot be read.
func reportedLoss(t *testing.T, report string) (events, unreadable int) {
	t.Helper()
	sum := func(p *regexp.Regexp) int {
		total := 0
		for _, m := range p.FindAllStringSubmatch(report, -1) {
			n, _ := strconv.Atoi(m[1])
			total += n
		}
		return total
	}
	return sum(lossPattern), sum(unreadablePattern)
}

func slicesEqual(a, b []string) bool {
	return slices.Equal(a, b)
}

// TestRepairDamagedShardLog damages a record in the middle of one shard's
// own log of a single node stopped cleanly: the node starts with that
// shard unavailable; herald repair names the shard and what a cut loses,
// and once it has cut, the shard serves again with every key's events up
// to the damage, in order.
func TestRepairDamagedShardLog(t *testing.T) {
	dataDir := t.TempDir()
	s := framework.StartServer(t, dataDir, testkit.FreeAddr(t))
	c := client.New("http://" + s.Addr())
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if _, err := c.CreateTopic(ctx, "orders", map[string]string{"shards": "1"}); err != nil {
		t.Fatal(err)
	}
	var published []string
	for i := range 200 {
		payload := fmt.Sprintf("event-%03d-%s", i, strings.Repeat("y", 100))
		if _, err := c.Publish(ctx, "orders", client.Event{Key: fmt.Sprintf("k%d", i%4), Payload: []byte(payload)}); err != nil {
			t.Fatal(err)
		}
		published = append(published, payload)
	}
	s.Signal(syscall.SIGTERM) // a clean stop writes the shard's own log
	<-s.Done()

	segs, _ := filepath.Glob(filepath.Join(dataDir, "shards", "*-orders", "log", "*.seg"))
	if len(segs) != 1 {
		t.Fatalf("shard log files %v, want one", segs)
	}
	data, err := os.ReadFile(segs[0])
	if err != nil {
		t.Fatal(err)
	}
	data[len(bytes.TrimRight(data, "\x00"))/2] ^= 0x40
	os.WriteFile(segs[0], data, 0o644)

	report, err := exec.Command(framework.Binary(), "repair", "--data-dir", dataDir).CombinedOutput()
	t.Logf("herald repair:\n%s", report)
	if err == nil || !strings.Contains(string(report), "Damaged: the log of shard orders (group 2)") {
		t.Fatalf("repair of a damaged shard log: %v", err)
	}
	atMost, unreadable := reportedLoss(t, string(report))
	if out, err := exec.Command(framework.Binary(), "repair", "--data-dir", dataDir, "--discard-damaged").CombinedOutput(); err != nil {
		t.Fatalf("repair --discard-damaged: %v\n%s", err, out)
	}

	s = framework.StartServer(t, dataDir, testkit.FreeAddr(t))
	c = client.New("http://" + s.Addr())
	var got []string
	for _, d := range drain(t, c, "orders") {
		got = append(got, string(d.Payload))
	}
	// One shard: everything before the damage, in the order published.
	slices.Sort(got)
	if len(got) == 0 || !slices.Equal(got, published[:len(got)]) {
		t.Fatalf("consumed %d events, not the first ones published", len(got))
	}
	lost := len(published) - len(got)
	t.Logf("the cut lost %d of %d events; the report said at most %d, and %d bytes unreadable", lost, len(published), atMost, unreadable)
	if lost == 0 || lost > atMost+unreadable/100 {
		t.Errorf("the cut lost %d events; the report said at most %d, and %d bytes unreadable", lost, atMost, unreadable)
	}
}
