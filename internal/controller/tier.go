package controller

import (
	"cmp"
	"fmt"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"herald/internal/topic"
)

// The manifest of tiered objects.
//
// A node's reconciler packs ranges of shards' log entries into objects in
// object storage and, once an object is uploaded, records it here with
// OpRecordTierObject: its name and, for each range it holds (a run), the
// shard's Raft group, the log indexes it covers and where in the object
// they are. Only then does it advance each shard's last reconciled log
// index (see package shard), so that an LRO never names entries the
// manifest cannot find. Reads below a shard's local log look their entry
// up here (TierRunAt). A sweeper deletes objects no longer needed, and
// then forgets them with OpForgetTierObject.
//
// Both ops are idempotent, because every step of tiering may be repeated
// by a reconciler or sweeper that crashed, or lost leadership, after
// acting and before learning the outcome.
//
// Runs are keyed by Raft group id, not by shard name: a topic deleted and
// created again reuses its shards' names, but never their group ids (see
// Topic.FirstGroup), and its new shards' log indexes start again from 1.
// The name-keyed queries resolve a name to its topic's current group, so
// the runs of a deleted topic's shards, which stay recorded until their
// objects are forgotten, are never taken for a new topic's.

// The tiering operations.
const (
	// OpRecordTierObject records object Object with its Runs.
	OpRecordTierObject = "record-tier-object"
	// OpForgetTierObject drops object Object from the manifest.
	OpForgetTierObject = "forget-tier-object"
)

// MaxTierObjectName is the longest object name the manifest takes, in
// bytes: S3's limit on a key.
const MaxTierObjectName = 1024

// A TierObject is an object in the object store, as the manifest records
// it.
type TierObject struct {
	Name string `json:"name"`
	// Runs are the ranges of log entries the object holds, sorted by
	// group, then first index.
	Runs []TierRun `json:"runs"`
}

// A TierRun is a range of one shard's log entries in an object.
type TierRun struct {
	// Shard is the shard's name (topic.ShardName), for people: the
	// manifest goes by Group.
	Shard string `json:"shard"`
	// Group is the shard's Raft group id.
	Group uint64 `json:"group"`
	// First and Last are the log indexes of the run's first and last
	// entries, inclusive.
	First uint64 `json:"first"`
	Last  uint64 `json:"last"`
	// Offset and Length are where the run's bytes are in the object.
	Offset int64 `json:"offset"`
	Length int64 `json:"length"`
	// CRC is the checksum of those bytes, as the object store package
	// computes it.
	CRC uint32 `json:"crc"`
}

// Covers reports whether the run holds the entry at index.
func (r *TierRun) Covers(index uint64) bool { return r.First <= index && index <= r.Last }

// A TierRunRef is a run as a query finds it: with its object, and the log
// index of the controller's entry that recorded the object.
type TierRunRef struct {
	Object   string  `json:"object"`
	Recorded uint64  `json:"recorded"`
	Run      TierRun `json:"run"`
}

// tierObject is what the state holds of a recorded object.
type tierObject struct {
	runs     []TierRun // sorted by compareRuns; never changed once recorded
	recorded uint64    // the log index of the record
}

// tierGroup indexes the runs of one group, across objects.
type tierGroup struct {
	// refs are sorted by First, then by record (oldest first), then by
	// object name.
	refs []TierRunRef
	// maxLast[i] is the highest Last among refs[:i+1]: a lookup walks
	// back from the last run starting at or before its index only while
	// an earlier run may still reach it.
	maxLast []uint64
}

func compareRuns(a, b TierRun) int {
	return cmp.Or(cmp.Compare(a.Group, b.Group), cmp.Compare(a.First, b.First), cmp.Compare(a.Last, b.Last),
		cmp.Compare(a.Shard, b.Shard), cmp.Compare(a.Offset, b.Offset), cmp.Compare(a.Length, b.Length), cmp.Compare(a.CRC, b.CRC))
}

func compareRefs(a, b TierRunRef) int {
	return cmp.Or(cmp.Compare(a.Run.First, b.Run.First), cmp.Compare(a.Recorded, b.Recorded), cmp.Compare(a.Object, b.Object),
		compareRuns(a.Run, b.Run))
}

