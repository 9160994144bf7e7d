package shard

import (
	"bytes"
	"errors"
	"reflect"
	"testing"
)

// tieredHistory is history with its log tiered up to an entry in the
// middle, and nothing else beyond version 3.
func tieredHistory(t *testing.T) *harness {
	h := history(t)
	h.ok(Command{Op: OpTierAdvance, From: h.index - 3})
	return h
}

func TestTierAdvance(t *testing.T) {
	h := newHarness(t)
	h.ok(Command{Op: OpPublish, Time: 1, Events: events(1, 2)})
	h.ok(Command{Op: OpPublish, Time: 2, Events: events(3)})
	if got := h.s.LRO(); got != 0 {
		t.Fatalf("LRO of a new shard = %d, want 0", got)
	}
	// Each step applies at the next log index; h.index is 2 before the
	// first.
	tests := []struct {
		name string
		from uint64
		err  error
		lro  uint64
	}{
		{"zero: nothing tiered", 0, nil, 0},
		{"advance", 2, nil, 2},
		{"idempotent repeat", 2, nil, 2},
		{"lower ignored", 1, nil, 2},
		{"up to its own entry", 7, nil, 7},
		{"beyond its own entry refused", 9, ErrInvalidCommand, 7},
		{"far beyond refused", 1 << 40, ErrInvalidCommand, 7},
		{"advance after a refusal", 8, nil, 8},
	}
	for _, tt := range tests {
		before := snapshot(t, h.s)
		r := h.apply(Command{Op: OpTierAdvance, From: tt.from})
		if !errors.Is(r.Err, tt.err) {
			t.Fatalf("%s: advance to %d at index %d: error %v, want %v", tt.name, tt.from, h.index, r.Err, tt.err)
		}
		if r.Err == nil && !reflect.DeepEqual(r, Result{}) {
			t.Fatalf("%s: result %+v, want none", tt.name, r)
		}
		if got := h.s.LRO(); got != tt.lro {
			t.Fatalf("%s: LRO = %d, want %d", tt.name, got, tt.lro)
		}
		if h.s.Applied() != h.index {
			t.Fatalf("%s: applied %d, want %d", tt.name, h.s.Applied(), h.index)
		}
		if tt.err != nil {
			// Only Applied moves: the rest of the snapshot is as before.
			after := snapshot(t, h.s)
			var was State
			if err := was.UnmarshalBinary(before); err != nil {
				t.Fatal(err)
			}
			was.applied = h.index
			if !bytes.Equal(snapshot(t, &was), after) {
				t.Fatalf("%s: rejected advance changed the state", tt.name)
			}
		}
	}
	// The LRO changes neither the queue nor what it needs of the log.
	if st := h.stats(); st.Events != 3 || st.Head != 0 {
		t.Fatalf("after advances: %+v", st)
	}
	if got := h.s.CompactIndex(); got != 1 {
		t.Fatalf("CompactIndex = %d, want 1: tiering does not compact", got)
	}
}

// The node applies encoded entries through Machine, and reads the LRO
// there.
func TestMachineTierAdvance(t *testing.T) {
	m := NewMachine()
	c := Command{Op: OpTierAdvance, From: 1}
	if r := m.Apply(1, c.AppendBinary(nil)).(Result); r.Err != nil {
		t.Fatal(r.Err)
	}
	c.From = 3
	if r := m.Apply(2, c.AppendBinary(nil)).(Result); !errors.Is(r.Err, ErrInvalidCommand) {
		t.Fatalf("advance beyond its own entry: %v, want ErrInvalidCommand", r.Err)
	}
	if got := m.LRO(); got != 1 {
		t.Fatalf("Machine.LRO = %d, want 1", got)
	}
	data, err := m.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	r := NewMachine()
	if err := r.Restore(data); err != nil {
		t.Fatal(err)
	}
	if r.LRO() != 1 {
		t.Fatalf("restored Machine.LRO = %d, want 1", r.LRO())
	}
}

