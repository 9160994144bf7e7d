package controller

import (
	"bytes"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"herald/internal/topic"
)

func record(object string, runs ...TierRun) Command {
	return Command{Op: OpRecordTierObject, Object: object, Runs: runs}
}

func forget(object string) Command { return Command{Op: OpForgetTierObject, Object: object} }

// run is a run of shard of topic orders, created first (group 2 + shard),
// at bytes [first*10, last*10+10) of its object.
func run(shard int, first, last uint64) TierRun {
	return TierRun{Shard: topic.ShardName("orders", shard), Group: 2 + uint64(shard), First: first, Last: last,
		Offset: int64(first) * 10, Length: int64(last-first+1) * 10, CRC: uint32(first)}
}

// tierState is a state with topic orders of four shards (groups 2-5).
func tierState(t *testing.T) *State {
	s := New()
	mustApply(t, s, create("orders", attrs(t, map[string]string{"shards": "4"}), 1))
	return s
}

func TestRecordAndForgetTierObject(t *testing.T) {
	s := tierState(t)
	mustApply(t, s, record("obj-1", run(1, 1, 10), run(0, 1, 5), run(1, 20, 30)))
	mustApply(t, s, record("obj-2", run(1, 11, 19), run(2, 1, 3)))

	// Runs are kept sorted, whatever order the record gave them in.
	o, ok := s.TierObject("obj-1")
	if want := []TierRun{run(0, 1, 5), run(1, 1, 10), run(1, 20, 30)}; !ok || !reflect.DeepEqual(o.Runs, want) {
		t.Fatalf("TierObject(obj-1) = %+v, %v; want runs %+v", o, ok, want)
	}
	if objs := s.TierObjects(); len(objs) != 2 || objs[0].Name != "obj-1" || objs[1].Name != "obj-2" {
		t.Fatalf("TierObjects = %+v", objs)
	}
	if got := s.TieredThrough("orders.1"); got != 30 {
		t.Errorf("TieredThrough(orders.1) = %d, want 30", got)
	}

	// Recording the same object again, in any order, is a no-op; with
	// other runs it is refused.
	before := mustSnapshot(t, s)
	mustApply(t, s, record("obj-2", run(2, 1, 3), run(1, 11, 19)))
	assertUnchangedButApplied(t, s, before)
	before = mustSnapshot(t, s)
	r := apply(t, s, record("obj-2", run(1, 11, 19)))
	wantErr(t, r.Err, ErrTierObjectConflict, `"obj-2"`, "other runs")
	assertUnchangedButApplied(t, s, before)

	// Forgetting drops its runs; forgetting it again is a no-op.
	mustApply(t, s, forget("obj-1"))
	if _, ok := s.TierObject("obj-1"); ok {
		t.Error("obj-1 still recorded")
	}
	if _, _, ok := s.TierRunAt("orders.1", 5); ok {
		t.Error("a forgotten object's run is still found")
	}
	if got := s.TieredThrough("orders.1"); got != 19 {
		t.Errorf("TieredThrough(orders.1) after forgetting = %d, want 19", got)
	}
	if got := s.TieredThrough("orders"); got != 0 {
		t.Errorf("TieredThrough(orders) after forgetting its only run = %d, want 0", got)
	}
	before = mustSnapshot(t, s)
	mustApply(t, s, forget("obj-1"))
	mustApply(t, s, forget("never-recorded"))
	before2 := mustSnapshot(t, s)
	if strings.Replace(string(before2), fmt.Sprintf(`"applied":%d`, s.Applied()), fmt.Sprintf(`"applied":%d`, s.Applied()-2), 1) != string(before) {
		t.Errorf("repeated forgets changed the state:\n%s\n%s", before, before2)
	}
	// A forgotten name may be recorded again.
	mustApply(t, s, record("obj-1", run(3, 1, 2)))
	if _, run, ok := s.TierRunAt("orders.3", 2); !ok || run.Last != 2 {
		t.Errorf("re-recorded obj-1 not found: %+v, %v", run, ok)
	}
}

