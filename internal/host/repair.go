package host

import (
	"cmp"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"

	pb "go.etcd.io/raft/v3/raftpb"

	hlog "herald/internal/log"
	"herald/internal/raftstore"
	"herald/internal/vfs"
	"herald/internal/wal"
)

// A Check is what CheckDir found in the data directory of a stopped node:
// its damaged logs, and for each group whether it would open once they
// are cut (Repair), and what it would then accept to lose.
type Check struct {
	dir string
	// WAL is the damage of the node's write-ahead log, nil if it is whole.
	WAL *Damage
	// WALErr says why the write-ahead log would not open even once cut;
	// the groups were then not opened.
	WALErr error
	// Groups are every group's findings, by id (the controller's first).
	Groups []GroupCheck
}

// A GroupCheck is what CheckDir found of one group.
type GroupCheck struct {
	ID   uint64
	Name string
	Dir  string
	// Log is the damage of the group's own log, nil if it is whole.
	Log *Damage
	// Lost says what the group would accept to lose when it opens after
	// the repair (see raftstore's Lost): the entries a cut takes that it
	// had committed, its raft state recorded after the damage.
	Lost []string
	// Err says why the group would not open even after the repair:
	// herald repair cannot mend it.
	Err error
	// needsNote: the group loses something although neither its log nor
	// the WAL is cut (an earlier loss); Repair records that it accepts it.
	needsNote bool
}

// A Damage is a damaged log: the node's write-ahead log, or a group's.
type Damage struct {
	*hlog.Damage
	// Lost is what cutting it takes out of the log, as far as it can be
	// read, in runs of a group's consecutive entries.
	Lost []Lost
}

// A Lost is a run of one group's entries, or a state of it, that a cut
// takes out of a log. Entries that the group's own log also holds (a
// WAL's, written behind or checkpointed) are not lost with it.
type Lost struct {
	Group uint64
	Name  string // "" if not known
	// First and Last are the indices of the run; both 0 for a state.
	First, Last uint64
	// Commands are the commands of the run's normal entries, as the
	// state machine applies them.
	Commands [][]byte
}

// CheckDir checks the data directory dir of a stopped node, changing
// nothing: it finds the damaged logs, then opens every group as the node
// would after they were cut, over a vfs.Overlay. dirGroups gives the ids
// of the groups that have a directory of their own (GroupConfig.Dir), by
// that directory's name; the others are found in groupsDir.
func CheckDir(dir string, dirGroups map[string]uint64) (*Check, error) {
	c := &Check{dir: dir}
	groups, err := listGroups(dir, dirGroups)
	if err != nil {
		return nil, err
	}
	names := make(map[uint64]string)
	for _, g := range groups {
		names[g.ID] = g.Name
	}
	over := vfs.NewOverlay(vfs.OS)
	simAside := filepath.Join(dir, "damaged", "inspected")
	walPath := filepath.Join(dir, walDir)
	if c.WAL, err = inspectWAL(walPath, wal.Options{}, names); err != nil {
		return nil, err
	}
	if c.WAL != nil {
		sim, err := inspectWAL(walPath, wal.Options{FS: over}, names)
		if err != nil {
			return nil, err
		}
		if err := sim.Cut(simAside); err != nil {
			return nil, fmt.Errorf("cut the write-ahead log in memory: %w", err)
		}
	}
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	w, err := wal.Open(walPath, wal.Options{FS: over, Logger: quiet})
	if err != nil {
		c.WALErr = err
	}
	defer func() {
		if w != nil {
			w.Close()
		}
	}()
	for _, g := range groups {
		if err := c.checkGroup(&g, over, w, simAside); err != nil {
			return nil, err
		}
		c.Groups = append(c.Groups, g)
	}
	return c, nil
}

// checkGroup inspects a group's log, cuts it in memory if damaged, and
// opens the group there as the node would.
func (c *Check) checkGroup(g *GroupCheck, over *vfs.Overlay, w *wal.WAL, simAside string) error {
	logPath := filepath.Join(g.Dir, raftstore.LogDir)
	opts := hlog.Options{UnsyncedElsewhere: true, ElsewhereNoTear: "inspected offline"}
	if w != nil {
		opts.ElsewhereNoTear = w.NoTear()
	}
	ld, err := hlog.Inspect(logPath, opts)
	if err != nil {
		return err
	}
	if ld != nil {
		g.Log = &Damage{Damage: ld, Lost: addLost(nil, g.ID, g.Name, ld.After)}
		opts.FS = over
		sim, err := hlog.Inspect(logPath, opts)
		if err != nil || sim == nil {
			return fmt.Errorf("inspect %s again in memory: %v", logPath, err)
		}
		if err := sim.Cut(filepath.Join(simAside, g.Name)); err != nil {
			return fmt.Errorf("cut %s in memory: %w", logPath, err)
		}
	}
	if w == nil {
		return nil // the WAL would not open: the node does not start
	}
	// Open as after a repair, so that Lost says what it would accept; a
	// group that loses nothing accepts nothing.
	if err := hlog.WriteRepaired(over, logPath, "inspected"); err != nil {
		return err
	}
	st, err := raftstore.Open(g.Dir, raftstore.Options{FS: over, WAL: w, Group: g.ID})
	if err != nil {
		g.Err = err
		return nil
	}
	g.Lost = st.Lost()
	g.needsNote = len(g.Lost) > 0 && g.Log == nil && c.WAL == nil
	return st.Close()
}

