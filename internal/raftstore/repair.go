package raftstore

import (
	"fmt"
	"path/filepath"

	hlog "herald/internal/log"
	"herald/internal/vfs"
	"herald/internal/wal"
)

// damageRemedy says what an operator can do about a damaged group.
const damageRemedy = "in a cluster, the node rebuilds this replica from its peers when it starts; " +
	"on a single node, stop it and run herald repair --data-dir with its data directory, which says what is damaged and what cutting it would lose"

// repairNote returns the note of a repair that cut the group's own log or
// the node's WAL, "" if neither was cut since the group last opened.
func repairNote(fsys vfs.FS, dir string, w *wal.WAL) (string, error) {
	note, err := hlog.Repaired(fsys, filepath.Join(dir, LogDir))
	if err != nil {
		return "", fmt.Errorf("read the repair note of %s: %w", dir, err)
	}
	if note == "" {
		note = w.Repaired()
	}
	return note, nil
}

// acceptLoss records a loss the group accepts after a repair.
func (s *Storage) acceptLoss(what string) {
	s.lost = append(s.lost, what)
}

// Lost says what the group accepted to lose when it opened after a
// repair (herald repair --discard-damaged), nil if nothing.
func (s *Storage) Lost() []string { return s.lost }

// finishRepair, after a repair, makes the group's state agree with its
// log and records it durably, then removes the group's own repair note:
// the next open must find nothing to accept. A term older than the
// log's last entry (the state recording the newer term was cut) is
// raised to it, with no vote, as raft requires.
func (s *Storage) finishRepair() error {
	if s.repaired == "" {
		return nil
	}
	if last := s.log.LastIndex(); last > 0 {
		if t, err := s.log.Term(last); err == nil && t > s.hardState.Term {
			s.acceptLoss(fmt.Sprintf("the hard state of term %d is gone: the term is raised to %d, the log's last", s.hardState.Term, t))
			s.hardState.Term, s.hardState.Vote = t, 0
		}
	}
	if len(s.lost) > 0 {
		if err := s.SetHardState(s.hardState, true); err != nil {
			return fmt.Errorf("record the state of %s after its repair: %w", s.dir, err)
		}
		if err := s.wal.Sync(); err != nil {
			return fmt.Errorf("record the state of %s after its repair: %w", s.dir, err)
		}
	}
	if err := hlog.ClearRepaired(s.fs, filepath.Join(s.dir, LogDir)); err != nil {
		return fmt.Errorf("remove the repair note of %s: %w", s.dir, err)
	}
	s.repaired = ""
	return nil
}