func TestTierRunLookups(t *testing.T) {
	s := tierState(t)
	mustApply(t, s, record("a", run(1, 1, 10), run(2, 5, 5)))
	mustApply(t, s, record("b", run(1, 21, 30))) // 11-20 is a gap
	mustApply(t, s, record("c", run(1, 31, 31)))
	tests := []struct {
		shard  string
		index  uint64
		object string // "" for none
	}{
		{"orders.1", 0, ""},
		{"orders.1", 1, "a"},
		{"orders.1", 10, "a"},
		{"orders.1", 11, ""},
		{"orders.1", 20, ""},
		{"orders.1", 21, "b"},
		{"orders.1", 30, "b"},
		{"orders.1", 31, "c"},
		{"orders.1", 32, ""},
		{"orders.2", 4, ""},
		{"orders.2", 5, "a"},
		{"orders.2", 6, ""},
		{"orders", 1, ""},    // nothing tiered
		{"orders.4", 1, ""},  // no such shard
		{"nope.1", 1, ""},    // no such topic
		{"orders.01", 1, ""}, // not a shard name
		{"", 1, ""},
	}
	for _, tt := range tests {
		object, run, ok := s.TierRunAt(tt.shard, tt.index)
		if object != tt.object || ok != (tt.object != "") || ok && !run.Covers(tt.index) {
			t.Errorf("TierRunAt(%q, %d) = %q, %+v, %v; want object %q", tt.shard, tt.index, object, run, ok, tt.object)
		}
	}
	refs := s.TierRuns("orders.1")
	var got []string
	for _, ref := range refs {
		got = append(got, fmt.Sprintf("%s:%d-%d", ref.Object, ref.Run.First, ref.Run.Last))
	}
	if want := []string{"a:1-10", "b:21-30", "c:31-31"}; !reflect.DeepEqual(got, want) {
		t.Errorf("TierRuns(orders.1) = %v, want %v", got, want)
	}
	if refs[0].Recorded != 2 || refs[1].Recorded != 3 {
		t.Errorf("recorded at %d and %d, want 2 and 3", refs[0].Recorded, refs[1].Recorded)
	}
	if s.TierRuns("orders") != nil || s.TierRuns("nope") != nil {
		t.Error("runs for a shard without any")
	}
}

// A reconciler that crashed after recording an object uploads the entries
// again, under a new name, perhaps in other ranges: a lookup finds the
// newest record covering the index.
func TestOverlappingRecords(t *testing.T) {
	s := tierState(t)
	mustApply(t, s, record("old", run(1, 1, 100)))
	mustApply(t, s, record("new", run(1, 50, 60), run(2, 1, 1)))
	mustApply(t, s, record("newer", run(1, 55, 56)))
	for index, want := range map[uint64]string{1: "old", 49: "old", 50: "new", 54: "new", 55: "newer", 56: "newer", 57: "new", 60: "new", 61: "old", 100: "old"} {
		if object, _, ok := s.TierRunAt("orders.1", index); !ok || object != want {
			t.Errorf("TierRunAt(orders.1, %d) = %q, %v; want %q", index, object, ok, want)
		}
	}
	mustApply(t, s, forget("new"))
	for index, want := range map[uint64]string{50: "old", 55: "newer", 57: "old"} {
		if object, _, ok := s.TierRunAt("orders.1", index); !ok || object != want {
			t.Errorf("after forgetting new: TierRunAt(orders.1, %d) = %q, %v; want %q", index, object, ok, want)
		}
	}
	mustApply(t, s, forget("old"))
	if _, _, ok := s.TierRunAt("orders.1", 50); ok {
		t.Error("TierRunAt(orders.1, 50) found a forgotten run")
	}
	if got := s.TieredThrough("orders.1"); got != 56 {
		t.Errorf("TieredThrough = %d, want 56", got)
	}
}

