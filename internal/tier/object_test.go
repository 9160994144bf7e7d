package tier

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"go.etcd.io/raft/v3/raftpb"
)

// entries returns n consecutive entries from first, with data of random
// sizes (some empty) drawn from rng.
func entries(rng *rand.Rand, first uint64, n int) []raftpb.Entry {
	out := make([]raftpb.Entry, n)
	for i := range out {
		var data []byte
		if rng.IntN(5) > 0 {
			data = make([]byte, 1+rng.IntN(300))
			for j := range data {
				data[j] = byte(rng.Uint32())
			}
		}
		typ := raftpb.EntryNormal
		if rng.IntN(10) == 0 {
			typ = raftpb.EntryConfChangeV2
		}
		out[i] = raftpb.Entry{
			Index: first + uint64(i), Term: 3 + uint64(i)/7,
			Type: typ, Data: data,
		}
	}
	return out
}

func sameEntries(t *testing.T, what string, got, want []raftpb.Entry) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d entries, want %d", what, len(got), len(want))
	}
	for i := range got {
		g, w := got[i], want[i]
		if g.Index != w.Index || g.Term != w.Term || g.Type != w.Type || !bytes.Equal(g.Data, w.Data) {
			t.Fatalf("%s: entry %d is %v, want %v", what, i, got[i], want[i])
		}
	}
}

type builtObject struct {
	data    []byte
	runs    []Run
	entries [][]raftpb.Entry // by run
}

// buildObject packs runs of several shards, some shards twice.
func buildObject(t testing.TB, rng *rand.Rand, runs int) builtObject {
	t.Helper()
	b := NewBuilder()
	var o builtObject
	for i := range runs {
		ents := entries(rng, 1+uint64(rng.IntN(1000)), 1+rng.IntN(40))
		if err := b.Add(fmt.Sprintf("orders.%d", i%7), ents); err != nil {
			t.Fatal(err)
		}
		o.entries = append(o.entries, ents)
	}
	if b.Runs() != runs {
		t.Fatalf("Runs() = %d, want %d", b.Runs(), runs)
	}
	size := b.Len()
	o.data, o.runs = b.Finish()
	if int64(len(o.data)) <= size {
		t.Fatalf("Finish added no footer: %d bytes, Len was %d", len(o.data), size)
	}
	return o
}

func TestObjectRoundTrip(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	o := buildObject(t, rng, 50)
	footer, err := DecodeFooter("obj", o.data)
	if err != nil {
		t.Fatal(err)
	}
	if len(footer) != len(o.runs) {
		t.Fatalf("footer lists %d runs, Finish returned %d", len(footer), len(o.runs))
	}
	for i, r := range o.runs {
		if footer[i] != r {
			t.Fatalf("footer run %d is %v, Finish returned %v", i, footer[i], r)
		}
		want := o.entries[i]
		if r.First != want[0].Index || r.Last != want[len(want)-1].Index {
			t.Fatalf("run %d covers %d-%d, want %d-%d", i, r.First, r.Last, want[0].Index, want[len(want)-1].Index)
		}
		got, err := DecodeRun("obj", o.data[r.Offset:r.Offset+r.Length], r)
		if err != nil {
			t.Fatal(err)
		}
		sameEntries(t, r.String(), got, want)
	}
}

// Decoded entries own their data: changing the bytes they were decoded
// from, or appending to one entry's data, changes no other entry.
func TestDecodedEntriesOwnData(t *testing.T) {
	b := NewBuilder()
	want := []raftpb.Entry{
		{Index: 7, Term: 1, Type: raftpb.EntryNormal, Data: []byte("abc")},
		{Index: 8, Term: 1, Type: raftpb.EntryNormal, Data: []byte("def")},
	}
	if err := b.Add("s.1", want); err != nil {
		t.Fatal(err)
	}
	data, runs := b.Finish()
	run := data[runs[0].Offset : runs[0].Offset+runs[0].Length]
	got, err := DecodeRun("obj", run, runs[0])
	if err != nil {
		t.Fatal(err)
	}
	clear(run)
	_ = append(got[0].Data, "xyz"...)
	sameEntries(t, "after writes", got, want)
}

func TestBuilderRejects(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	gap := entries(rng, 10, 3)
	gap[2].Index = 20
	for _, tc := range []struct {
		name, shard string
		ents        []raftpb.Entry
	}{
		{"no entries", "s.1", nil},
		{"no shard", "", entries(rng, 1, 2)},
		{"long shard", strings.Repeat("x", 1<<16), entries(rng, 1, 2)},
		{"gap", "s.1", gap},
		{"backwards", "s.1", []raftpb.Entry{gap[1], gap[0]}},
	} {
		b := NewBuilder()
		before := b.Len()
		if err := b.Add(tc.shard, tc.ents); err == nil {
			t.Errorf("%s: Add accepted it", tc.name)
		}
		if b.Len() != before || b.Runs() != 0 {
			t.Errorf("%s: a rejected run changed the builder", tc.name)
		}
	}
	b := NewBuilder()
	b.Finish()
	if err := b.Add("s.1", entries(rng, 1, 1)); err == nil {
		t.Error("Add after Finish succeeded")
	}
}

func TestEmptyObject(t *testing.T) {
	data, runs := NewBuilder().Finish()
	got, err := DecodeFooter("empty", data)
	if err != nil || len(got) != 0 || len(runs) != 0 {
		t.Fatalf("empty object: runs %v, footer %v, %v", runs, got, err)
	}
}