// checkTierFields is checkFields for the tiering ops. The runs are
// checked on apply, against the state (see checkTierObject).
func (c *Command) checkTierFields() error {
	if c.Name != "" || c.Attributes != nil || c.Changes != nil || c.Members != nil || c.Node != 0 || c.Address != "" ||
		c.Shard != 0 || c.To != 0 || c.Cluster != "" || c.Subscription != "" || c.SubscriptionAttributes != nil || c.Reason != "" {
		return invalidf("invalid controller command: %s of object %s names a topic, node, shard, cluster, subscription or attributes, which tiering ops do not take",
			c.Op, quoteObject(c.Object))
	}
	if c.Object == "" {
		return invalidf("invalid controller command: %s names no object", c.Op)
	}
	if len(c.Object) > MaxTierObjectName || !utf8.ValidString(c.Object) {
		return invalidf("invalid controller command: %s of object %s: the name is not UTF-8 of at most %d bytes",
			c.Op, quoteObject(c.Object), MaxTierObjectName)
	}
	if c.Op == OpRecordTierObject && len(c.Runs) == 0 {
		return invalidf("invalid controller command: %s of object %s has no runs; an object holds at least one range of log entries",
			c.Op, quoteObject(c.Object))
	}
	if c.Op == OpForgetTierObject && c.Runs != nil {
		return invalidf("invalid controller command: %s of object %s has runs, which only %s takes", c.Op, quoteObject(c.Object), OpRecordTierObject)
	}
	return nil
}

// checkTierRuns checks the runs of object name, sorted by compareRuns,
// against the groups allocated so far: those below nextGroup.
func checkTierRuns(name string, runs []TierRun, nextGroup uint64) error {
	for i := range runs {
		r := &runs[i]
		what := fmt.Sprintf("run %d-%d of shard %s (group %d) in object %s", r.First, r.Last, quoteObject(r.Shard), r.Group, quoteObject(name))
		if _, _, err := topic.ParseShardName(r.Shard); err != nil {
			return fmt.Errorf("%s: %w", what, err)
		}
		switch {
		case r.Group <= ControllerGroup || r.Group >= nextGroup:
			return invalidf("%s: no shard has had group %d; shard groups so far are %d-%d", what, r.Group, ControllerGroup+1, nextGroup-1)
		case r.First == 0 || r.First > r.Last:
			return invalidf("%s: the log indexes must be from 1 up, first at most last", what)
		case r.Offset < 0 || r.Length <= 0 || r.Offset > math.MaxInt64-r.Length:
			return invalidf("%s: bytes %d+%d are not a range of the object; give offset >= 0 and length > 0", what, r.Offset, r.Length)
		}
		if i > 0 && runs[i-1].Group == r.Group {
			prev := &runs[i-1]
			if prev.Shard != r.Shard {
				return invalidf("%s: group %d is named both %s and %s", what, r.Group, quoteObject(prev.Shard), quoteObject(r.Shard))
			}
			if prev.Last >= r.First {
				return invalidf("%s: overlaps the run %d-%d of the same shard; an object holds each entry once", what, prev.First, prev.Last)
			}
		}
	}
	return nil
}

// recordTierObject applies OpRecordTierObject at log index.
func (s *State) recordTierObject(index uint64, c *Command) Result {
	runs := slices.SortedFunc(slices.Values(c.Runs), compareRuns)
	if o, ok := s.tierObjects[c.Object]; ok {
		if slices.Equal(o.runs, runs) {
			return Result{} // a repeat: the reconciler did not learn it was recorded
		}
		return Result{Err: tierObjectConflict(c.Object)}
	}
	if err := checkTierRuns(c.Object, runs, s.nextGroup); err != nil {
		return Result{Err: err}
	}
	s.addTierObject(c.Object, &tierObject{runs: runs, recorded: index})
	return Result{}
}

