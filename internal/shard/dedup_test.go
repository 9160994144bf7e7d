package shard

import (
	"bytes"
	"errors"
	"fmt"
	"reflect"
	"testing"
)

const testWindow = 100

// dedupHistory publishes events with dedup ids at times 0 to 9, one
// without, and acknowledges some.
func dedupHistory(t *testing.T) *harness {
	h := newHarness(t)
	for i := range 10 {
		h.ok(Command{Op: OpPublish, Time: int64(i), DedupWindow: testWindow,
			DedupIDs: []string{fmt.Sprintf("id-%d", i), ""}, Events: events(3, 4)})
	}
	h.ok(Command{Op: OpAck, Offsets: []uint64{0, 1, 2}})
	return h
}

func publishDedup(time int64, ids ...string) Command {
	sizes := make([]int, len(ids))
	for i := range sizes {
		sizes[i] = 5
	}
	return Command{Op: OpPublish, Time: time, DedupWindow: testWindow, DedupIDs: ids, Events: events(sizes...)}
}

func TestDedupRepeatReturnsOriginalOffsets(t *testing.T) {
	h := newHarness(t)
	first := h.ok(publishDedup(10, "a", "b"))
	if first.FirstOffset != 0 || first.Count != 2 || first.Duplicates != nil {
		t.Fatalf("first publish: %+v", first)
	}
	h.ok(publishDedup(11, "c"))
	before := snapshot(t, h.s)

	// A retry within the window appends nothing and names the offsets.
	r := h.ok(publishDedup(10+testWindow, "a", "b"))
	want := []Duplicate{{Slot: 0, Offset: 0}, {Slot: 1, Offset: 1}}
	if r.Count != 0 || !reflect.DeepEqual(r.Duplicates, want) {
		t.Fatalf("retry: %+v, want duplicates %v", r, want)
	}
	if h.s.NextOffset() != 3 {
		t.Fatalf("retry appended: next offset %d, want 3", h.s.NextOffset())
	}
	// Only Applied changed: the table is the same.
	if after := snapshot(t, h.s); len(after) != len(before) || !bytes.Equal(after[2:], before[2:]) {
		t.Fatalf("retry changed the state beyond Applied")
	}

	// Past the window the id is new again.
	r = h.ok(publishDedup(11+testWindow, "a"))
	if r.Count != 1 || r.FirstOffset != 3 || r.Duplicates != nil {
		t.Fatalf("publish after the window: %+v, want a new event at offset 3", r)
	}
}

func TestDedupPartialRepeatIsRejectedNamingTheDuplicates(t *testing.T) {
	h := newHarness(t)
	h.ok(publishDedup(1, "a"))
	before := snapshot(t, h.s)
	r := h.s.Apply(h.index+1, ptr(publishDedup(2, "x", "a", "")))
	h.index++
	if !errors.Is(r.Err, ErrPartialDuplicate) {
		t.Fatalf("got %v, want ErrPartialDuplicate", r.Err)
	}
	if want := []Duplicate{{Slot: 1, Offset: 0}}; !reflect.DeepEqual(r.Duplicates, want) {
		t.Fatalf("duplicates %v, want %v", r.Duplicates, want)
	}
	if h.s.NextOffset() != 1 || h.s.DedupIDs() != 1 {
		t.Fatalf("rejected publish changed the queue: next offset %d, %d ids", h.s.NextOffset(), h.s.DedupIDs())
	}
	// The snapshot differs only in the applied index.
	after := snapshot(t, h.s)
	if len(after) != len(before) || !bytes.Equal(after[2:], before[2:]) {
		t.Fatalf("rejected publish changed the snapshot:\n%x\n%x", before, after)
	}
}

func ptr[T any](v T) *T { return &v }

func TestDedupRejectsBadIDs(t *testing.T) {
	long := string(bytes.Repeat([]byte{'x'}, MaxDedupIDBytes+1))
	tests := []struct {
		name string
		cmd  Command
	}{
		{"count mismatch", Command{Op: OpPublish, Time: 1, DedupWindow: testWindow, DedupIDs: []string{"a"}, Events: events(1, 1)}},
		{"repeated in one command", publishDedup(1, "a", "a")},
		{"too long", publishDedup(1, long)},
		{"negative window", Command{Op: OpPublish, Time: 1, DedupWindow: -1, DedupIDs: []string{"a"}, Events: events(1)}},
	}
	for _, tt := range tests {
		h := newHarness(t)
		h.ok(publishDedup(0, "z"))
		before := snapshot(t, h.s)
		r := h.s.Apply(h.index+1, &tt.cmd)
		if !errors.Is(r.Err, ErrInvalidCommand) {
			t.Errorf("%s: got %v, want ErrInvalidCommand", tt.name, r.Err)
		}
		if after := snapshot(t, h.s); len(after) != len(before) || !bytes.Equal(after[2:], before[2:]) {
			t.Errorf("%s: rejected command changed the state", tt.name)
		}
	}
}