// The runs of a deleted topic's shards stay recorded until their objects
// are forgotten, and are never taken for the shards of a topic created
// again under the same name, which get new groups.
func TestTierRunsOfDeletedTopic(t *testing.T) {
	s := tierState(t)
	mustApply(t, s, record("a", run(1, 1, 10)))
	mustApply(t, s, del("orders"))
	if _, _, ok := s.TierRunAt("orders.1", 5); ok {
		t.Error("a deleted topic's run found by shard name")
	}
	if s.TieredThrough("orders.1") != 0 || s.TierRuns("orders.1") != nil {
		t.Error("a deleted topic's runs listed by shard name")
	}
	if ref, ok := s.TierRunAtGroup(3, 5); !ok || ref.Object != "a" || s.TieredThroughGroup(3) != 10 || len(s.TierRunsOfGroup(3)) != 1 {
		t.Errorf("by group: %+v, %v", ref, ok)
	}
	// A run of the deleted topic may still be recorded (its reconciler
	// uploaded it before the delete): the sweeper will find it.
	mustApply(t, s, record("late", run(2, 1, 5)))
	mustApply(t, s, create("orders", attrs(t, map[string]string{"shards": "4"}), 2))
	if _, _, ok := s.TierRunAt("orders.1", 5); ok {
		t.Error("the new orders.1 finds the old one's run")
	}
	newRun := TierRun{Shard: "orders.1", Group: 7, First: 1, Last: 3, Length: 1}
	mustApply(t, s, record("b", newRun))
	if object, _, ok := s.TierRunAt("orders.1", 2); !ok || object != "b" {
		t.Errorf("the new orders.1's run: %q, %v", object, ok)
	}
	if got := s.TieredThrough("orders.1"); got != 3 {
		t.Errorf("TieredThrough(orders.1) = %d, want 3", got)
	}
	mustApply(t, s, forget("a"))
	mustApply(t, s, forget("late"))
	if len(s.TierObjects()) != 1 {
		t.Errorf("TierObjects = %+v", s.TierObjects())
	}
}

func TestRecordTierObjectErrors(t *testing.T) {
	s := tierState(t)
	mustApply(t, s, record("a", run(1, 1, 10)))
	good := run(1, 11, 20)
	with := func(f func(r *TierRun)) TierRun {
		r := good
		f(&r)
		return r
	}
	for _, tt := range []struct {
		name string
		c    Command
		want string
	}{
		{"no name", record("", good), "names no object"},
		{"long name", record(strings.Repeat("x", MaxTierObjectName+1), good), "at most 1024 bytes"},
		{"no runs", record("b"), "has no runs"},
		{"first after last", record("b", with(func(r *TierRun) { r.First = 21 })), "first at most last"},
		{"index 0", record("b", with(func(r *TierRun) { r.First = 0 })), "from 1 up"},
		{"negative offset", record("b", with(func(r *TierRun) { r.Offset = -1 })), "offset >= 0"},
		{"zero length", record("b", with(func(r *TierRun) { r.Length = 0 })), "length > 0"},
		{"bytes overflow", record("b", with(func(r *TierRun) { r.Offset = 1 << 62; r.Length = 1 << 62 })), "not a range"},
		{"controller group", record("b", with(func(r *TierRun) { r.Group = ControllerGroup })), "no shard has had group 1"},
		{"unallocated group", record("b", with(func(r *TierRun) { r.Group = 6 })), "no shard has had group 6"},
		{"bad shard name", record("b", with(func(r *TierRun) { r.Shard = "orders.0" })), "invalid shard name"},
		{"overlap in one object", record("b", good, with(func(r *TierRun) { r.First, r.Last = 20, 25 })), "overlaps the run 11-20"},
		{"two names for a group", record("b", good, with(func(r *TierRun) { r.First, r.Last, r.Shard = 21, 25, "other.1" })), "named both"},
		{"forget with runs", Command{Op: OpForgetTierObject, Object: "a", Runs: []TierRun{good}}, "only record-tier-object takes"},
		{"forget without name", forget(""), "names no object"},
		{"record with a topic", Command{Op: OpRecordTierObject, Name: "orders", Object: "b", Runs: []TierRun{good}}, "tiering ops do not take"},
		{"topic op with runs", Command{Op: OpDelete, Name: "orders", Runs: []TierRun{good}}, "only the tiering ops take"},
		{"topic op with an object", Command{Op: OpDelete, Name: "orders", Object: "a"}, "only the tiering ops take"},
	} {
		before := mustSnapshot(t, s)
		r := apply(t, s, tt.c)
		if !errors.Is(r.Err, topic.ErrInvalid) || !strings.Contains(r.Err.Error(), tt.want) {
			t.Errorf("%s: %v, want topic.ErrInvalid mentioning %q", tt.name, r.Err, tt.want)
		}
		assertUnchangedButApplied(t, s, before)
	}
	// Overlapping runs of different shards, and adjacent runs of one, are
	// fine.
	mustApply(t, s, record("c", good, with(func(r *TierRun) { r.First, r.Last = 21, 25 }), run(2, 11, 20)))
}