// addTierObject adds a checked object to the manifest and its groups'
// indexes.
func (s *State) addTierObject(name string, o *tierObject) {
	if s.tierObjects == nil {
		s.tierObjects = make(map[string]*tierObject)
		s.tierGroups = make(map[uint64]*tierGroup)
	}
	s.tierObjects[name] = o
	for _, r := range o.runs {
		g := s.tierGroups[r.Group]
		if g == nil {
			g = &tierGroup{}
			s.tierGroups[r.Group] = g
		}
		ref := TierRunRef{Object: name, Recorded: o.recorded, Run: r}
		i, _ := slices.BinarySearchFunc(g.refs, ref, compareRefs)
		g.refs = slices.Insert(g.refs, i, ref)
		g.maxLast = slices.Insert(g.maxLast, i, 0)
		g.fixMaxLast(i)
	}
}

// forgetTierObject applies OpForgetTierObject.
func (s *State) forgetTierObject(c *Command) Result {
	o, ok := s.tierObjects[c.Object]
	if !ok {
		return Result{} // forgotten already: the sweeper repeats itself
	}
	delete(s.tierObjects, c.Object)
	for _, r := range o.runs {
		g := s.tierGroups[r.Group]
		i := slices.IndexFunc(g.refs, func(ref TierRunRef) bool { return ref.Object == c.Object && ref.Run == r })
		g.refs = slices.Delete(g.refs, i, i+1)
		g.maxLast = slices.Delete(g.maxLast, i, i+1)
		if len(g.refs) == 0 {
			delete(s.tierGroups, r.Group)
			continue
		}
		g.fixMaxLast(i)
	}
	return Result{}
}

// fixMaxLast recomputes maxLast from position i on.
func (g *tierGroup) fixMaxLast(i int) {
	var m uint64
	if i > 0 {
		m = g.maxLast[i-1]
	}
	for ; i < len(g.refs); i++ {
		m = max(m, g.refs[i].Run.Last)
		g.maxLast[i] = m
	}
}

// at returns the run covering index, the most recently recorded if
// several do.
func (g *tierGroup) at(index uint64) (TierRunRef, bool) {
	// The runs starting at or before index.
	n, _ := slices.BinarySearchFunc(g.refs, index, func(ref TierRunRef, index uint64) int {
		if ref.Run.First <= index {
			return -1
		}
		return 1
	})
	var best TierRunRef
	found := false
	// Runs do not overlap unless an object was uploaded and recorded
	// twice, so this usually looks at one run.
	for i := n - 1; i >= 0 && g.maxLast[i] >= index; i-- {
		if ref := g.refs[i]; ref.Run.Last >= index && (!found || ref.Recorded > best.Recorded) {
			best, found = ref, true
		}
	}
	return best, found
}

// group returns the Raft group id of the shard named shard, if its topic
// exists.
func (s *State) group(shard string) (uint64, bool) {
	name, i, err := topic.ParseShardName(shard)
	if err != nil {
		return 0, false
	}
	t, ok := s.topics[name]
	if !ok || i >= t.Attributes.Shards {
		return 0, false
	}
	return t.Group(i), true
}

// TierRunAt returns the recorded run holding the entry at index of the
// shard named shard, with its object. If several do (an object uploaded
// and recorded again after a crash), it returns the one recorded last.
// ok is false if none does, or the shard's topic does not exist.
func (s *State) TierRunAt(shard string, index uint64) (object string, run TierRun, ok bool) {
	g, ok := s.group(shard)
	if !ok {
		return "", TierRun{}, false
	}
	ref, ok := s.TierRunAtGroup(g, index)
	return ref.Object, ref.Run, ok
}

// TierRunAtGroup is TierRunAt for the shard whose Raft group is group,
// whether or not its topic still exists.
func (s *State) TierRunAtGroup(group, index uint64) (TierRunRef, bool) {
	g := s.tierGroups[group]
	if g == nil {
		return TierRunRef{}, false
	}
	return g.at(index)
}

// TierRuns returns the recorded runs of the shard named shard, sorted by
// first index, then by when they were recorded; none if its topic does
// not exist.
func (s *State) TierRuns(shard string) []TierRunRef {
	g, ok := s.group(shard)
	if !ok {
		return nil
	}
	return s.TierRunsOfGroup(g)
}

// TierRunsOfGroup is TierRuns for the shard whose Raft group is group.
func (s *State) TierRunsOfGroup(group uint64) []TierRunRef {
	if g := s.tierGroups[group]; g != nil {
		return slices.Clone(g.refs)
	}
	return nil
}