func TestDedupWindowZeroIgnoresIDs(t *testing.T) {
	h := newHarness(t)
	c := publishDedup(1, "a")
	c.DedupWindow = 0
	h.ok(c)
	if r := h.ok(c); r.Count != 1 || r.FirstOffset != 1 {
		t.Fatalf("second publish without a window: %+v, want a new event", r)
	}
	if h.s.DedupIDs() != 0 {
		t.Fatalf("%d ids remembered without a window", h.s.DedupIDs())
	}
}

func TestDedupTableIsBoundedByCountAndWindow(t *testing.T) {
	h := newHarness(t)
	const batch = 1000
	n := 0
	for i := 0; n < MaxDedupEntries+batch; i++ {
		ids := make([]string, batch)
		for j := range ids {
			ids[j] = fmt.Sprintf("id-%d", n)
			n++
		}
		h.ok(Command{Op: OpPublish, Time: 1, DedupWindow: testWindow, DedupIDs: ids, Events: make([]Event, batch)})
	}
	if got := h.s.DedupIDs(); got != MaxDedupEntries {
		t.Fatalf("%d ids remembered, want the bound %d", got, MaxDedupEntries)
	}
	// The oldest were forgotten, the newest are remembered.
	if r := h.ok(publishDedup(2, "id-0")); r.Count != 1 {
		t.Fatalf("oldest id still matched: %+v", r)
	}
	if r := h.ok(publishDedup(2, fmt.Sprintf("id-%d", n-1))); r.Count != 0 || len(r.Duplicates) != 1 {
		t.Fatalf("newest id did not match: %+v", r)
	}
	// A publish past the window, with or without ids, prunes them all.
	h.ok(Command{Op: OpPublish, Time: 2 + testWindow + 1, DedupWindow: testWindow, Events: events(1)})
	if got := h.s.DedupIDs(); got != 0 {
		t.Fatalf("%d ids remembered past the window, want 0", got)
	}
}

// TestDedupSurvivesSnapshotAndReplay checks that a restored replica, and
// a replica that applied the same commands, agree on what is a duplicate.
func TestDedupSurvivesSnapshotAndReplay(t *testing.T) {
	h := dedupHistory(t)
	data := snapshot(t, h.s)
	var restored State
	if err := restored.UnmarshalBinary(data); err != nil {
		t.Fatal(err)
	}
	if got := snapshot(t, &restored); !bytes.Equal(got, data) {
		t.Fatalf("restored state re-marshals differently")
	}
	replica := dedupHistory(t)
	frozen := h.s.SnapshotFunc()
	for _, s := range []*State{h.s, &restored, replica.s} {
		r := s.Apply(h.index+1, ptr(publishDedup(3+testWindow, "id-9", "id-3")))
		want := []Duplicate{{Slot: 0, Offset: 18}, {Slot: 1, Offset: 6}}
		if r.Err != nil || !reflect.DeepEqual(r.Duplicates, want) {
			t.Fatalf("retry after restore: %+v, want duplicates %v", r, want)
		}
	}
	h.index++
	// A capture taken before further publishes keeps its bytes.
	h.ok(publishDedup(20, "later"))
	if got, _ := frozen(); !bytes.Equal(got, data) {
		t.Fatalf("snapshot captured before a publish changed")
	}
	// A version-2 snapshot (no table) reads as an empty table. The
	// history, without its keys, holds nothing of version 4's, so is
	// written as version 3, which appended one byte: the table's count.
	v2 := append([]byte{snapshotVersionV2}, snapshot(t, keyless(history(t).s))[1:]...)
	v2 = v2[:len(v2)-1]
	var old State
	if err := old.UnmarshalBinary(v2); err != nil {
		t.Fatalf("version 2 snapshot: %v", err)
	}
	if old.DedupIDs() != 0 || old.NextOffset() != history(t).s.NextOffset() {
		t.Fatalf("version 2 snapshot read wrongly: %d ids, next offset %d", old.DedupIDs(), old.NextOffset())
	}
}