// wantCorrupt checks that err is a *CorruptError naming object, with an
// offset in [lo, hi) and a message that says what to do.
func wantCorrupt(t *testing.T, what string, err error, object string, lo, hi int64) {
	t.Helper()
	var ce *CorruptError
	if !errors.As(err, &ce) {
		t.Fatalf("%s: error %v (%T), want a *CorruptError", what, err, err)
	}
	if ce.Object != object || ce.Offset < lo || ce.Offset >= hi {
		t.Fatalf("%s: %v: want object %s and an offset in [%d, %d)", what, err, object, lo, hi)
	}
	msg := err.Error()
	if !strings.Contains(msg, object) || !strings.Contains(msg, fmt.Sprint(ce.Offset)) || !strings.Contains(msg, "restore") {
		t.Fatalf("%s: message %q does not name the object, the offset and a remedy", what, msg)
	}
}

func TestRunBitFlips(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	o := buildObject(t, rng, 4)
	for _, r := range o.runs {
		for bit := range r.Length * 8 {
			run := bytes.Clone(o.data[r.Offset : r.Offset+r.Length])
			run[bit/8] ^= 1 << (bit % 8)
			_, err := DecodeRun("tier/obj-1", run, r)
			wantCorrupt(t, fmt.Sprintf("%v bit %d", r, bit), err, "tier/obj-1", r.Offset, r.Offset+r.Length)
		}
	}
}

func TestRunTruncated(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	o := buildObject(t, rng, 3)
	r := o.runs[1]
	run := o.data[r.Offset : r.Offset+r.Length]
	for _, n := range []int64{0, 1, r.Length / 2, r.Length - 1} {
		_, err := DecodeRun("obj", run[:n], r)
		wantCorrupt(t, fmt.Sprintf("%d of %d bytes", n, r.Length), err, "obj", r.Offset, r.Offset+r.Length)
	}
	long := append(bytes.Clone(run), 0)
	_, err := DecodeRun("obj", long, r)
	wantCorrupt(t, "one byte too many", err, "obj", r.Offset, r.Offset+r.Length)
}

// A reference whose checksum matches the bytes but whose shard or range
// does not is caught by the run's own header.
func TestWrongRunRef(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 10))
	o := buildObject(t, rng, 3)
	r := o.runs[0]
	run := o.data[r.Offset : r.Offset+r.Length]
	for name, mod := range map[string]func(*Run){
		"shard":  func(x *Run) { x.Shard = "payments.1" },
		"first":  func(x *Run) { x.First-- },
		"last":   func(x *Run) { x.Last++ },
		"crc":    func(x *Run) { x.CRC ^= 1 },
		"length": func(x *Run) { x.Length-- },
	} {
		ref := r
		mod(&ref)
		_, err := DecodeRun("obj", run, ref)
		wantCorrupt(t, name, err, "obj", r.Offset, r.Offset+r.Length)
		if name == "shard" && !strings.Contains(err.Error(), "manifest") {
			t.Errorf("wrong shard: %v does not point at the manifest", err)
		}
	}
	// Another run's bytes under this run's reference.
	other := o.runs[1]
	_, err := DecodeRun("obj", o.data[other.Offset:other.Offset+other.Length], r)
	wantCorrupt(t, "other run's bytes", err, "obj", r.Offset, r.Offset+r.Length)
}

func TestFooterDamage(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 12))
	o := buildObject(t, rng, 5)
	size := int64(len(o.data))
	footerStart := o.runs[len(o.runs)-1].Offset + o.runs[len(o.runs)-1].Length
	// Any flipped bit in the header, footer or trailer.
	for _, at := range []int64{0, 3, 4, footerStart, footerStart + 5, size - trailerSize, size - 10, size - 1} {
		for bit := range 8 {
			data := bytes.Clone(o.data)
			data[at] ^= 1 << bit
			_, err := DecodeFooter("obj", data)
			wantCorrupt(t, fmt.Sprintf("byte %d bit %d", at, bit), err, "obj", 0, size)
		}
	}
	for _, n := range []int64{0, 7, headerSize + trailerSize - 1, footerStart, size - 1} {
		_, err := DecodeFooter("obj", o.data[:n])
		wantCorrupt(t, fmt.Sprintf("truncated to %d", n), err, "obj", 0, size)
	}
}

func FuzzDecode(f *testing.F) {
	rng := rand.New(rand.NewPCG(13, 14))
	for _, n := range []int{0, 1, 3} {
		o := buildObject(f, rng, n)
		f.Add(o.data)
	}
	f.Add([]byte("HTIR"))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, data []byte) {
		runs, err := DecodeFooter("fuzz", data)
		if err != nil {
			var ce *CorruptError
			if !errors.As(err, &ce) {
				t.Fatalf("DecodeFooter: %v is not a *CorruptError", err)
			}
			return
		}
		for _, r := range runs {
			if r.Offset < headerSize || r.Offset+r.Length > int64(len(data)) {
				t.Fatalf("footer run %v lies outside the object of %d bytes", r, len(data))
			}
			ents, err := DecodeRun("fuzz", data[r.Offset:r.Offset+r.Length], r)
			if err != nil {
				var ce *CorruptError
				if !errors.As(err, &ce) {
					t.Fatalf("DecodeRun: %v is not a *CorruptError", err)
				}
				continue
			}
			if uint64(len(ents)) != r.Last-r.First+1 {
				t.Fatalf("run %v decoded to %d entries", r, len(ents))
			}
			// What decodes must build again into the same bytes.
			b := NewBuilder()
			if err := b.Add(r.Shard, ents); err != nil {
				t.Fatalf("decoded run %v does not build: %v", r, err)
			}
			again, _ := b.Finish()
			if !bytes.Equal(again[headerSize:headerSize+r.Length], data[r.Offset:r.Offset+r.Length]) {
				t.Fatalf("run %v does not build back into its bytes", r)
			}
		}
	})
}
