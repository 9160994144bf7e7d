package shard

import "fmt"

// Limits of the de-duplication table. A shard remembers at most
// MaxDedupEntries dedup ids, each of at most MaxDedupIDBytes bytes, so
// that the table, which lives in every snapshot, stays bounded however
// fast ids arrive: past the bound, the oldest ids are forgotten before
// their window ends.
const (
	MaxDedupEntries = 100_000
	MaxDedupIDBytes = 128
)

// A dedupEntry records that the event with a dedup id got an offset, in a
// Publish of the given time.
type dedupEntry struct {
	id     string
	offset uint64
	time   int64
}

// A Duplicate is an event of a Publish whose dedup id matched one
// published within the window: Slot is its position in the command's
// Events, Offset the offset the earlier event got.
type Duplicate struct {
	Slot   int
	Offset uint64
}

// checkDedup validates the dedup ids of a Publish and finds those that
// repeat an id recorded within the window before c.Time.
func (s *State) checkDedup(c *Command) ([]Duplicate, error) {
	if !hasDedupID(c.DedupIDs) {
		return nil, nil
	}
	if len(c.DedupIDs) != len(c.Events) {
		return nil, fmt.Errorf("%w: %d dedup ids for %d events", ErrInvalidCommand, len(c.DedupIDs), len(c.Events))
	}
	if c.DedupWindow < 0 {
		return nil, fmt.Errorf("%w: negative dedup window %d", ErrInvalidCommand, c.DedupWindow)
	}
	if err := CheckDedupIDs(c.DedupIDs); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidCommand, err)
	}
	if c.DedupWindow == 0 {
		return nil, nil
	}
	var dups []Duplicate
	for i, id := range c.DedupIDs {
		if e, ok := s.dedupLookup(id, c.Time-c.DedupWindow); ok {
			dups = append(dups, Duplicate{Slot: i, Offset: e.offset})
		}
	}
	return dups, nil
}

// CheckDedupIDs checks the dedup ids of one publish, by event position
// ("" for an event without one): none too long, none given twice. The
// error says what is wrong; callers wrap it with their kind.
func CheckDedupIDs(ids []string) error {
	seen := make(map[string]int, len(ids))
	for i, id := range ids {
		if id == "" {
			continue
		}
		if len(id) > MaxDedupIDBytes {
			return fmt.Errorf("event %d's dedup_id has %d bytes, over the limit of %d; use a shorter id, such as a UUID",
				i, len(id), MaxDedupIDBytes)
		}
		if j, ok := seen[id]; ok {
			return fmt.Errorf("events %d and %d have the same dedup_id %q; give each event its own", j, i, id)
		}
		seen[id] = i
	}
	return nil
}

// dedupLookup returns the entry of id if it was recorded at or after
// cutoff. Entries older than that may linger until pruned; they no longer
// match.
func (s *State) dedupLookup(id string, cutoff int64) (dedupEntry, bool) {
	if id == "" {
		return dedupEntry{}, false
	}
	seq, ok := s.dedupIndex[id]
	if !ok {
		return dedupEntry{}, false
	}
	e := s.dedup[seq-s.dedupFirst]
	return e, e.time >= cutoff
}

// recordDedup remembers the dedup ids of events just appended from first
// on, and forgets ids older than the window or beyond MaxDedupEntries.
func (s *State) recordDedup(c *Command, first uint64) {
	if c.DedupWindow <= 0 {
		return
	}
	for i, id := range c.DedupIDs {
		if id != "" {
			s.addDedup(dedupEntry{id: id, offset: first + uint64(i), time: c.Time})
		}
	}
	s.pruneDedup(c.Time - c.DedupWindow)
}

func (s *State) addDedup(e dedupEntry) {
	if s.dedupIndex == nil {
		s.dedupIndex = make(map[string]uint64)
	}
	// A later entry of the same id replaces the earlier one in the index;
	// the earlier stays in the queue, matching nothing, until pruned.
	s.dedupIndex[e.id] = s.dedupFirst + uint64(len(s.dedup))
	s.dedup = append(s.dedup, e)
}

// pruneDedup drops entries from the front of the table while they are
// older than cutoff or the table holds more than MaxDedupEntries. Times
// come from proposers and may step back after a change of leader, so an
// old entry behind a newer one waits for it; dedupLookup ignores it
// meanwhile.
func (s *State) pruneDedup(cutoff int64) {
	k := 0
	for k < len(s.dedup) && (s.dedup[k].time < cutoff || len(s.dedup)-k > MaxDedupEntries) {
		e := s.dedup[k]
		if s.dedupIndex[e.id] == s.dedupFirst+uint64(k) {
			delete(s.dedupIndex, e.id)
		}
		k++
	}
	if k == 0 {
		return
	}
	s.dedupFirst += uint64(k)
	s.dedup = dropFront(s.dedup, &s.dedupDropped, k)
}

// rebuildDedupIndex builds the index of a table read from a snapshot:
// later entries of an id win, as they did when they were added.
func (t *State) rebuildDedupIndex() {
	t.dedupIndex = make(map[string]uint64, len(t.dedup))
	for i, e := range t.dedup {
		t.dedupIndex[e.id] = t.dedupFirst + uint64(i)
	}
}

// DedupIDs returns the number of dedup ids the shard remembers.
func (s *State) DedupIDs() int { return len(s.dedupIndex) }