func TestTierSnapshot(t *testing.T) {
	version := func(s *State) byte { return snapshot(t, s)[0] }

	// Nothing tiered and nothing else beyond version 3 (no key hashes
	// either): version 3.
	h := history(t)
	keyless(h.s)
	if v := version(h.s); v != snapshotVersionV3 {
		t.Fatalf("untiered history: version %d, want %d", v, snapshotVersionV3)
	}
	h.ok(Command{Op: OpTierAdvance}) // to 0: still nothing tiered
	if v := version(h.s); v != snapshotVersionV3 {
		t.Fatalf("after an advance to 0: version %d, want %d", v, snapshotVersionV3)
	}

	// Tiered: version 6 or later, and the LRO round-trips, through MarshalBinary
	// and through a capture taken before further advances.
	h = tieredHistory(t)
	lro := h.s.LRO()
	if lro == 0 {
		t.Fatal("tiered history has nothing tiered")
	}
	data := snapshot(t, h.s)
	if data[0] != snapshotVersion {
		t.Fatalf("tiered history: version %d, want %d", data[0], snapshotVersion)
	}
	capture := h.s.SnapshotFunc()
	h.ok(Command{Op: OpTierAdvance, From: h.index})
	if got, _ := capture(); !bytes.Equal(got, data) {
		t.Fatal("a capture changed with a later advance")
	}
	restored := clone(t, h.s)
	if restored.LRO() != h.s.LRO() || !bytes.Equal(snapshot(t, restored), snapshot(t, h.s)) {
		t.Fatalf("restored LRO %d, want %d", restored.LRO(), h.s.LRO())
	}
	var s State
	if err := s.UnmarshalBinary(data); err != nil {
		t.Fatal(err)
	}
	if s.LRO() != lro {
		t.Fatalf("LRO read back as %d, want %d", s.LRO(), lro)
	}

	// Tiering on top of something else version 4 or 5 added. Without
	// key hashes, the snapshots end in the LRO and a zero count of them.
	r := retentionHistory(t)
	keyless(r.s)
	untiered := snapshot(t, r.s)
	r.ok(Command{Op: OpTierAdvance, From: 2})
	tiered := snapshot(t, r.s)
	if untiered[0] != snapshotVersion || tiered[0] != snapshotVersion {
		t.Fatalf("retention history: versions %d and %d, want %d", untiered[0], tiered[0], snapshotVersion)
	}

	// A version 5 snapshot (version 7 less the LRO's byte and the key
	// hashes' count) still loads, with nothing tiered, and is written back
	// as version 7.
	v5 := append([]byte{snapshotVersionV5}, untiered[1:len(untiered)-2]...)
	var old State
	if err := old.UnmarshalBinary(v5); err != nil {
		t.Fatalf("version 5 snapshot: %v", err)
	}
	if old.LRO() != 0 || !old.Retaining() {
		t.Fatalf("version 5 snapshot read as LRO %d, retaining %v", old.LRO(), old.Retaining())
	}
	if !bytes.Equal(snapshot(t, &old), untiered) {
		t.Fatal("version 5 snapshot re-marshals differently from version 7")
	}
	checkInvariants(t, &old)

	// An LRO beyond the applied index cannot have been advanced to.
	bad := append(appendUvarint(append([]byte(nil), tiered[:len(tiered)-2]...), r.s.Applied()+1), 0)
	if err := s.UnmarshalBinary(bad); !errors.Is(err, ErrInvalidSnapshot) {
		t.Fatalf("LRO beyond applied: %v, want ErrInvalidSnapshot", err)
	}
	// A truncated LRO is refused too.
	if err := s.UnmarshalBinary(tiered[:len(tiered)-2]); !errors.Is(err, ErrInvalidSnapshot) {
		t.Fatalf("snapshot without its LRO: %v, want ErrInvalidSnapshot", err)
	}
}
