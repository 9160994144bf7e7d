package log

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestInspectAndCut damages a record in the middle of a log of several
// segments: Inspect names it without touching the files, says what lies
// after it, and Cut leaves a log that opens with every record before the
// damage, the rest moved aside, and the repair recorded.
func TestInspectAndCut(t *testing.T) {
	dir := t.TempDir()
	locs := buildLog(t, dir, 300)
	victim := uint64(100)
	loc := locs[victim]
	if loc.last {
		t.Fatal("the victim should not be in the last segment")
	}
	flipByte(t, loc.path, loc.off+frameSize+3)
	before := fileSize(t, loc.path)

	d, err := Inspect(dir, Options{SegmentSize: corruptSegSize})
	if err != nil {
		t.Fatal(err)
	}
	if d == nil || d.File != loc.path || d.Offset != loc.off {
		t.Fatalf("Inspect found %+v, want %s at %d", d, loc.path, loc.off)
	}
	if got := fileSize(t, loc.path); got != before {
		t.Fatalf("Inspect changed %s from %d to %d bytes", loc.path, before, got)
	}
	// Every record after the victim can still be read: one is lost.
	if len(d.After) != 300-int(victim) || d.After[0].Index != victim+1 || d.After[len(d.After)-1].Index != 300 {
		t.Fatalf("after the damage: %d records from %d, want %d..300", len(d.After), d.After[0].Index, victim+1)
	}
	if d.Unreadable != loc.end-loc.off {
		t.Fatalf("unreadable bytes %d, want the damaged record's %d", d.Unreadable, loc.end-loc.off)
	}
	if len(d.Later) == 0 || d.Bytes <= d.Unreadable {
		t.Fatalf("later files %v, bytes to move %d", d.Later, d.Bytes)
	}

	aside := filepath.Join(t.TempDir(), "damaged")
	if err := d.Cut(aside); err != nil {
		t.Fatal(err)
	}
	note, err := Repaired(nil, dir)
	if err != nil || !strings.Contains(note, loc.path) || !strings.Contains(note, aside) {
		t.Fatalf("repair note %q, %v", note, err)
	}
	l := mustOpen(t, dir, Options{SegmentSize: corruptSegSize})
	if l.FirstIndex() != 1 || l.LastIndex() != victim-1 {
		t.Fatalf("the cut log holds %d..%d, want 1..%d", l.FirstIndex(), l.LastIndex(), victim-1)
	}
	recs, err := l.Entries(1, victim, 0)
	if err != nil || len(recs) != int(victim-1) {
		t.Fatalf("read back %d records: %v", len(recs), err)
	}
	mustAppend(t, l, mkrecs(victim, victim+1, 2)) // the log goes on
	mustClose(t, l)
	moved, _ := os.ReadDir(aside)
	if len(moved) != len(d.Later)+1 {
		t.Fatalf("moved aside %d files, want the damaged file's tail and %d later files", len(moved), len(d.Later))
	}
	if err := ClearRepaired(nil, dir); err != nil {
		t.Fatal(err)
	}
	if note, _ := Repaired(nil, dir); note != "" {
		t.Fatalf("repair note %q after ClearRepaired", note)
	}

	// A whole log has no damage.
	if d, err := Inspect(dir, Options{SegmentSize: corruptSegSize}); d != nil || err != nil {
		t.Fatalf("Inspect of a whole log: %+v, %v", d, err)
	}
}
