package consume

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"herald/internal/shard"
)

// newCachedShard is newShard whose fetches read through a cache of
// entries of up to maxBytes.
func newCachedShard(maxBytes int) (Shard, *fakeGroup, *EntryCache) {
	c := NewEntryCache(maxBytes)
	l := NewLeases(c)
	g := newFakeGroup(l)
	return Shard{Topic: "orders", Index: 0, Group: g, Leases: l}, g, c
}

// TestEntryCacheBound: the cache holds up to its bound, dropping the
// least recently used entries first, and never an entry larger than the
// whole bound.
func TestEntryCacheBound(t *testing.T) {
	cmd := func(payload int) shard.Command {
		return shard.Command{Op: shard.OpPublish, Events: []shard.Event{{Key: "k", Payload: make([]byte, payload)}}}
	}
	size := commandSize(cmd(1000))
	c := NewEntryCache(3*size + size/2) // room for 3
	l := NewLeases(c)
	key := func(i uint64) entryKey { return entryKey{l, i} }
	for i := range uint64(3) {
		c.put(key(i), cmd(1000), true)
	}
	if got := c.Bytes(); got != 3*size {
		t.Fatalf("3 entries: %d bytes, want %d", got, 3*size)
	}
	if _, ok := c.get(key(0)); !ok { // 0 is now the most recently used
		t.Fatal("entry 0 not cached")
	}
	c.put(key(3), cmd(1000), false) // no room without evicting
	if _, ok := c.get(key(3)); ok {
		t.Error("entry 3 cached by a put that may not evict, with no room")
	}
	c.put(key(3), cmd(1000), true) // drops 1, the least recently used
	if _, ok := c.get(key(1)); ok {
		t.Error("entry 1, the least recently used, is still cached past the bound")
	}
	for _, i := range []uint64{0, 2, 3} {
		if _, ok := c.get(key(i)); !ok {
			t.Errorf("entry %d not cached", i)
		}
	}
	if got := c.Bytes(); got > 3*size+size/2 {
		t.Fatalf("%d bytes cached, over the bound of %d", got, 3*size+size/2)
	}
	c.put(key(4), cmd(10*1000), true) // larger than the bound
	if _, ok := c.get(key(4)); ok {
		t.Error("an entry larger than the bound was cached")
	}
	if _, ok := c.get(key(3)); !ok {
		t.Error("caching nothing dropped entry 3")
	}

	// Another shard's entries are its own, and dropping one shard's
	// leaves the other's.
	other := NewLeases(c)
	if _, ok := c.get(entryKey{other, 3}); ok {
		t.Error("entry 3 of another shard found")
	}
	c.put(entryKey{other, 3}, cmd(10), true)
	c.drop(l)
	if _, ok := c.get(entryKey{other, 3}); !ok {
		t.Error("dropping a shard's entries dropped another's")
	}
	if got, want := c.Bytes(), commandSize(cmd(10)); got != want {
		t.Errorf("%d bytes cached after the drop, want %d (the other shard's entry)", got, want)
	}
}

// TestFetchesShareEntries: the fetches that hand out the events of one log
// entry, a run of a few keys each, read the entry from the log once.
func TestFetchesShareEntries(t *testing.T) {
	ctx := context.Background()
	s, g, _ := newCachedShard(1 << 20)
	var keys []string
	for i := range 40 {
		keys = append(keys, fmt.Sprint("k", i))
	}
	g.publish(t, keys...) // one entry of 40 keys
	got, fetches := 0, 0
	for ; got < 40; fetches++ {
		ls, err := s.Fetch(ctx, 4, time.Minute)
		if err != nil || len(ls) == 0 {
			t.Fatalf("fetch after %d events: %d, %v", got, len(ls), err)
		}
		for _, l := range ls {
			if want := "p-" + l.Event.Key; string(l.Event.Payload) != want {
				t.Fatalf("event %d: payload %q, want %q", l.Offset, l.Event.Payload, want)
			}
		}
		got += len(ls)
	}
	// The index's scan reads the entry, and caches it: there is room.
	if g.reads != 1 {
		t.Fatalf("%d fetches of the events of one entry read it %d times, want once (the index's scan)", fetches, g.reads)
	}
}

