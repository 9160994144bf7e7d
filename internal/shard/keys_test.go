package shard

import (
	"bytes"
	"fmt"
	"runtime"
	"testing"
)

// The key hash is part of the snapshot format: these values, computed
// apart from the Go code from the definition (FNV-1a 64, then MurmurHash3's
// fmix64, then the upper 32 bits), must never change.
func TestKeyHashStable(t *testing.T) {
	for key, want := range map[string]uint32{
		"":           0xefd01f60,
		"k":          0x2ba437a9,
		"bucket:obj": 0x339fad89,
		"key-1023":   0x819d9381,
	} {
		if got := KeyHash(key); got != want {
			t.Errorf("KeyHash(%q) = %#x, want %#x", key, got, want)
		}
	}
}

// keyedEvents returns n events whose keys are key-<offset%keys>, counting from
// offset first.
func keyedEvents(first uint64, n, keys int) []Event {
	es := make([]Event, n)
	for i := range es {
		es[i] = Event{Key: fmt.Sprintf("key-%d", (first+uint64(i))%uint64(keys)), Payload: []byte("p")}
	}
	return es
}

// checkKeys checks that s records the key of each event it holds, as
// keyed made them, from offset from on, and none below.
func checkKeys(t *testing.T, s *State, from uint64, keys int) {
	t.Helper()
	for o := uint64(0); o < s.NextOffset()+2; o++ {
		h, ok := s.KeyHashOf(o)
		want := o >= from && o < s.NextOffset()
		if ok != want {
			t.Fatalf("KeyHashOf(%d) ok = %v, want %v (recorded from %d to %d)", o, ok, want, from, s.NextOffset())
		}
		if ok && h != KeyHash(fmt.Sprintf("key-%d", o%uint64(keys))) {
			t.Fatalf("KeyHashOf(%d) = %#x, not the hash of key-%d", o, h, o%uint64(keys))
		}
	}
}

// The key of each event is recorded as it is appended, kept while the
// shard holds the event, and restored from a snapshot, or rebuilt by
// replaying the log, alike. (The shard has a second subscription: a
// snapshot of a shard with the default one alone is written as version 3,
// which records no keys; see TestVersion3SnapshotRecordsNoKeys.)
func TestKeysRecordedRestoredAndReplayed(t *testing.T) {
	const keys = 7
	cmds := []Command{{Op: OpSubscribe, Subscription: 2}}
	for i := range 40 {
		first := uint64(i * 50)
		cmds = append(cmds, Command{Op: OpPublish, Time: 1e18 + int64(i), Events: keyedEvents(first, 50, keys)})
		if i%3 == 2 {
			// Acknowledge the oldest events, and a few out of order.
			var offs []uint64
			for o := first - 100; o < first-40; o++ {
				offs = append(offs, o)
			}
			offs = append(offs, first+10, first+30)
			cmds = append(cmds, Command{Op: OpAck, Offsets: offs}, Command{Op: OpAck, Subscription: 2, Offsets: offs})
		}
	}
	h := newHarness(t)
	var mid []byte
	var midIndex uint64
	for i, c := range cmds {
		h.ok(c)
		if i == len(cmds)/2 {
			mid, midIndex = snapshot(t, h.s), h.index
		}
	}
	start := h.s.Earliest()
	if start == 0 || start == h.s.NextOffset() {
		t.Fatalf("the history holds the events from %d to %d: want some dropped, some held", start, h.s.NextOffset())
	}
	checkKeys(t, h.s, start, keys)
	checkInvariants(t, h.s)
	if v := snapshot(t, h.s)[0]; v != snapshotVersion {
		t.Fatalf("version %d, want %d", v, snapshotVersion)
	}

	// Through a snapshot.
	restored := clone(t, h.s)
	checkKeys(t, restored, start, keys)
	checkInvariants(t, restored)

	// From the snapshot in the middle, replaying the rest.
	r := &harness{t: t, s: New()}
	if err := r.s.UnmarshalBinary(mid); err != nil {
		t.Fatal(err)
	}
	r.index = midIndex
	for _, c := range cmds[len(cmds)/2+1:] {
		r.ok(c)
	}
	checkKeys(t, r.s, start, keys)
	checkSame(t, r.s, h.s)

	// A capture keeps its keys while the state drops and adds others.
	capture := h.s.SnapshotFunc()
	want := snapshot(t, h.s)
	var all []uint64
	for o := range h.s.NextOffset() {
		all = append(all, o)
	}
	h.ok(Command{Op: OpAck, Offsets: all})
	h.ok(Command{Op: OpAck, Subscription: 2, Offsets: all})
	h.ok(Command{Op: OpPublish, Events: keyedEvents(h.s.NextOffset(), 600, keys)})
	if got, _ := capture(); !bytes.Equal(got, want) {
		t.Fatal("a capture changed as the state went on")
	}
	checkKeys(t, h.s, h.s.NextOffset()-600, keys)
	checkInvariants(t, h.s)
}

