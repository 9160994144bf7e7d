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

// The methods a Raft host needs of a state machine.
var _ interface {
	Apply(uint64, []byte) any
	Snapshot() ([]byte, error)
	Restore([]byte) error
	CompactIndex() uint64
} = (*State)(nil)

// apply applies c at the next index and returns its Result.
func apply(t *testing.T, s *State, c Command) Result {
	t.Helper()
	return applyData(t, s, c.Marshal())
}

func applyData(t *testing.T, s *State, data []byte) Result {
	t.Helper()
	before := s.Applied()
	r, ok := s.Apply(before+1, data).(Result)
	if !ok {
		t.Fatalf("Apply returned %T, want Result", r)
	}
	if s.Applied() != before+1 {
		t.Fatalf("Applied = %d after applying index %d", s.Applied(), before+1)
	}
	return r
}

func attrs(t *testing.T, changes map[string]string) *topic.Attributes {
	t.Helper()
	a, err := topic.Defaults().With(changes)
	if err != nil {
		t.Fatal(err)
	}
	return &a
}

func create(name string, a *topic.Attributes, time int64) Command {
	return Command{Op: OpCreate, Name: name, Attributes: a, Time: time}
}

func set(name string, changes map[string]string, time int64) Command {
	return Command{Op: OpSet, Name: name, Changes: changes, Time: time}
}

func del(name string) Command { return Command{Op: OpDelete, Name: name} }

// wantErr fails unless err matches target and mentions every one of want.
func wantErr(t *testing.T, err, target error, want ...string) {
	t.Helper()
	if !errors.Is(err, target) {
		t.Fatalf("error %v, want %v", err, target)
	}
	for _, w := range want {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("error %q does not mention %q", err, w)
		}
	}
}

func mustSnapshot(t *testing.T, s *State) []byte {
	t.Helper()
	data, err := s.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	return data
}

func TestCreateGetList(t *testing.T) {
	s := New()
	b := apply(t, s, create("b", attrs(t, map[string]string{"shards": "3"}), 100))
	a := apply(t, s, create("a", attrs(t, nil), 200))
	if b.Err != nil || a.Err != nil {
		t.Fatalf("create: %v, %v", b.Err, a.Err)
	}
	wantB := Topic{Name: "b", Attributes: *attrs(t, map[string]string{"shards": "3"}), FirstGroup: 2, CreatedAt: 100, UpdatedAt: 100}
	wantA := Topic{Name: "a", Attributes: topic.Defaults(), FirstGroup: 5, CreatedAt: 200, UpdatedAt: 200}
	if !reflect.DeepEqual(b.Topic, wantB) || !reflect.DeepEqual(a.Topic, wantA) {
		t.Errorf("results:\n%+v\n%+v\nwant\n%+v\n%+v", b.Topic, a.Topic, wantB, wantA)
	}
	if got, ok := s.Topic("b"); !ok || !reflect.DeepEqual(got, wantB) {
		t.Errorf("Topic(b) = %+v, %v", got, ok)
	}
	if _, ok := s.Topic("c"); ok {
		t.Error("Topic(c) exists")
	}
	if got := s.Topics(); !reflect.DeepEqual(got, []Topic{wantA, wantB}) {
		t.Errorf("Topics() = %+v, want a then b", got)
	}
	if g := wantA.Group(10); g != 15 {
		t.Errorf("Group(10) = %d, want 15", g)
	}
	if s.Applied() != 2 || s.CompactIndex() != 3 {
		t.Errorf("Applied, CompactIndex = %d, %d; want 2, 3", s.Applied(), s.CompactIndex())
	}
}

func TestCreateErrors(t *testing.T) {
	s := New()
	apply(t, s, create("t", attrs(t, nil), 1))
	before := mustSnapshot(t, s)

	r := apply(t, s, create("t", attrs(t, map[string]string{"shards": "2"}), 2))
	wantErr(t, r.Err, ErrTopicExists, `topic "t" already exists`, "herald topic set (SetTopicAttributes), or delete it first")

	r = apply(t, s, create("a.b", attrs(t, nil), 2))
	wantErr(t, r.Err, topic.ErrInvalid, `invalid topic name "a.b"`)

	bad := topic.Defaults()
	bad.Shards = 0
	r = apply(t, s, create("u", &bad, 2))
	wantErr(t, r.Err, topic.ErrInvalid, "shards must be between 1 and 1024, got 0")

	bad = topic.Defaults()
	bad.Persistent = false
	r = apply(t, s, create("u", &bad, 2))
	wantErr(t, r.Err, topic.ErrInvalid, "needs a push_endpoint")

	r = applyData(t, s, []byte(`{"op":"create","name":"u"}`))
	wantErr(t, r.Err, topic.ErrInvalid, "has no attributes")

	if !reflect.DeepEqual(r.Topic, Topic{}) {
		t.Errorf("a failed command returned topic %+v", r.Topic)
	}
	assertUnchangedButApplied(t, s, before)
}

