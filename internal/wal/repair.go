package wal

import (
	"encoding/binary"
	"fmt"
	"path/filepath"

	hlog "herald/internal/log"
)

// A Damage is a damaged record that keeps the WAL from opening, and what
// the groups would lose if it and everything after it were cut (Cut).
type Damage struct {
	*hlog.Damage
	// Lost are the operations that could still be read after the damage,
	// in order. What the unreadable bytes held (Damage.Unreadable) cannot
	// be told.
	Lost []LostOp
}

// A LostOp is an operation of a group that a cut would take from the WAL.
// Its entries may already be in the group's own log (written behind,
// or by a checkpoint whose mark was lost): then nothing of them is lost.
type LostOp struct {
	Group   uint64
	Entries []hlog.Record // none for a state
}

// logOptions are the options the WAL opens its log with.
func logOptions(opts Options) hlog.Options {
	return hlog.Options{SegmentSize: opts.SegmentSize, FS: opts.FS, BootID: opts.BootID, Preallocate: true}
}

// Inspect reports the damage that keeps the WAL in dir from opening, nil
// if there is none, without changing its files.
func Inspect(dir string, opts Options) (*Damage, error) {
	d, err := hlog.Inspect(dir, logOptions(opts))
	if d == nil || err != nil {
		return nil, err
	}
	wd := &Damage{Damage: d}
	for _, r := range d.After {
		op, ok := decodeLost(r)
		if ok {
			wd.Lost = append(wd.Lost, op)
		}
	}
	return wd, nil
}

// decodeLost decodes a record read after the damage, as recover does, but
// keeps only what a group would lose; a record that does not decode is
// counted as unreadable by the caller's reading of Damage.
func decodeLost(r hlog.Record) (LostOp, bool) {
	if r.Type&kindMarked != 0 {
		if len(r.Data) == 0 || r.Data[len(r.Data)-1] != endMark {
			return LostOp{}, false
		}
		r.Type &^= kindMarked
		r.Data = r.Data[:len(r.Data)-1]
	}
	if len(r.Data) < 8 {
		return LostOp{}, false
	}
	op := LostOp{Group: binary.LittleEndian.Uint64(r.Data)}
	switch r.Type {
	case kindEntries:
		ents, err := decodeEntries(r.Data[8:])
		if err != nil {
			return LostOp{}, false
		}
		op.Entries = ents
		return op, true
	case kindState:
		return op, true
	}
	return LostOp{}, false // flushed marks and barriers hold no data
}

// Repaired returns what the WAL's repair note says, "" if the WAL was not
// cut since its groups last accepted a loss (see Open and Booted).
func (w *WAL) Repaired() string { return w.repaired }

// clearRepaired, once every group has opened and accepted what a cut
// took, makes their corrected states durable and removes the repair note.
func (w *WAL) clearRepaired() error {
	if err := w.Sync(); err != nil {
		return err
	}
	if err := hlog.ClearRepaired(w.fs, w.log.Dir()); err != nil {
		return fmt.Errorf("remove the repair note of the node's write-ahead log: %w", err)
	}
	w.logger.Info("the groups have accepted what the repair of the write-ahead log discarded", "note", w.repaired)
	w.repaired = ""
	return nil
}

// damageRemedy says what an operator can do about a damaged WAL in dir.
func damageRemedy(dir string) string {
	return fmt.Sprintf("the node cannot start while its write-ahead log is damaged: in a cluster, move its data directory away and start it on an empty one, and it is rebuilt from its peers with nothing lost; on a single node, herald repair --data-dir %s says what is damaged and what cutting it would lose, and --discard-damaged cuts it",
		filepath.Dir(dir))
}