// TieredThrough returns the highest log index recorded for the shard named
// shard, in any object; 0 if none is, or its topic does not exist. Runs
// may leave gaps below it (an object forgotten), so it says where
// recorded runs end, not that every entry below is recorded.
func (s *State) TieredThrough(shard string) uint64 {
	g, ok := s.group(shard)
	if !ok {
		return 0
	}
	return s.TieredThroughGroup(g)
}

// TieredThroughGroup is TieredThrough for the shard whose Raft group is
// group.
func (s *State) TieredThroughGroup(group uint64) uint64 {
	if g := s.tierGroups[group]; g != nil {
		return g.maxLast[len(g.maxLast)-1]
	}
	return 0
}

// TierObjects returns the recorded objects, sorted by name.
func (s *State) TierObjects() []TierObject {
	out := make([]TierObject, 0, len(s.tierObjects))
	for _, name := range slices.Sorted(maps.Keys(s.tierObjects)) {
		out = append(out, TierObject{Name: name, Runs: slices.Clone(s.tierObjects[name].runs)})
	}
	return out
}

// TierObject returns the recorded object called name.
func (s *State) TierObject(name string) (TierObject, bool) {
	o, ok := s.tierObjects[name]
	if !ok {
		return TierObject{}, false
	}
	return TierObject{Name: name, Runs: slices.Clone(o.runs)}, true
}

// quoteObject quotes an object or shard name for an error message,
// shortening a long one.
func quoteObject(s string) string {
	const max = 64
	if len(s) <= max {
		return strconv.Quote(s)
	}
	return strconv.Quote(strings.ToValidUTF8(s[:max/2], "")) + "..." + strconv.Quote(strings.ToValidUTF8(s[len(s)-max/4:], ""))
}

// snapshotTierObject is a recorded object in a snapshot.
type snapshotTierObject struct {
	Name     string    `json:"name"`
	Runs     []TierRun `json:"runs"`
	Recorded uint64    `json:"recorded"`
}

// snapshotTier returns the manifest as the snapshot holds it, sorted by
// name; nil if it is empty, so that a state that never tiered writes its
// snapshot as before.
func (s *State) snapshotTier() []snapshotTierObject {
	if len(s.tierObjects) == 0 {
		return nil
	}
	out := make([]snapshotTierObject, 0, len(s.tierObjects))
	for _, name := range slices.Sorted(maps.Keys(s.tierObjects)) {
		o := s.tierObjects[name]
		out = append(out, snapshotTierObject{Name: name, Runs: o.runs, Recorded: o.recorded})
	}
	return out
}

// restoreTier checks the snapshot's manifest, as recordTierObject would,
// and adds it to r, the state being restored.
func (snap *snapshot) restoreTier(r *State) error {
	recorded := make(map[uint64]bool)
	for i, o := range snap.TierObjects {
		if i > 0 && snap.TierObjects[i-1].Name >= o.Name {
			return fmt.Errorf("tiered objects %s and %s are not sorted and unique", quoteObject(snap.TierObjects[i-1].Name), quoteObject(o.Name))
		}
		c := Command{Op: OpRecordTierObject, Object: o.Name, Runs: o.Runs}
		if err := c.checkTierFields(); err != nil {
			return err
		}
		if !slices.IsSortedFunc(o.Runs, compareRuns) {
			return fmt.Errorf("the runs of tiered object %s are not sorted", quoteObject(o.Name))
		}
		if err := checkTierRuns(o.Name, o.Runs, snap.NextGroup); err != nil {
			return err
		}
		// Each object was recorded by an entry of its own, already applied.
		if o.Recorded == 0 || o.Recorded > snap.Applied || recorded[o.Recorded] {
			return fmt.Errorf("tiered object %s recorded at log index %d, which is 0, taken or after the applied index %d",
				quoteObject(o.Name), o.Recorded, snap.Applied)
		}
		recorded[o.Recorded] = true
		r.addTierObject(o.Name, &tierObject{runs: o.Runs, recorded: o.Recorded})
	}
	return nil
}