// assertUnchangedButApplied fails unless s equals the state snapshotted
// in before, apart from its applied index.
func assertUnchangedButApplied(t *testing.T, s *State, before []byte) {
	t.Helper()
	r := New()
	if err := r.Restore(before); err != nil {
		t.Fatal(err)
	}
	r.applied = s.applied
	if !bytes.Equal(mustSnapshot(t, r), mustSnapshot(t, s)) {
		t.Errorf("rejected commands changed the state:\n%s\nthen\n%s", before, mustSnapshot(t, s))
	}
}

func TestPartialAttributesTakeDefaults(t *testing.T) {
	s := New()
	r := applyData(t, s, []byte(`{"op":"create","name":"t","attributes":{"shards":2},"time":5}`))
	want := topic.Defaults()
	want.Shards = 2
	if r.Err != nil || !reflect.DeepEqual(r.Topic.Attributes, want) {
		t.Errorf("got %+v, %v; want %+v", r.Topic.Attributes, r.Err, want)
	}
}

func TestSet(t *testing.T) {
	s := New()
	apply(t, s, create("t", attrs(t, map[string]string{"shards": "4"}), 10))
	r := apply(t, s, set("t", map[string]string{"push-endpoint": "https://h/x", "http_headers": "X-A: 1", "shards": "4"}, 20))
	if r.Err != nil {
		t.Fatal(r.Err)
	}
	want := Topic{Name: "t", Attributes: *attrs(t, map[string]string{"shards": "4", "push_endpoint": "https://h/x", "http_headers": "X-A: 1"}),
		FirstGroup: 2, CreatedAt: 10, UpdatedAt: 20}
	if !reflect.DeepEqual(r.Topic, want) {
		t.Errorf("set result %+v, want %+v", r.Topic, want)
	}
	if got, _ := s.Topic("t"); !reflect.DeepEqual(got, want) {
		t.Errorf("Topic(t) = %+v, want %+v", got, want)
	}
}

func TestSetErrors(t *testing.T) {
	s := New()
	apply(t, s, create("t", attrs(t, map[string]string{"shards": "4"}), 10))
	before := mustSnapshot(t, s)

	for _, tc := range []struct {
		cmd    Command
		target error
		want   []string
	}{
		{set("t", map[string]string{"shards": "5"}, 1), ErrShardsFixed,
			[]string{`the shard count of topic "t" is fixed at creation (4)`, "delete and recreate the topic to change it"}},
		{set("t", map[string]string{"shards": "0"}, 1), ErrShardsFixed, []string{"fixed at creation (4)"}},
		{set("t", map[string]string{"Shards": "11"}, 1), ErrShardsFixed, nil},
		{set("t", map[string]string{"shards": "x"}, 1), topic.ErrInvalid, []string{"attribute shards"}},
		{set("t", map[string]string{"colour": "red"}, 1), topic.ErrInvalid, []string{`unknown attribute "colour"`, "use one of"}},
		{set("t", map[string]string{"persistent": "false"}, 1), topic.ErrInvalid, []string{"needs a push_endpoint"}},
		{set("t", map[string]string{"push_endpoint": "gopher://h"}, 1), topic.ErrInvalid, []string{`unsupported scheme "gopher"`}},
		{set("u", map[string]string{"persistent": "true"}, 1), ErrTopicNotFound,
			[]string{`topic "u" does not exist`, "create it first (herald topic create u)"}},
		{set("bad name", map[string]string{"persistent": "true"}, 1), topic.ErrInvalid, []string{"invalid topic name"}},
		{Command{Op: OpSet, Name: "t", Time: 1}, topic.ErrInvalid, []string{"changes nothing", "give at least one attribute"}},
	} {
		r := apply(t, s, tc.cmd)
		wantErr(t, r.Err, tc.target, tc.want...)
	}
	assertUnchangedButApplied(t, s, before)
}

