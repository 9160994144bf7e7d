package log

import (
	"errors"
	"fmt"
	"path/filepath"

	"herald/internal/vfs"
)

// stateFile records who last wrote the log and whether it was closed
// cleanly. Recovery reads it to know whether a power loss can have torn
// an unsynced write (see scanSegment): only then may a damaged final
// record be cut.
const (
	stateFile  = "state"
	stateMagic = "HLST"
)

// logState is the content of the state file.
type logState struct {
	bootID string // the boot of the machine that last opened the log for writing
	clean  bool   // closed with everything synced; nothing written since
}

func (s logState) encode() []byte {
	b := []byte{0}
	if s.clean {
		b[0] = 1
	}
	return vfs.Frame(stateMagic, append(b, s.bootID...))
}

// readState loads the state file and returns why no write of the log can
// have been torn by a power loss, or "" if one can have been. ok is false
// when there is no usable state file (a log written before herald kept
// one, or a damaged one); nothing is known then, and recovery must not
// guess, so it is treated as if no tear could have happened: a damaged
// final record is reported, never cut. The state file holds no events, so
// its own damage costs nothing else; it is rewritten at the next write.
func (l *Log) readState() (st logState, ok bool, noTear string, err error) {
	path := filepath.Join(l.dir, stateFile)
	b, err := vfs.ReadFramed(l.fs, path, stateMagic)
	var d *vfs.DamagedError
	switch {
	case errors.As(err, &d):
		return logState{}, false, fmt.Sprintf("the log's state file %s is damaged (%s), so a torn write cannot be told from damage", path, d.Reason), nil
	case err != nil:
		return logState{}, false, "", fmt.Errorf("open log %s: %w", l.dir, err)
	case b == nil:
		return logState{}, false, "the log has no state file to tell a torn write from damage", nil
	case len(b) == 0 || b[0] > 1:
		return logState{}, false, fmt.Sprintf("the log's state file %s holds an unknown state", path), nil
	}
	st = logState{clean: b[0] == 1, bootID: string(b[1:])}
	return st, true, noTearReason(st, l.bootID), nil
}

// noTearReason says why no write of a log in state st can have been torn
// by a power loss, or "" if one can have been.
func noTearReason(st logState, bootID string) string {
	switch {
	case st.clean:
		return "the log was closed cleanly"
	case bootID != "" && st.bootID == bootID:
		return "the machine has not restarted since the log was last written (only a power loss or a kernel crash tears a write)"
	}
	return ""
}

// markWriting records, before the first change to the log's files since
// it was opened, that this boot is writing it and it is not clean. A log
// whose writes another log holds too records nothing: that log's state
// says the same for both (Options.ElsewhereNoTear). The caller holds wmu.
func (l *Log) markWriting() error {
	if l.covered {
		return nil
	}
	if err := l.setState(logState{bootID: l.bootID}); err != nil {
		return fmt.Errorf("record the log's state: %w", err)
	}
	return nil
}

// markClean records that everything is synced and the log is closed. The
// caller holds wmu.
func (l *Log) markClean() error {
	if l.stateOK && l.state.clean {
		return nil // never written since it was opened: nothing to record, whichever boot closed it
	}
	if err := l.setState(logState{bootID: l.bootID, clean: true}); err != nil {
		return fmt.Errorf("record that the log closed cleanly: %w", err)
	}
	return nil
}

// setState replaces the state file with want unless it already holds it.
func (l *Log) setState(want logState) error {
	if l.stateOK && l.state == want {
		return nil
	}
	if err := vfs.WriteFileAtomic(l.fs, l.dir, stateFile, want.encode()); err != nil {
		return err
	}
	l.state, l.stateOK = want, true
	return nil
}