// inspectWAL inspects the WAL at path, naming the groups its lost records
// belong to.
func inspectWAL(path string, opts wal.Options, names map[uint64]string) (*Damage, error) {
	wd, err := wal.Inspect(path, opts)
	if wd == nil || err != nil {
		return nil, err
	}
	d := &Damage{Damage: wd.Damage}
	for _, op := range wd.Lost {
		d.Lost = addLost(d.Lost, op.Group, names[op.Group], op.Entries)
	}
	return d, nil
}

// Repair cuts every damaged log of the check's data directory, moving
// what follows each damage into a directory under aside, and records, for
// each group that loses acknowledged entries, that it is to accept that
// at its next open. Groups with Err are left as they are.
func (c *Check) Repair(aside string) error {
	if c.WAL != nil {
		if err := c.WAL.Cut(c.cutAside(aside, c.WAL)); err != nil {
			return err
		}
	}
	for _, g := range c.Groups {
		switch {
		case g.Log != nil:
			if err := g.Log.Cut(c.cutAside(aside, g.Log)); err != nil {
				return err
			}
		case g.needsNote:
			note := "the group lost acknowledged entries: " + strings.Join(g.Lost, "; ")
			if err := hlog.WriteRepaired(nil, filepath.Join(g.Dir, raftstore.LogDir), note); err != nil {
				return err
			}
		}
	}
	return nil
}

// cutAside is where a cut of d moves what it takes: under aside, at the
// damaged log's path within the data directory.
func (c *Check) cutAside(aside string, d *Damage) string {
	rel, err := filepath.Rel(c.dir, d.Dir())
	if err != nil {
		rel = filepath.Base(d.Dir())
	}
	return filepath.Join(aside, rel)
}

// addLost adds a group's records to runs, starting a new run where they
// do not continue the last one.
func addLost(runs []Lost, group uint64, name string, recs []hlog.Record) []Lost {
	if len(recs) == 0 {
		return append(runs, Lost{Group: group, Name: name})
	}
	for _, r := range recs {
		// The group's last run, which the WAL may have interleaved with
		// other groups' records.
		i := lastRun(runs, group)
		if i < 0 || runs[i].Last == 0 || runs[i].Last+1 != r.Index {
			runs = append(runs, Lost{Group: group, Name: name, First: r.Index})
			i = len(runs) - 1
		}
		runs[i].Last = r.Index
		if pb.EntryType(r.Type) == pb.EntryNormal {
			if _, cmd := decodeEnvelope(r.Data); len(cmd) > 0 {
				runs[i].Commands = append(runs[i].Commands, cmd)
			}
		}
	}
	return runs
}

// lastRun returns the index of group's last run in runs, -1 if none.
func lastRun(runs []Lost, group uint64) int {
	for i, l := range slices.Backward(runs) {
		if l.Group == group {
			return i
		}
	}
	return -1
}

// listGroups lists the groups of the data directory dir: those in
// groupsDir, and those in a directory of their own named in dirGroups.
func listGroups(dir string, dirGroups map[string]uint64) ([]GroupCheck, error) {
	var out []GroupCheck
	for name, id := range dirGroups {
		if st, err := os.Stat(filepath.Join(dir, name, raftstore.LogDir)); err == nil && st.IsDir() {
			out = append(out, GroupCheck{ID: id, Name: name, Dir: filepath.Join(dir, name)})
		}
	}
	entries, err := os.ReadDir(filepath.Join(dir, groupsDir))
	if err != nil && !os.IsNotExist(err) {
		return nil, fmt.Errorf("list the groups of %s: %w", dir, err)
	}
	for _, e := range entries {
		id, ok := groupDirID(e.Name())
		if !ok || !e.IsDir() || strings.HasSuffix(e.Name(), damagedSuffix) {
			continue // a replica moved aside to be rebuilt is no group
		}
		_, name, _ := strings.Cut(e.Name(), "-")
		out = append(out, GroupCheck{ID: id, Name: name, Dir: filepath.Join(dir, groupsDir, e.Name())})
	}
	slices.SortFunc(out, func(a, b GroupCheck) int { return cmp.Compare(a.ID, b.ID) })
	return out, nil
}