func TestDelete(t *testing.T) {
	s := New()
	apply(t, s, create("t", attrs(t, nil), 10))
	apply(t, s, create("u", attrs(t, nil), 10))
	r := apply(t, s, del("t"))
	if r.Err != nil || r.Topic.Name != "t" || r.Topic.FirstGroup != 2 {
		t.Errorf("delete = %+v", r)
	}
	if _, ok := s.Topic("t"); ok {
		t.Error("t still exists after delete")
	}
	if got := s.Topics(); len(got) != 1 || got[0].Name != "u" {
		t.Errorf("Topics() = %+v, want only u", got)
	}
	r = apply(t, s, del("t"))
	wantErr(t, r.Err, ErrTopicNotFound, `topic "t" does not exist`, "herald topic create t")
	r = apply(t, s, del(""))
	wantErr(t, r.Err, topic.ErrInvalid, "a name is required")
}

func TestGroupsNeverReused(t *testing.T) {
	s := New()
	apply(t, s, create("a", attrs(t, map[string]string{"shards": "3"}), 1)) // 2-4
	apply(t, s, del("a"))
	// A failed create takes no groups.
	apply(t, s, create("x", &topic.Attributes{}, 1))
	// Through a snapshot, too.
	r := New()
	if err := r.Restore(mustSnapshot(t, s)); err != nil {
		t.Fatal(err)
	}
	for _, st := range []*State{s, r} {
		res := apply(t, st, create("a", attrs(t, map[string]string{"shards": "3"}), 2))
		if res.Err != nil || res.Topic.FirstGroup != 5 {
			t.Errorf("recreated topic got %+v, want first group 5", res)
		}
		res = apply(t, st, create("b", attrs(t, nil), 2))
		if res.Topic.FirstGroup != 8 {
			t.Errorf("next topic got first group %d, want 8", res.Topic.FirstGroup)
		}
	}
}

func TestReturnedTopicsAreCopies(t *testing.T) {
	s := New()
	a := attrs(t, map[string]string{"http_headers": "X-A: 1"})
	cmd := create("t", a, 1)
	r := apply(t, s, cmd)
	want, _ := s.Topic("t")
	want = want.clone()

	r.Topic.Attributes.HTTPHeaders["X-A"] = "result"
	got, _ := s.Topic("t")
	got.Attributes.HTTPHeaders["X-A"] = "topic"
	got.Attributes.Shards = 99
	s.Topics()[0].Attributes.HTTPHeaders["X-A"] = "topics"
	a.HTTPHeaders["X-A"] = "command"
	r = apply(t, s, set("t", map[string]string{"opaque_data": "x"}, 2))
	r.Topic.Attributes.HTTPHeaders["X-A"] = "set result"

	got, _ = s.Topic("t")
	if got.Attributes.HTTPHeaders["X-A"] != "1" || got.Attributes.Shards != want.Attributes.Shards {
		t.Errorf("callers changed the state: %+v", got.Attributes)
	}
}

func TestStaleIndexRejected(t *testing.T) {
	s := New()
	s.Apply(5, create("t", attrs(t, nil), 1).Marshal())
	for _, index := range []uint64{5, 4} {
		r := s.Apply(index, del("t").Marshal()).(Result)
		if r.Err == nil || !strings.Contains(r.Err.Error(), "not after applied index 5") {
			t.Errorf("Apply(%d) after 5: %v", index, r.Err)
		}
	}
	if _, ok := s.Topic("t"); !ok || s.Applied() != 5 {
		t.Errorf("a stale entry changed the state (applied %d)", s.Applied())
	}
}

func TestGarbageCommands(t *testing.T) {
	s := New()
	apply(t, s, create("t", attrs(t, nil), 1))
	before := mustSnapshot(t, s)
	for _, data := range []string{
		"", "{", "null", "[]", "42", `"create"`, "\x00\xff\xfe",
		`{}`, `{"op":"explode","name":"t"}`, `{"op":"CREATE","name":"t"}`,
		`{"op":"create","name":"t","attributes":null}`,
		`{"op":"create","name":"u","attributes":{"shards":"many"}}`,
		`{"op":"create","name":"u","attributes":{},"changes":{"a":"b"}}`,
		`{"op":"set","name":"t"}`, `{"op":"set","name":"t","changes":{}}`,
		`{"op":"set","name":"t","changes":{"shards":2}}`,
		`{"op":"set","name":"t","changes":{"persistent":"true"},"attributes":{}}`,
		`{"op":"delete","name":"t","changes":{"a":"b"}}`,
		`{"op":"delete","name":"t","attributes":{}}`,
		`{"op":"delete","name":7}`, `{"op":"delete","name":"t"} trailing`,
		`{"op":"delete","name":"t","time":"now"}`,
	} {
		r := applyData(t, s, []byte(data))
		if !errors.Is(r.Err, topic.ErrInvalid) {
			t.Errorf("command %q: error %v, want topic.ErrInvalid", data, r.Err)
		}
	}
	assertUnchangedButApplied(t, s, before)
}