// TestEntryCacheAfterRestore: a restore drops the shard's entries, and the
// fetches after it hand out the right events, read again.
func TestEntryCacheAfterRestore(t *testing.T) {
	ctx := context.Background()
	s, g, c := newCachedShard(1 << 20)
	g.publish(t, "a", "b", "c", "d")
	g.publish(t, "a", "b", "c", "d")
	first, err := s.Fetch(ctx, 2, time.Minute)
	if err != nil || len(first) == 0 {
		t.Fatalf("fetch = %v, %v", first, err)
	}
	if c.Bytes() == 0 {
		t.Fatal("a fetch cached nothing")
	}
	g.ack(t, offsets(first)...)
	g.restore(t)
	if got := c.Bytes(); got != 0 {
		t.Fatalf("%d bytes of the shard's entries cached after a restore, want none", got)
	}
	var rest []string
	for {
		ls, err := s.Fetch(ctx, 100, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		if len(ls) == 0 {
			break
		}
		for _, l := range ls {
			rest = append(rest, fmt.Sprintf("%d:%s", l.Offset, l.Event.Payload))
		}
		g.ack(t, offsets(ls)...)
	}
	var want []string
	for o, k := range []string{"a", "b", "c", "d", "a", "b", "c", "d"} {
		if !slices.Contains(offsets(first), uint64(o)) {
			want = append(want, fmt.Sprintf("%d:p-%s", o, k))
		}
	}
	slices.Sort(rest)
	slices.Sort(want)
	if !slices.Equal(rest, want) {
		t.Fatalf("after the restore, fetched %v, want %v", rest, want)
	}
	if c.Bytes() == 0 {
		t.Fatal("the fetches after the restore cached nothing")
	}
}

// TestDropIdleDropsEntries: a shard its node stops leading leaves nothing
// in the cache.
func TestDropIdleDropsEntries(t *testing.T) {
	s, g, c := newCachedShard(1 << 20)
	g.publish(t, "a", "b")
	if _, err := s.Fetch(context.Background(), 10, time.Minute); err != nil {
		t.Fatal(err)
	}
	if c.Bytes() == 0 {
		t.Fatal("a fetch cached nothing")
	}
	s.Leases.DropIdle(time.Now())
	if got := c.Bytes(); got != 0 {
		t.Fatalf("%d bytes cached after the shard's leader stepped down, want none", got)
	}
}

// TestCachedOnApply: the entries of events a shard applies are cached on
// its leader alone, only while there is room, and dropped once the shard
// no longer needs them (its CompactIndex passed them).
func TestCachedOnApply(t *testing.T) {
	cmd := shard.Command{Op: shard.OpPublish, Events: []shard.Event{{Key: "k", Payload: make([]byte, 1000)}}}
	size := commandSize(cmd)
	c := NewEntryCache(3*size + size/2) // room for 3
	l := NewLeases(c)
	cached := func(i uint64) bool { _, ok := c.get(entryKey{l, i}); return ok }

	l.Cached(1, cmd, shard.Result{}, 1)
	if cached(1) {
		t.Fatal("a follower cached an entry it applied")
	}
	l.Lead(true)
	l.Cached(2, cmd, shard.Result{Err: shard.ErrUnknownOffset}, 1)
	l.Cached(3, shard.Command{Op: shard.OpAck, Offsets: []uint64{0}}, shard.Result{}, 1)
	if cached(2) || cached(3) {
		t.Fatal("a rejected command, or one without events, was cached")
	}
	for i := uint64(4); i <= 7; i++ {
		l.Cached(i, cmd, shard.Result{}, 4)
	}
	for i, want := range map[uint64]bool{4: true, 5: true, 6: true, 7: false} {
		if cached(i) != want {
			t.Errorf("entry %d cached: %v, want %v (room for 3, applies push nothing out)", i, cached(i), want)
		}
	}
	l.Cached(8, cmd, shard.Result{}, 6) // entries 4 and 5 are read by all
	for i, want := range map[uint64]bool{4: false, 5: false, 6: true, 8: true} {
		if cached(i) != want {
			t.Errorf("after the shard needs entries from 6 on, entry %d cached: %v, want %v", i, cached(i), want)
		}
	}
	l.Cached(9, cmd, shard.Result{}, 10) // applied, but needed by none
	if cached(9) {
		t.Error("an entry below the index the shard needs was cached")
	}
	if got := c.Bytes(); got != 0 {
		t.Errorf("%d bytes cached once the shard needs nothing below 10, want 0", got)
	}
}