func TestTierCommandRoundTrip(t *testing.T) {
	for _, c := range []Command{
		record("o", run(1, 1, 2), TierRun{Shard: "x", Group: 1 << 40, First: 1 << 60, Last: 1<<64 - 1, Offset: 1 << 62, Length: 1, CRC: 1<<32 - 1}),
		forget("o"),
	} {
		got, err := UnmarshalCommand(c.Marshal())
		if err != nil || !reflect.DeepEqual(got, c) {
			t.Errorf("round trip of %+v: %+v, %v", c, got, err)
		}
	}
}

func TestTierSnapshot(t *testing.T) {
	s := tierState(t)
	mustApply(t, s, record("b", run(1, 1, 10), run(0, 3, 4)))
	mustApply(t, s, record("a", run(1, 5, 12)))
	mustApply(t, s, del("orders")) // runs outlive their topic
	snap := mustSnapshot(t, s)
	for _, want := range []string{
		`"tier_objects":[{"name":"a","runs":[{"shard":"orders.1","group":3,"first":5,"last":12,"offset":50,"length":80,"crc":5}],"recorded":3},{"name":"b",`,
	} {
		if !strings.Contains(string(snap), want) {
			t.Errorf("snapshot %s lacks %s", snap, want)
		}
	}
	r := New()
	if err := r.Restore(snap); err != nil {
		t.Fatal(err)
	}
	if got := mustSnapshot(t, r); !bytes.Equal(got, snap) {
		t.Errorf("snapshot after restore differs:\n%s\nwant\n%s", got, snap)
	}
	if !reflect.DeepEqual(r.TierObjects(), s.TierObjects()) || !reflect.DeepEqual(r.TierRunsOfGroup(3), s.TierRunsOfGroup(3)) {
		t.Error("restored manifest differs")
	}
	// The newest record still wins after a restore.
	if ref, ok := r.TierRunAtGroup(3, 7); !ok || ref.Object != "a" {
		t.Errorf("TierRunAtGroup(3, 7) after restore = %+v, %v; want object a", ref, ok)
	}
	// And the restored state goes on as the original does.
	for _, st := range []*State{s, r} {
		mustApply(t, st, forget("a"))
		mustApply(t, st, record("a", run(2, 1, 1)))
	}
	if !bytes.Equal(mustSnapshot(t, r), mustSnapshot(t, s)) {
		t.Error("restored state diverged")
	}

	// A state that never tiered writes no manifest.
	if got := string(mustSnapshot(t, tierState(t))); strings.Contains(got, "tier") {
		t.Errorf("an untiered state snapshots as %s", got)
	}
}