func TestUnmarshalCommandMessages(t *testing.T) {
	for data, want := range map[string]string{
		"{":                          "propose commands encoded by Command.Marshal",
		`{"op":"grow","name":"t"}`:   `unknown op "grow"; use create, set, delete, add-node`,
		`{"op":"create","name":"t"}`: "start from topic.Defaults()",
		`{"op":"delete","name":"t","attributes":{}}`: "which only create takes",
		`{"op":"delete","name":"t","changes":{}}`:    "which only set takes",
	} {
		_, err := UnmarshalCommand([]byte(data))
		if err == nil || !strings.Contains(err.Error(), want) || strings.HasPrefix(err.Error(), topic.ErrInvalid.Error()) {
			t.Errorf("UnmarshalCommand(%q) = %v, want a message with %q", data, err, want)
		}
	}
}

func TestCommandRoundTrip(t *testing.T) {
	for _, c := range []Command{
		create("t", attrs(t, map[string]string{"http_headers": "A: 1", "signing_secret": "s"}), -5),
		set("t", map[string]string{"push_endpoint": "https://h", "x": ""}, 1<<62),
		del("t"),
	} {
		got, err := UnmarshalCommand(c.Marshal())
		if err != nil || !reflect.DeepEqual(got, c) {
			t.Errorf("round trip of %+v: %+v, %v", c, got, err)
		}
	}
}

// history is a sequence of commands exercising every op and error.
func history(t *testing.T) [][]byte {
	var h [][]byte
	for i := range 30 {
		name := fmt.Sprintf("t%d", i%7)
		h = append(h,
			create(name, attrs(t, map[string]string{"shards": fmt.Sprint(1 + i%5), "http_headers": fmt.Sprintf("X-I: %d; X-B: b", i)}), int64(i)).Marshal(),
			set(name, map[string]string{"opaque_data": fmt.Sprint(i), "max_retries": fmt.Sprint(i)}, int64(i)+1).Marshal(),
			set(name, map[string]string{"shards": "9"}, int64(i)+2).Marshal(),
			[]byte("garbage"),
			createSub(name, fmt.Sprintf("s%d", i%4), subAttrs(t, map[string]string{"http_headers": "X-S: 1; X-A: 2"}), int64(i)+3).Marshal(),
			Command{Op: OpDisableSubscription, Name: name, Subscription: "default", Reason: "r", Time: int64(i) + 4}.Marshal(),
		)
		if i%3 == 0 {
			h = append(h, del(fmt.Sprintf("t%d", (i+2)%7)).Marshal())
		}
		// Tiered objects, some recorded again (alike or not), some
		// overlapping, some forgotten.
		h = append(h, record(fmt.Sprintf("o%d", i%9), TierRun{Shard: "t0", Group: 2 + uint64(i%3), First: uint64(i%11) + 1, Last: uint64(i%11) + 4, Length: 1}).Marshal())
		if i%4 == 0 {
			h = append(h, forget(fmt.Sprintf("o%d", i%5)).Marshal())
		}
	}
	return h
}

func TestDeterminism(t *testing.T) {
	h := history(t)
	var snaps [][]byte
	for range 3 {
		s := New()
		for i, data := range h {
			s.Apply(uint64(i+1), data)
		}
		snaps = append(snaps, mustSnapshot(t, s))
	}
	for _, snap := range snaps[1:] {
		if !bytes.Equal(snap, snaps[0]) {
			t.Fatalf("replicas differ:\n%s\n%s", snaps[0], snap)
		}
	}

	// A replica that restores a snapshot taken midway, then applies the
	// rest, ends up identical to one that applied everything.
	for _, cut := range []int{0, 1, len(h) / 2, len(h)} {
		s := New()
		for i, data := range h[:cut] {
			s.Apply(uint64(i+1), data)
		}
		r := New()
		if err := r.Restore(mustSnapshot(t, s)); err != nil {
			t.Fatal(err)
		}
		for i, data := range h[cut:] {
			r.Apply(uint64(cut+i+1), data)
		}
		if got := mustSnapshot(t, r); !bytes.Equal(got, snaps[0]) {
			t.Errorf("restored at %d, then applied the rest:\n%s\nwant\n%s", cut, got, snaps[0])
		}
	}
}

