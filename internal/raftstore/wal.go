package raftstore

import (
	"errors"
	"fmt"
	"path/filepath"

	hlog "herald/internal/log"
	"herald/internal/wal"
)

// replay applies what the node's WAL held for the group at open over the
// group's log, in the order the group did it, and flushes the log. The log
// holds every entry written before the WAL's last checkpoint and at least
// a prefix of what followed (only an unsynced tail can be lost), so
// replaying the operations in order rebuilds the log as it was. An
// operation may find the log changed by a later one that was durable at
// once (an overwrite truncates at once): parts below the log's first index
// were compacted after the fact and are skipped, and an operation that
// would leave a gap is skipped because a later operation, also replayed,
// overwrote the entries it followed; entries the log already holds are
// not written again. It returns the last hard state the
// WAL recorded for the group, nil if none.
func (s *Storage) replay() (state []byte, err error) {
	ops := s.wal.Recovered(s.group)
	if err := s.checkCutCovered(ops); err != nil {
		return nil, err
	}
	if len(ops) == 0 {
		return nil, nil
	}
	appended := false
	for _, op := range ops {
		if len(op.Entries) == 0 {
			state = op.State
			continue
		}
		ents := op.Entries
		if first := s.log.FirstIndex(); ents[0].Index < first {
			skip := first - ents[0].Index
			if skip >= uint64(len(ents)) {
				continue
			}
			ents = ents[skip:]
		}
		// An entry the log holds with the same term is the same entry
		// (Raft's log matching): appending it again would truncate and
		// resync the log for nothing, which is what every group did when
		// a node was killed before the checkpoint after its start.
		for len(ents) > 0 && ents[0].Index <= s.log.LastIndex() {
			if t, err := s.log.Term(ents[0].Index); err != nil || t != ents[0].Term {
				break
			}
			ents = ents[1:]
		}
		if len(ents) == 0 || ents[0].Index > s.log.LastIndex()+1 {
			continue
		}
		appended = true
		if err := s.log.Append(ents); err != nil && !errors.Is(err, hlog.ErrCompacted) {
			return nil, fmt.Errorf("replay the node's write-ahead log into %s at index %d: %w", s.dir, ents[0].Index, err)
		}
	}
	if appended {
		if err := s.log.Sync(); err != nil {
			return nil, fmt.Errorf("replay the node's write-ahead log into %s: %w", s.dir, err)
		}
	}
	return state, nil
}

// checkCutCovered fails if the log's recovery cut records that ops do not
// bring back: some operation must append at or below the cut. The WAL
// holds only what was not yet flushed here, so a cut below all of it is
// lost data, named, not a torn write.
func (s *Storage) checkCutCovered(ops []wal.Op) error {
	from, cut := s.log.CutFrom()
	if !cut {
		return nil
	}
	covers := false
	for _, op := range ops {
		covers = covers || (len(op.Entries) > 0 && op.Entries[0].Index <= from)
	}
	if !covers && s.repaired != "" {
		s.acceptLoss(fmt.Sprintf("the entries from index %d on, cut from the log after a power loss, are gone", from))
		return nil
	}
	if !covers {
		return Damaged(fmt.Errorf("the log in %s is damaged: recovery found a bad record at index %d after a power loss, and the node's write-ahead log does not hold the entries from there on; %s",
			filepath.Join(s.dir, LogDir), from, damageRemedy))
	}
	return nil
}

// barrier precedes a change that replaces the group's log: the log is
// flushed, then the WAL records that replay starts after this point, so
// that older entries never come back over the new log.
func (s *Storage) barrier() error {
	if err := s.Flush(); err != nil {
		return fmt.Errorf("flush %s before replacing its log: %w", s.dir, err)
	}
	return s.wal.Barrier(s.group)
}