// A snapshot written before herald tiered loads with an empty manifest.
func TestRestoreSnapshotWithoutManifest(t *testing.T) {
	old := `{"version":1,"applied":7,"next_group":4,"topics":[{"name":"orders","attributes":{"persistent":true,"shards":2},` +
		`"first_group":2,"created_at":5,"updated_at":6}],"cluster":"c1","last_subscription":3}`
	s := New()
	if err := s.Restore([]byte(old)); err != nil {
		t.Fatal(err)
	}
	if len(s.TierObjects()) != 0 || s.TieredThrough("orders.1") != 0 {
		t.Fatalf("manifest of an old snapshot: %+v", s.TierObjects())
	}
	if _, _, ok := s.TierRunAt("orders.1", 1); ok {
		t.Fatal("a run found in an old snapshot")
	}
	mustApply(t, s, record("a", TierRun{Shard: "orders.1", Group: 3, First: 1, Last: 1, Length: 1}))
	if object, _, ok := s.TierRunAt("orders.1", 1); !ok || object != "a" {
		t.Fatalf("TierRunAt after the first record = %q, %v", object, ok)
	}
}

func TestRestoreRejectsBadManifest(t *testing.T) {
	snapWith := func(objects string) string {
		return `{"version":1,"applied":10,"next_group":4,"topics":[{"name":"t","first_group":2,"attributes":{"shards":2}}],"tier_objects":[` + objects + `]}`
	}
	obj := func(name string, recorded int, runs ...string) string {
		return fmt.Sprintf(`{"name":%q,"recorded":%d,"runs":[%s]}`, name, recorded, strings.Join(runs, ","))
	}
	runJSON := func(group, first, last int) string {
		return fmt.Sprintf(`{"shard":"t.1","group":%d,"first":%d,"last":%d,"offset":0,"length":1}`, group, first, last)
	}
	good := runJSON(3, 1, 2)
	if err := New().Restore([]byte(snapWith(obj("a", 1, good)))); err != nil {
		t.Fatalf("a good manifest: %v", err)
	}
	for data, want := range map[string]string{
		snapWith(obj("b", 1, good) + "," + obj("a", 2, good)): "not sorted",
		snapWith(obj("a", 1, good) + "," + obj("a", 2, good)): "not sorted and unique",
		snapWith(obj("", 1, good)):                            "names no object",
		snapWith(obj("a", 1)):                                 "no runs",
		snapWith(obj("a", 1, runJSON(3, 3, 4), good)):         "not sorted",
		snapWith(obj("a", 1, runJSON(4, 1, 2))):               "no shard has had group 4",
		snapWith(obj("a", 1, runJSON(3, 2, 1))):               "first at most last",
		snapWith(obj("a", 1, good, runJSON(3, 2, 3))):         "overlaps",
		snapWith(obj("a", 0, good)):                           "recorded at log index 0",
		snapWith(obj("a", 11, good)):                          "after the applied index 10",
		snapWith(obj("a", 1, good) + "," + obj("b", 1, good)): "taken",
	} {
		err := New().Restore([]byte(data))
		if !errors.Is(err, ErrInvalidSnapshot) || !strings.Contains(err.Error(), want) {
			t.Errorf("Restore(%s) = %v, want ErrInvalidSnapshot mentioning %q", data, err, want)
		}
	}
}

// BenchmarkTierRunAt looks up entries of a shard with many recorded runs.
func BenchmarkTierRunAt(b *testing.B) {
	s := New()
	a := topic.Defaults()
	if r := s.Apply(1, create("orders", &a, 1).Marshal()).(Result); r.Err != nil {
		b.Fatal(r.Err)
	}
	const runs = 10000
	for i := range uint64(runs) {
		c := record(fmt.Sprint("obj-", i), TierRun{Shard: "orders", Group: 2, First: i*100 + 1, Last: i*100 + 100, Length: 1})
		if r := s.Apply(i+2, c.Marshal()).(Result); r.Err != nil {
			b.Fatal(r.Err)
		}
	}
	b.ResetTimer()
	for i := range b.N {
		if _, _, ok := s.TierRunAt("orders", uint64(i%(runs*100))+1); !ok {
			b.Fatal("not found")
		}
	}
}