func TestSnapshotRestore(t *testing.T) {
	s := New()
	for i, data := range history(t) {
		s.Apply(uint64(i+1), data)
	}
	snap := mustSnapshot(t, s)
	r := New()
	if err := r.Restore(snap); err != nil {
		t.Fatal(err)
	}
	if got := mustSnapshot(t, r); !bytes.Equal(got, snap) {
		t.Errorf("snapshot after restore differs:\n%s\nwant\n%s", got, snap)
	}
	if !reflect.DeepEqual(r.Topics(), s.Topics()) || r.Applied() != s.Applied() || r.CompactIndex() != s.CompactIndex() {
		t.Error("restored state differs")
	}
	if len(s.Topics()) == 0 || len(s.TierObjects()) == 0 {
		t.Fatal("the history left no topics or no tiered objects to snapshot")
	}
	if !reflect.DeepEqual(r.TierObjects(), s.TierObjects()) {
		t.Error("restored manifest differs")
	}

	// Empty data is the empty state.
	if err := r.Restore(nil); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(mustSnapshot(t, r), mustSnapshot(t, New())) {
		t.Errorf("Restore(nil) gave %s", mustSnapshot(t, r))
	}
}

func TestSnapshotFormat(t *testing.T) {
	s := New()
	apply(t, s, create("t", attrs(t, map[string]string{"shards": "1", "http_headers": "B: 2; A: 1"}), 7))
	got := string(mustSnapshot(t, s))
	for _, want := range []string{
		`{"version":1,"applied":1,"next_group":3,"topics":[{"name":"t","attributes":{`,
		`"http_headers":{"A":"1","B":"2"}`,
		`"first_group":2,"created_at":7,"updated_at":7}]}`,
	} {
		if !strings.Contains(got, want) {
			t.Errorf("snapshot %s lacks %s", got, want)
		}
	}
}

func TestRestoreRejects(t *testing.T) {
	s := New()
	apply(t, s, create("t", attrs(t, nil), 1))
	before := mustSnapshot(t, s)
	topicJSON := func(name string, first, shards int) string {
		return fmt.Sprintf(`{"name":%q,"first_group":%d,"attributes":{"shards":%d}}`, name, first, shards)
	}
	for data, want := range map[string]string{
		"{":                            "unexpected end",
		"null":                         "version 0",
		`{"version":2}`:                "version 2",
		`{"version":1}`:                "next group id 0",
		`{"version":1,"next_group":1}`: "next group id 1",
		`{"version":1,"next_group":20,"topics":[` + topicJSON("a.b", 2, 1) + `]}`:                            "invalid topic name",
		`{"version":1,"next_group":20,"topics":[` + topicJSON("b", 2, 1) + "," + topicJSON("a", 3, 1) + `]}`: "not sorted",
		`{"version":1,"next_group":20,"topics":[` + topicJSON("a", 2, 1) + "," + topicJSON("a", 3, 1) + `]}`: "not sorted and unique",
		`{"version":1,"next_group":20,"topics":[` + topicJSON("a", 2, 0) + `]}`:                              "0 shards",
		`{"version":1,"next_group":20,"topics":[` + topicJSON("a", 2, 5) + "," + topicJSON("b", 6, 1) + `]}`: "overlap",
		`{"version":1,"next_group":20,"topics":[` + topicJSON("a", 1, 1) + `]}`:                              "overlap",
		`{"version":1,"next_group":20,"topics":[` + topicJSON("a", 19, 2) + `]}`:                             "outside 2-19",
		`{"version":1,"next_group":20,"topics":[` + topicJSON("a", -1, 2) + `]}`:                             "cannot unmarshal",
	} {
		err := s.Restore([]byte(data))
		if !errors.Is(err, ErrInvalidSnapshot) || !strings.Contains(err.Error(), want) {
			t.Errorf("Restore(%s) = %v, want ErrInvalidSnapshot mentioning %q", data, err, want)
		}
		if !bytes.Equal(mustSnapshot(t, s), before) {
			t.Fatalf("a failed Restore(%s) changed the state", data)
		}
	}
}