func TestDedupSnapshotRejects(t *testing.T) {
	good := snapshot(t, dedupHistory(t).s)
	var s State
	for n := range len(good) {
		if err := s.UnmarshalBinary(good[:n]); !errors.Is(err, ErrInvalidSnapshot) {
			t.Fatalf("truncated to %d bytes: %v", n, err)
		}
	}
	// The table's first entry is id-0 at offset 0; find it and make it
	// empty, then point it beyond the next offset.
	i := bytes.Index(good, []byte("\x04id-0"))
	if i < 0 {
		t.Fatal("no id-0 in the snapshot")
	}
	empty := append(append(append([]byte(nil), good[:i]...), 0), good[i+5:]...)
	if err := s.UnmarshalBinary(empty); !errors.Is(err, ErrInvalidSnapshot) {
		t.Errorf("empty dedup id: %v", err)
	}
	beyond := append([]byte(nil), good...)
	beyond[i+5] = 100 // offset gap past next offset 20
	if err := s.UnmarshalBinary(beyond); !errors.Is(err, ErrInvalidSnapshot) {
		t.Errorf("dedup offset beyond next offset: %v", err)
	}
}

func TestDedupCommandRoundTrip(t *testing.T) {
	c := publishDedup(7, "a", "", "c")
	d, err := UnmarshalCommand(c.AppendBinary(nil))
	if err != nil || !reflect.DeepEqual(d.DedupIDs, c.DedupIDs) || d.DedupWindow != testWindow {
		t.Fatalf("round trip: %+v, %v", d, err)
	}
	// Empty ids are not encoded at all.
	c.DedupIDs = []string{"", "", ""}
	if d, err := UnmarshalCommand(c.AppendBinary(nil)); err != nil || d.DedupIDs != nil {
		t.Fatalf("empty ids: %+v, %v", d, err)
	}
	// The events still come last, where EventAt finds them.
	e, err := EventAt(ptr(publishDedup(1, "k")).AppendBinary(nil), 0)
	if err != nil || len(e.Payload) != 5 {
		t.Fatalf("EventAt past the dedup ids: %+v, %v", e, err)
	}
}

// BenchmarkApplyPublishDedup is BenchmarkApplyPublish with a dedup id on
// every event, the table full (MaxDedupEntries ids, each new one
// forgetting the oldest), and, in Repeat, every publish a retry that
// appends nothing.
func BenchmarkApplyPublishDedup(b *testing.B) {
	for _, n := range []int{1, 16} {
		b.Run(fmt.Sprintf("New/%dx1KiB", n), func(b *testing.B) {
			c := Command{Op: OpPublish, Time: 1.7e18, MaxQueueBytes: 1 << 40, Events: kibEvents(n),
				DedupWindow: 120e9, DedupIDs: make([]string, n)}
			s := New()
			var index, seq uint64
			setIDs := func() {
				for i := range c.DedupIDs {
					seq++
					c.DedupIDs[i] = fmt.Sprintf("%032x", seq)
				}
			}
			for s.DedupIDs() < MaxDedupEntries {
				setIDs()
				index++
				s.Apply(index, &c)
			}
			b.SetBytes(int64(n) * 1024)
			b.ReportAllocs()
			for b.Loop() {
				b.StopTimer()
				setIDs()
				b.StartTimer()
				index++
				if r := s.Apply(index, &c); r.Err != nil || r.Count != n {
					b.Fatal(r)
				}
			}
		})
		b.Run(fmt.Sprintf("Repeat/%dx1KiB", n), func(b *testing.B) {
			c := Command{Op: OpPublish, Time: 1.7e18, MaxQueueBytes: 1 << 40, Events: kibEvents(n),
				DedupWindow: 120e9, DedupIDs: make([]string, n)}
			for i := range c.DedupIDs {
				c.DedupIDs[i] = fmt.Sprintf("%032x", i)
			}
			s := New()
			s.Apply(1, &c)
			index := uint64(1)
			b.ReportAllocs()
			for b.Loop() {
				index++
				if r := s.Apply(index, &c); r.Err != nil || len(r.Duplicates) != n {
					b.Fatal(r)
				}
			}
		})
	}
}