// A snapshot written before keys were recorded (version 6) loads with no
// key recorded for the events it holds; the events appended since have
// theirs, and once the old ones are gone the state records every key
// again.
func TestKeysAfterOldSnapshot(t *testing.T) {
	const keys = 5
	h := newHarness(t)
	h.ok(Command{Op: OpSubscribe, Subscription: 2}) // version 7 then, whatever the keys
	h.ok(Command{Op: OpPublish, Events: keyedEvents(0, 30, keys)})
	h.ok(Command{Op: OpAck, Offsets: []uint64{0, 1, 2}})
	v7 := snapshot(t, keyless(h.s))
	if v7[0] != snapshotVersion || v7[len(v7)-1] != 0 {
		t.Fatalf("a state without keys written as version %d, ending in %d", v7[0], v7[len(v7)-1])
	}
	v6 := append([]byte{snapshotVersionV6}, v7[1:len(v7)-1]...)
	r := &harness{t: t, s: New(), index: h.index}
	if err := r.s.UnmarshalBinary(v6); err != nil {
		t.Fatalf("version 6 snapshot: %v", err)
	}
	checkKeys(t, r.s, 30, keys)
	checkInvariants(t, r.s)
	if !bytes.Equal(snapshot(t, r.s), v7) {
		t.Fatal("version 6 snapshot re-marshals differently from version 7 with no keys")
	}

	r.ok(Command{Op: OpPublish, Events: keyedEvents(30, 20, keys)})
	checkKeys(t, r.s, 30, keys)
	checkSame(t, r.s, clone(t, r.s))
	checkKeys(t, clone(t, r.s), 30, keys)

	// The events of the old snapshot done for every subscription: the
	// log starts where the keys do, and goes on past.
	var offs []uint64
	for o := uint64(0); o < 40; o++ {
		offs = append(offs, o)
	}
	r.ok(Command{Op: OpAck, Offsets: offs})
	r.ok(Command{Op: OpAck, Subscription: 2, Offsets: offs})
	checkKeys(t, r.s, 40, keys)
	checkInvariants(t, r.s)
}

// A snapshot's key hashes that claim more events than the shard holds,
// or are cut short, are refused.
func TestKeysSnapshotRejects(t *testing.T) {
	h := newHarness(t)
	h.ok(Command{Op: OpSubscribe, Subscription: 2})
	h.ok(Command{Op: OpPublish, Events: keyedEvents(0, 3, 3)})
	good := snapshot(t, h.s)
	// The last thirteen bytes: the count, 3, and three hashes.
	if good[len(good)-13] != 3 {
		t.Fatalf("snapshot does not end in three key hashes: %x", good)
	}
	var s State
	bad := bytes.Clone(good)
	bad[len(bad)-13] = 4
	if err := s.UnmarshalBinary(append(bad, 1, 2, 3, 4)); err == nil {
		t.Error("four key hashes for three events accepted")
	}
	if err := s.UnmarshalBinary(good[:len(good)-1]); err == nil {
		t.Error("a truncated key hash accepted")
	}
	bad[len(bad)-13] = 2
	if err := s.UnmarshalBinary(bad); err == nil {
		t.Error("trailing bytes after key hashes accepted")
	}
}

// BenchmarkPendingMemory reports the heap a shard takes per pending
// event: a million of them, published 100 at a time, keys among 1,024.
// It runs once, whatever b.N.
func BenchmarkPendingMemory(b *testing.B) {
	const n, batch = 1 << 20, 100
	for b.Loop() {
	}
	events := make([]Event, batch)
	for i := range events {
		events[i] = Event{Key: fmt.Sprintf("key-%d", i*37%1024), Payload: make([]byte, 1024)}
	}
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	s := New()
	var index uint64
	for s.NextOffset() < n {
		index++
		if r := s.Apply(index, &Command{Op: OpPublish, Events: events}); r.Err != nil {
			b.Fatal(r.Err)
		}
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/float64(s.NextOffset()), "heap-B/pending-event")
	runtime.KeepAlive(s)
}

// A shard with the default subscription alone writes version 3, which the
// release before subscriptions reads, and so records no keys in it: once
// restored, it knows the keys of the events appended since, and the fetch
// index reads the others from the log.
func TestVersion3SnapshotRecordsNoKeys(t *testing.T) {
	h := newHarness(t)
	h.ok(Command{Op: OpPublish, Events: keyedEvents(0, 5, 3)})
	data := snapshot(t, h.s)
	if data[0] != snapshotVersionV3 {
		t.Fatalf("version %d, want %d", data[0], snapshotVersionV3)
	}
	r := &harness{t: t, s: New()}
	if err := r.s.UnmarshalBinary(data); err != nil {
		t.Fatal(err)
	}
	r.index = h.index
	r.ok(Command{Op: OpPublish, Events: keyedEvents(5, 4, 3)})
	checkKeys(t, r.s, 5, 3)
	checkInvariants(t, r.s)
}