func FuzzApply(f *testing.F) {
	f.Add(create("t", &topic.Attributes{Shards: 1, HTTPTimeout: 1, AMQPAckLevel: "none", KafkaAcks: "all", Persistent: true}, 1).Marshal())
	f.Add(set("t", map[string]string{"shards": "1", "push_endpoint": "nats://n"}, 1).Marshal())
	f.Add(del("t").Marshal())
	f.Add([]byte(`{"op":"create","name":"u","attributes":{"shards":1024}}`))
	f.Add(record("o", TierRun{Shard: "t", Group: 2, First: 1, Last: 9, Offset: 4, Length: 100, CRC: 7}).Marshal())
	f.Add(forget("o").Marshal())
	f.Fuzz(func(t *testing.T, data []byte) {
		s := New()
		s.Apply(1, create("t", &topic.Attributes{Shards: 1, HTTPTimeout: 1, AMQPAckLevel: "none", KafkaAcks: "all", Persistent: true}, 1).Marshal())
		r := s.Apply(2, data).(Result)
		if r.Err != nil && r.Topic.Name != "" {
			t.Errorf("a rejected command returned topic %+v", r.Topic)
		}
		snap := mustSnapshot(t, s)
		q := New()
		if err := q.Restore(snap); err != nil {
			t.Fatalf("restoring a snapshot of applied state: %v", err)
		}
		if !bytes.Equal(mustSnapshot(t, q), snap) {
			t.Error("snapshot round trip differs")
		}
	})
}

func TestPlaceSpreadsReplicasAndLeaders(t *testing.T) {
	members := []uint64{3, 1, 2} // any order: Place sorts
	got := Place(members, 2, 6)
	leaders := map[uint64]int{}
	for i, r := range got {
		if len(r) != ReplicationFactor {
			t.Fatalf("shard %d on %v, want %d replicas", i, r, ReplicationFactor)
		}
		seen := map[uint64]bool{}
		for _, n := range r {
			if seen[n] {
				t.Fatalf("shard %d on %v: a node twice", i, r)
			}
			seen[n] = true
		}
		leaders[r[0]]++
	}
	for _, n := range []uint64{1, 2, 3} {
		if leaders[n] != 2 {
			t.Errorf("node %d is the preferred leader of %d of 6 shards, want 2 (%v)", n, leaders[n], got)
		}
	}
	if one := Place([]uint64{7}, 2, 2); len(one[0]) != 1 || one[0][0] != 7 || one[1][0] != 7 {
		t.Errorf("Place on one node = %v, want every shard on node 7", one)
	}
	if five := Place([]uint64{1, 2, 3, 4, 5}, 10, 1); len(five[0]) != ReplicationFactor {
		t.Errorf("Place on five nodes = %v, want %d replicas", five, ReplicationFactor)
	}
}

func TestCreateRecordsPlacement(t *testing.T) {
	s := New()
	a := topic.Defaults()
	a.Shards = 2
	r := s.Apply(1, Command{Op: OpCreate, Name: "orders", Attributes: &a, Members: []uint64{1, 2, 3}, Time: 1}.Marshal()).(Result)
	if r.Err != nil {
		t.Fatal(r.Err)
	}
	if got := r.Topic.Replicas(1); len(got) != 3 {
		t.Errorf("shard 1 on %v, want 3 nodes", got)
	}
	data, err := s.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	back := New()
	if err := back.Restore(data); err != nil {
		t.Fatal(err)
	}
	if tp, _ := back.Topic("orders"); !reflect.DeepEqual(tp.Placement, r.Topic.Placement) {
		t.Errorf("restored placement %v, want %v", tp.Placement, r.Topic.Placement)
	}
	// A topic created without members (before clusters) lives on node 1.
	r = s.Apply(2, Command{Op: OpCreate, Name: "old", Attributes: &a, Time: 1}.Marshal()).(Result)
	if got := r.Topic.Replicas(0); !reflect.DeepEqual(got, []uint64{1}) {
		t.Errorf("legacy topic's shard on %v, want [1]", got)
	}
	bad := s.Apply(3, Command{Op: OpCreate, Name: "bad", Attributes: &a, Members: []uint64{0}, Time: 1}.Marshal()).(Result)
	if bad.Err == nil || !strings.Contains(bad.Err.Error(), "node 0") {
		t.Errorf("create with member 0 = %v, want an error naming node 0", bad.Err)
	}
}
