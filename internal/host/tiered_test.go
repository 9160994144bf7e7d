package host

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"

	pb "go.etcd.io/raft/v3/raftpb"
)

// tieredQueue is a queue whose entries below a point, set by a "tier N"
// command, are held elsewhere: the host may delete them locally beyond
// the retention.
type tieredQueue struct {
	queueMachine
	below     uint64
	retention int64
}

func (m *tieredQueue) Apply(index uint64, cmd []byte) any {
	if n, ok := strings.CutPrefix(string(cmd), "tier "); ok {
		m.applied = index
		v, _ := strconv.ParseUint(n, 10, 64)
		m.below = v
		return len(m.pending)
	}
	return m.queueMachine.Apply(index, cmd)
}

func (m *tieredQueue) TieredBelow() uint64   { return m.below }
func (m *tieredQueue) LocalRetention() int64 { return m.retention }

// TestTieredLogKeepsItsRetention checks that the host deletes the
// segments of a tiered machine's log that are held elsewhere, keeping its
// local retention, and never those it still needs that are not.
func TestTieredLogKeepsItsRetention(t *testing.T) {
	archive := &mapArchive{entries: map[uint64]pb.Entry{}}
	h := newTestHost(t, t.TempDir(), func(c *Config) {
		c.SnapshotEntries = 20
		c.SegmentSize = 4096
		c.Archive = archive
	})
	const retention = 8192
	sm := &tieredQueue{retention: retention}
	if err := h.AddGroup(GroupConfig{ID: 1, Name: "q", Peers: []uint64{1}, StateMachine: sm}); err != nil {
		t.Fatal(err)
	}
	payload := strings.Repeat("x", 200)
	for range 400 {
		propose(t, h, 1, "pub "+payload)
	}
	log := h.groups[1].storage.Log()
	first := log.FirstIndex()
	if first > 2 {
		t.Fatalf("the log was compacted to %d while every event is pending and none tiered", first)
	}
	total := log.SizeBytes()

	// Tier half the log: the segments below that point go, the rest stay.
	// The reconciler copies what it tiers first (here, to a map).
	half := log.LastIndex() / 2
	b, err := h.LogBounds(1)
	if err != nil || b.ClosedThrough < half {
		t.Fatalf("LogBounds = %+v, %v; want segments closed through %d", b, err, half)
	}
	ents, err := h.Entries(1, first, half+1, 1<<30)
	if err != nil || len(ents) != int(half+1-first) {
		t.Fatalf("Entries(%d, %d) = %d entries, %v", first, half+1, len(ents), err)
	}
	archive.put(ents)
	propose(t, h, 1, "tier "+strconv.FormatUint(half, 10))
	eventually(t, "segments below the tiered point are deleted", func() bool { return log.FirstIndex() > first })
	if got := log.FirstIndex(); got > half {
		t.Fatalf("compacted to %d, above the tiered point %d", got, half)
	}
	if log.SizeBytes() >= total {
		t.Fatalf("log still holds %d bytes of %d", log.SizeBytes(), total)
	}
	// An entry below the local log is read from the archive, and one
	// the archive lacks is an error, not a guess.
	below := log.FirstIndex() - 1
	cmd, err := h.Entry(1, below)
	if err != nil || string(cmd) != "pub "+payload {
		t.Fatalf("Entry(%d) below the local log = %q, %v", below, cmd, err)
	}
	delete(archive.entries, below)
	if _, err := h.Entry(1, below); err == nil {
		t.Fatalf("Entry(%d), missing from the archive too, succeeded", below)
	}

	// Tier everything: the log shrinks to its retention, by whole segments.
	propose(t, h, 1, "tier "+strconv.FormatUint(log.LastIndex()+1, 10))
	eventually(t, "the log is down to its retention", func() bool { return log.SizeBytes() < retention+2*4096 })
	if log.SizeBytes() < retention {
		t.Fatalf("log holds %d bytes, less than its retention %d", log.SizeBytes(), retention)
	}
}

// mapArchive is an Archive in memory.
type mapArchive struct {
	mu      sync.Mutex
	entries map[uint64]pb.Entry
}

func (a *mapArchive) put(ents []pb.Entry) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, e := range ents {
		a.entries[e.Index] = e
	}
}

func (a *mapArchive) Entry(_ context.Context, group, index uint64) (pb.Entry, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if e, ok := a.entries[index]; ok && group == 1 {
		return e, nil
	}
	return pb.Entry{}, fmt.Errorf("entry %d of group %d is not archived", index, group)
}
