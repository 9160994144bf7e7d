// Package wal is a node's write-ahead log: every Raft group on the node
// appends its entries to it, so that one write and one fdatasync make the
// appends of all groups durable, however many groups there are (appends
// are queued, and written by the Sync that leads the group commit).
//
// A group writes each batch of entries twice: to its own segment log
// (internal/log), where it is read back by index and deleted by whole
// segments, and to the WAL. Only the WAL is synced on the hot path; a
// group's segment log is synced later, off the critical path, by a
// checkpoint, after which the WAL files that the checkpoint covers are
// deleted. At open, what the WAL holds is handed back to each group
// (Recovered), which replays it over its segment log.
//
// The WAL is itself a record log of internal/log, with its crash safety:
// every record is checksummed, and only a record that cannot have been
// acknowledged (a torn write the log can prove torn) is cut at recovery;
// anything else is a *log.CorruptionError naming the file and offset. A
// record is one operation of one group, in the order the group did it:
//
//   - entries: a run of consecutive Raft entries, appended at their
//     index (overwriting a conflicting tail, as the segment log does);
//   - barrier: everything the group wrote before it is durable in the
//     group's own files, which are about to change destructively (a
//     snapshot replacing the log); replay starts after the last barrier.
//   - flushed: a checkpoint (or a clean close) made every record up to
//     the one it names durable in the groups' own files; replay skips
//     them. Its group is 0.
//   - state: a small state of the group that replaces its previous one
//     (its Raft hard state: term, vote, commit), opaque to the WAL. A
//     group's election then costs no file of its own rewritten and
//     fsynced: the record is durable with the WAL's next fdatasync. The
//     WAL is where the state lives from then on: a checkpoint about to
//     delete the WAL file holding a group's latest state writes it again
//     first (so an idle node's checkpoints carry nothing, and a node
//     whose WAL rolls carries a record per group, not a file per group).
//
// Record data: group (8 bytes, little endian), then for entries the index
// of the first entry (uvarint) and, per entry, its term (uvarint), type (1
// byte), data length (uvarint) and data; for flushed, the index of the
// last record it covers (8 bytes); for state, the state's bytes. Then a
// mark byte, 0xff, flagged in the record's type (kindMarked): the WAL's
// log is written over zeroed files (log.Options.Preallocate), which needs
// every record to end with a nonzero byte. Records written before the
// mark existed have neither, and are still read.
package wal

import (
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"slices"
	"sync"
	"time"

	"golang.org/x/sync/errgroup"

	hlog "herald/internal/log"
	"herald/internal/vfs"
)

// The kinds of record, kept in the log record's Type.
const (
	kindEntries uint8 = 1
	kindBarrier uint8 = 2
	kindFlushed uint8 = 3
	kindState   uint8 = 4

	// kindMarked, added to a kind, says the record's data ends with
	// endMark. The WAL's log is preallocated, and needs every record to
	// end with a nonzero byte (hlog.Options.Preallocate); records written
	// before it was have no mark.
	kindMarked uint8 = 0x10
	endMark    byte  = 0xff
)

// flushParallelism bounds the groups a checkpoint flushes at once: each
// flush is an fdatasync, and a disk serves several at a time.
const flushParallelism = 16

// walTerm is the term of every WAL record: the WAL's own log has no terms.
const walTerm = 1

// Options configure a WAL.
type Options struct {
	SegmentSize int64  // size of each WAL file; 0 means the log's default (64 MiB)
	FS          vfs.FS // nil means vfs.OS
	BootID      string // the machine's boot, for torn-write recovery; "" means the kernel's
	// CheckpointInterval is how often a checkpoint runs once a sixteenth
	// of a WAL file has been appended since the last one; 0 means 10 s. A
	// checkpoint also runs whenever a WAL file fills.
	CheckpointInterval time.Duration
	Logger             *slog.Logger // slog.Default()
}

// Flusher is a group's own storage: Flush makes everything the group has
// appended durable in its own log. Its latest state stays in the WAL,
// which carries it forward across checkpoints.
type Flusher interface {
	Flush() error
}

// state is the latest state of a group and the index of the record that
// holds it.
type state struct {
	data []byte
	at   uint64
}

// Op is one recovered operation of a group: a run of consecutive entries
// appended at the first one's index, or, if Entries is empty, a state
// (SetState) replacing the group's previous one.
type Op struct {
	Entries []hlog.Record
	State   []byte
	at      uint64 // the WAL record's index
}

// WAL is a node's write-ahead log. It is safe for concurrent use.
type WAL struct {
	log      *hlog.Log
	fs       vfs.FS // of the log; nil means vfs.OS
	repaired string // see Repaired; cleared by Booted
	segSize  int64
	interval time.Duration
	logger   *slog.Logger

	ckptMu sync.Mutex // held through a checkpoint

	// wmu serializes writes of what was appended to the log, in the
	// order of the records' indices; it is taken before mu.
	wmu       sync.Mutex
	spareEnds []pendingRecord // reused by the next batch appended; guarded by wmu
	spareBuf  []byte          // reused by the next batch appended; guarded by wmu
	recs      []hlog.Record   // the records of the batch being written; guarded by wmu

	// smu guards the group commit of Sync; it is taken before mu.
	smu     sync.Mutex
	scond   *sync.Cond // signalled when a leading Sync finishes
	syncing bool       // a Sync leads
	synced  uint64     // the records up to this index are durable

	mu        sync.Mutex
	next      uint64             // index of the next record
	ends      []pendingRecord    // records appended and not yet written, the last one's index next-1
	pbuf      []byte             // their data, one after the other
	failed    error              // a write of appended records failed: nothing more is appended
	dirty     map[uint64]Flusher // groups with entries that only the WAL holds
	sinceCkpt int64              // bytes appended since the last checkpoint started
	recovered map[uint64][]Op    // what Open found, by group, until taken
	states    map[uint64]state   // each group's latest state (SetState), and where it is
	booted    bool               // unclaimed recovered ops were dropped; checkpoints may delete

	kick    chan struct{}
	stop    chan struct{}
	done    chan struct{}
	closing bool // Close has begun
	closed  bool // no more appends
}

// A pendingRecord is a record appended and not yet written to the log:
// its kind, and where its data ends in WAL.pbuf (it starts where the
// previous record's ends).
type pendingRecord struct {
	kind uint8
	end  int
}

// Open opens (creating if needed) the WAL in dir and reads what it holds,
// to be taken by each group with Recovered. Checkpoints delete nothing
// until Booted says that every group that will claim its entries has.
func Open(dir string, opts Options) (*WAL, error) {
	l, err := hlog.Open(dir, logOptions(opts))
	if err != nil {
		return nil, fmt.Errorf("open the node's write-ahead log: %w; %s", err, damageRemedy(dir))
	}
	repaired, err := hlog.Repaired(opts.FS, dir)
	if err != nil {
		l.Close()
		return nil, fmt.Errorf("open the node's write-ahead log: read its repair note: %w", err)
	}
	w := &WAL{
		log:       l,
		fs:        opts.FS,
		repaired:  repaired,
		segSize:   opts.SegmentSize,
		interval:  opts.CheckpointInterval,
		logger:    opts.Logger,
		next:      l.LastIndex() + 1,
		synced:    l.LastIndex(),
		dirty:     make(map[uint64]Flusher),
		recovered: make(map[uint64][]Op),
		states:    make(map[uint64]state),
		kick:      make(chan struct{}, 1),
		stop:      make(chan struct{}),
		done:      make(chan struct{}),
	}
	w.scond = sync.NewCond(&w.smu)
	if w.segSize <= 0 {
		w.segSize = hlog.DefaultSegmentSize
	}
	if w.interval <= 0 {
		w.interval = 10 * time.Second
	}
	if w.logger == nil {
		w.logger = slog.Default()
	}
	if err := w.read(); err != nil {
		l.Close()
		return nil, err
	}
	go w.run()
	return w, nil
}

// read decodes every record into w.recovered.
func (w *WAL) read() error {
	const chunk = 16 << 20
	for lo, last := w.log.FirstIndex(), w.log.LastIndex(); lo <= last; {
		recs, err := w.log.Entries(lo, last+1, chunk)
		if err != nil {
			return fmt.Errorf("read the node's write-ahead log at record %d: %w", lo, err)
		}
		for _, r := range recs {
			if err := w.recover(r); err != nil {
				return fmt.Errorf("the node's write-ahead log in %s is damaged at record %d: %w; %s",
					w.log.Dir(), r.Index, err, damageRemedy(w.log.Dir()))
			}
		}
		lo = recs[len(recs)-1].Index + 1
	}
	return nil
}

func (w *WAL) recover(r hlog.Record) error {
	if r.Type&kindMarked != 0 {
		if len(r.Data) == 0 || r.Data[len(r.Data)-1] != endMark {
			return errors.New("record lacks its end mark")
		}
		r.Type &^= kindMarked
		r.Data = r.Data[:len(r.Data)-1]
	}
	if len(r.Data) < 8 {
		return fmt.Errorf("record of %d bytes has no group", len(r.Data))
	}
	group := binary.LittleEndian.Uint64(r.Data)
	switch r.Type {
	case kindFlushed:
		if len(r.Data) != 16 {
			return fmt.Errorf("flushed record of %d bytes", len(r.Data))
		}
		w.dropFlushed(binary.LittleEndian.Uint64(r.Data[8:]))
		return nil
	case kindBarrier:
		w.recovered[group] = nil
		return nil
	case kindEntries:
		ents, err := decodeEntries(r.Data[8:])
		if err != nil {
			return err
		}
		w.recovered[group] = append(w.recovered[group], Op{Entries: ents, at: r.Index})
		return nil
	case kindState:
		if len(r.Data) == 8 {
			return errors.New("state record holds no state")
		}
		w.recovered[group] = append(w.recovered[group], Op{State: r.Data[8:], at: r.Index})
		return nil
	}
	return fmt.Errorf("unknown record kind %d", r.Type)
}

// dropFlushed forgets the recovered entries of records up to covered:
// they are in the groups' own logs. States are kept: the WAL is where
// they live.
func (w *WAL) dropFlushed(covered uint64) {
	for group, ops := range w.recovered {
		ops = slices.DeleteFunc(ops, func(op Op) bool { return op.at <= covered && len(op.Entries) > 0 })
		if len(ops) == 0 {
			delete(w.recovered, group)
		} else {
			w.recovered[group] = ops
		}
	}
}

// Recovered returns, once, what the WAL held for group when it was opened,
// after the group's last barrier, in order. The group replays it over its
// segment log and makes that durable (Flush) before it appends anything.
// The group's latest state stays the WAL's to keep.
func (w *WAL) Recovered(group uint64) []Op {
	w.mu.Lock()
	defer w.mu.Unlock()
	ops := w.recovered[group]
	delete(w.recovered, group)
	for i := len(ops) - 1; i >= 0; i-- {
		if len(ops[i].Entries) == 0 {
			w.states[group] = state{data: slices.Clone(ops[i].State), at: ops[i].at}
			break
		}
	}
	return ops
}

// RecoveredGroups lists the groups with recovered operations not yet
// taken.
func (w *WAL) RecoveredGroups() []uint64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	ids := make([]uint64, 0, len(w.recovered))
	for id, ops := range w.recovered {
		if len(ops) > 0 {
			ids = append(ids, id)
		}
	}
	return ids
}

// Booted says that every group that had entries in the WAL has opened and
// taken them (Recovered): what is left belongs to groups that no longer
// exist on the node, and checkpoints may now delete the WAL files that
// hold it.
//
// After a repair (see Repaired), every group has accepted its loss by then
// and recorded its corrected state: Booted makes that durable and removes
// the repair note.
func (w *WAL) Booted() error {
	w.mu.Lock()
	w.recovered = nil
	w.booted = true
	w.mu.Unlock()
	if w.repaired != "" {
		return w.clearRepaired()
	}
	return nil
}

// Append records ents, consecutive entries of group appended to its
// segment log, which f flushes. They are durable once Sync returns.
func (w *WAL) Append(group uint64, ents []hlog.Record, f Flusher) error {
	if len(ents) == 0 {
		return nil
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	err := w.appendLocked(kindEntries, func(b []byte) []byte { return encodeEntries(b, group, ents) })
	if err != nil {
		return fmt.Errorf("append %d entries of group %d at index %d: %w", len(ents), group, ents[0].Index, err)
	}
	w.dirty[group] = f
	return nil
}

// SetState records data as the state of group, replacing its previous
// one. It is durable once Sync returns, and ordered with the group's
// entries: a recovery that finds it finds every entry appended before
// it. The WAL keeps it until a later SetState or Remove, writing it again
// before it deletes the file holding it.
func (w *WAL) SetState(group uint64, data []byte) error {
	if len(data) == 0 {
		return fmt.Errorf("record the state of group %d: the state is empty", group)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if err := w.appendStateLocked(group, slices.Clone(data)); err != nil {
		return fmt.Errorf("record the state of group %d: %w", group, err)
	}
	return nil
}

func (w *WAL) appendStateLocked(group uint64, data []byte) error {
	err := w.appendLocked(kindState, func(b []byte) []byte {
		return append(binary.LittleEndian.AppendUint64(b, group), data...)
	})
	if err != nil {
		return err
	}
	w.states[group] = state{data: data, at: w.next - 1}
	return nil
}

// Remove forgets group, whose files are deleted: its state is not kept
// any more, and nothing of it is flushed.
func (w *WAL) Remove(group uint64) {
	w.mu.Lock()
	delete(w.dirty, group)
	delete(w.states, group)
	w.mu.Unlock()
}

// Barrier durably records that everything group wrote so far is durable
// in its own files, which the caller has flushed: replay of the group
// starts after it. The caller is about to replace the group's log (a
// snapshot install), after which replaying older entries would bring back
// a tail the snapshot removed.
func (w *WAL) Barrier(group uint64) error {
	w.mu.Lock()
	err := w.appendLocked(kindBarrier, func(b []byte) []byte { return binary.LittleEndian.AppendUint64(b, group) })
	delete(w.dirty, group)
	if st, ok := w.states[group]; ok && err == nil {
		// Replay starts after the barrier: the state must follow it.
		err = w.appendStateLocked(group, st.data)
	}
	w.mu.Unlock()
	if err != nil {
		return fmt.Errorf("write a barrier for group %d: %w", group, err)
	}
	return w.Sync()
}

// Forget drops group from the groups the next checkpoint flushes: its
// storage has flushed and closed.
func (w *WAL) Forget(group uint64) {
	w.mu.Lock()
	delete(w.dirty, group)
	w.mu.Unlock()
}

// appendLocked queues a record of kind: encode appends its data (the
// group first) to the queue's buffer, and appendLocked ends it with
// endMark.
func (w *WAL) appendLocked(kind uint8, encode func(b []byte) []byte) error {
	if w.closed {
		return hlog.ErrClosed
	}
	if w.failed != nil {
		return w.failed
	}
	start := len(w.pbuf)
	w.pbuf = append(encode(w.pbuf), endMark)
	w.ends = append(w.ends, pendingRecord{kind: kind, end: len(w.pbuf)})
	w.next++
	w.sinceCkpt += int64(len(w.pbuf) - start)
	if w.sinceCkpt >= w.segSize {
		select {
		case w.kick <- struct{}{}:
		default:
		}
	}
	return nil
}

// Sync makes every record appended before the call durable.
//
// Appends only queue their records, and Syncs are group-committed: one
// caller at a time leads, writing every record queued so far in one
// write and making them durable with one fdatasync, while those arriving
// meanwhile wait for it and then for the next leader, if it did not cover
// them. Before it writes, a leader yields the processor once: groups
// whose Readies are being persisted at the same moment then queue their
// records first and share its write and fdatasync, instead of making one
// write each and syncing back to back.
func (w *WAL) Sync() error {
	w.mu.Lock()
	target := w.next - 1
	w.mu.Unlock()
	w.smu.Lock()
	for w.syncing && w.synced < target {
		w.scond.Wait()
	}
	if w.synced >= target {
		w.smu.Unlock()
		return nil
	}
	w.syncing = true
	w.smu.Unlock()

	runtime.Gosched()
	last, err := w.write()
	if err == nil {
		if err = w.log.Sync(); err != nil {
			err = fmt.Errorf("sync the node's write-ahead log: %w", err)
		}
	}
	w.smu.Lock()
	w.syncing = false
	if err == nil {
		w.synced = max(w.synced, last)
	}
	w.scond.Broadcast()
	w.smu.Unlock()
	return err
}

// write writes the records appended and not yet written to the log, and
// returns the index of the last record appended: every record up to it is
// in the log's files. If the disk is full, the records stay queued for
// the next Sync. If the write fails otherwise, the WAL fails: the records
// were other groups' too, and their Syncs, and every later Append, report
// the failure.
func (w *WAL) write() (last uint64, err error) {
	w.wmu.Lock()
	defer w.wmu.Unlock()
	w.mu.Lock()
	last = w.next - 1
	if w.failed != nil {
		w.mu.Unlock()
		return 0, w.failed
	}
	if len(w.ends) == 0 {
		w.mu.Unlock()
		return last, nil
	}
	ends, buf := w.ends, w.pbuf
	first := w.next - uint64(len(ends))
	// The spares become the next batch's: their last batch is written.
	w.ends, w.pbuf = w.spareEnds[:0], w.spareBuf[:0]
	w.spareEnds, w.spareBuf = nil, nil
	w.mu.Unlock()

	recs := w.recs[:0]
	start := 0
	for i, r := range ends {
		recs = append(recs, hlog.Record{Index: first + uint64(i), Term: walTerm, Type: r.kind | kindMarked, Data: buf[start:r.end]})
		start = r.end
	}
	err = w.log.Append(recs)
	clear(recs)
	w.recs = recs[:0]
	if err != nil && vfs.IsNoSpace(err) && w.log.LastIndex() == first-1 {
		// The log rolled the write back: the records go back to the head
		// of the queue, keeping their indices, and the next Sync, once
		// the disk has space, writes them.
		w.requeue(ends, buf)
		return 0, fmt.Errorf("write records %d to %d to the node's write-ahead log: %w; they stay queued, and are written once the disk has space", first, first+uint64(len(ends))-1, err)
	}
	w.spareEnds = ends[:0]
	if cap(buf) <= hlog.MaxRetainedBuf {
		w.spareBuf = buf[:0]
	} else {
		w.spareBuf = nil
	}
	if err != nil {
		err = fmt.Errorf("write records %d to %d to the node's write-ahead log: %w; no later write is acknowledged: restart the node to reopen it", first, first+uint64(len(ends))-1, err)
		w.mu.Lock()
		w.failed = err
		w.mu.Unlock()
		return 0, err
	}
	return last, nil
}

// requeue puts records whose write failed back ahead of those appended
// since. The caller holds wmu.
func (w *WAL) requeue(ends []pendingRecord, buf []byte) {
	w.mu.Lock()
	defer w.mu.Unlock()
	merged := make([]pendingRecord, 0, len(ends)+len(w.ends))
	merged = append(merged, ends...)
	for _, r := range w.ends {
		merged = append(merged, pendingRecord{kind: r.kind, end: r.end + len(buf)})
	}
	w.ends, w.pbuf = merged, append(buf, w.pbuf...)
}

// NoTear says why no write of the WAL, and so of any group's log it
// holds, can have been torn by a power loss before it opened (it was
// closed cleanly, or the machine has not restarted since it was last
// written), "" if one can (see log.Options.ElsewhereNoTear).
func (w *WAL) NoTear() string { return w.log.NoTear() }

// SyncCount is the number of fdatasyncs the WAL has made.
func (w *WAL) SyncCount() uint64 { return w.log.SyncCount() }

// Files is the number of WAL files on disk.
func (w *WAL) Files() int { return w.log.Segments() }

// run checkpoints when a WAL file has filled, and every interval once
// there is enough to checkpoint (see due) or the last checkpoint failed.
func (w *WAL) run() {
	defer close(w.done)
	t := time.NewTicker(w.interval)
	defer t.Stop()
	failed := false
	for {
		select {
		case <-w.stop:
			return
		case <-w.kick:
		case <-t.C:
			if !failed && !w.due() {
				continue
			}
		}
		err := w.Checkpoint()
		if failed = err != nil; failed {
			w.logger.Error("write-ahead log checkpoint failed; its files are kept and it is retried", "err", err)
		}
	}
}

// due reports whether a timed checkpoint is worth its cost: a sixteenth of
// a WAL file appended since the last one. A checkpoint syncs the log of
// every group that appended meanwhile, one fdatasync each, and what it
// buys is a shorter replay after a power loss; the WAL already holds the
// entries durably. A node that has just started, whose every group wrote
// its election entry and nothing more, would otherwise sync thousands of
// logs while idle, for a replay of a few hundred kilobytes.
func (w *WAL) due() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.sinceCkpt >= w.segSize/16
}

// Checkpoint flushes every group whose entries only the WAL holds, then
// deletes the WAL files all of whose records it covered. Until Booted, it
// flushes but deletes nothing.
func (w *WAL) Checkpoint() error {
	// One at a time: a second checkpoint would see none of the groups the
	// first is still flushing and delete files they need.
	w.ckptMu.Lock()
	defer w.ckptMu.Unlock()
	w.mu.Lock()
	covered := w.next - 1
	dirty := w.dirty
	w.dirty = make(map[uint64]Flusher, len(dirty))
	w.sinceCkpt = 0
	booted := w.booted
	w.mu.Unlock()
	// What covered covers must be in the log's files before PrefixEnd
	// looks at them (carryStates).
	if _, err := w.write(); err != nil {
		return err
	}

	var (
		errMu sync.Mutex
		errs  []error
		eg    errgroup.Group
	)
	eg.SetLimit(flushParallelism)
	for group, f := range dirty {
		eg.Go(func() error {
			err := f.Flush()
			if err == nil {
				return nil
			}
			errMu.Lock()
			errs = append(errs, fmt.Errorf("flush group %d: %w", group, err))
			errMu.Unlock()
			w.mu.Lock()
			if _, again := w.dirty[group]; !again {
				w.dirty[group] = f
			}
			w.mu.Unlock()
			return nil
		})
	}
	eg.Wait()
	// Before Booted, recovered operations may not be replayed yet: they
	// are durable nowhere else, so nothing is marked or deleted.
	if len(errs) > 0 || !booted || covered == 0 {
		return errors.Join(errs...)
	}
	keep, err := w.carryStates(covered)
	if err != nil {
		return err
	}
	if err := w.markFlushed(covered); err != nil {
		return err
	}
	// Below keep, not below covered+1: the records just written may have
	// started a WAL file, after which the file before it would count as
	// covered too, states and all.
	if _, err := w.log.DeletePrefix(keep); err != nil {
		return fmt.Errorf("delete checkpointed write-ahead log files: %w", err)
	}
	return nil
}

// carryStates writes again, durably, the states whose records are in the
// WAL files that deleting what covered covers would delete, and returns
// the index of the first record of the files it kept: the checkpoint
// deletes the files below it, and no others.
func (w *WAL) carryStates(covered uint64) (keep uint64, err error) {
	keep = w.log.PrefixEnd(covered + 1)
	w.mu.Lock()
	carried := 0
	for group, st := range w.states {
		if st.at >= keep {
			continue
		}
		if err := w.appendStateLocked(group, st.data); err != nil {
			w.mu.Unlock()
			return 0, fmt.Errorf("carry the state of group %d to a newer write-ahead log file: %w", group, err)
		}
		carried++
	}
	w.mu.Unlock()
	if carried == 0 {
		return keep, nil
	}
	return keep, w.Sync()
}

// markFlushed records that every record up to covered is durable in the
// groups' own files, so that a restart does not replay them. It needs no
// sync of its own: without it, a restart replays more than it must.
func (w *WAL) markFlushed(covered uint64) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	err := w.appendLocked(kindFlushed, func(b []byte) []byte {
		return binary.LittleEndian.AppendUint64(binary.LittleEndian.AppendUint64(b, 0), covered) // group 0
	})
	if err != nil {
		return fmt.Errorf("mark the write-ahead log flushed up to record %d: %w", covered, err)
	}
	return nil
}

// Close stops checkpoints and closes the WAL, syncing it. The groups'
// storages close first: each flushes its own segment log.
func (w *WAL) Close() error {
	w.mu.Lock()
	if w.closing {
		w.mu.Unlock()
		return hlog.ErrClosed
	}
	w.closing = true
	w.mu.Unlock()
	close(w.stop)
	<-w.done
	// A clean close leaves nothing to replay, unless a group could not
	// flush (its storage failed): then its entries stay for the restart.
	ckptErr := w.Checkpoint()
	w.mu.Lock()
	w.closed = true
	w.mu.Unlock()
	// The checkpoint's flushed mark, and anything a failed checkpoint
	// left, is written before the log closes.
	_, werr := w.write()
	ckptErr = errors.Join(ckptErr, werr)
	if ckptErr != nil {
		// A group's log may hold unsynced writes: the WAL must not say
		// that nothing of it can have been torn.
		return errors.Join(ckptErr, w.log.CloseUnclean())
	}
	return w.log.Close()
}

func encodeEntries(dst []byte, group uint64, ents []hlog.Record) []byte {
	dst = binary.LittleEndian.AppendUint64(dst, group)
	dst = binary.AppendUvarint(dst, ents[0].Index)
	for _, e := range ents {
		dst = binary.AppendUvarint(dst, e.Term)
		dst = append(dst, e.Type)
		dst = binary.AppendUvarint(dst, uint64(len(e.Data)))
		dst = append(dst, e.Data...)
	}
	return dst
}

// decodeEntries decodes what encodeEntries wrote after the group. The
// records' Data share b.
func decodeEntries(b []byte) ([]hlog.Record, error) {
	index, n := binary.Uvarint(b)
	if n <= 0 {
		return nil, errors.New("entries record has no first index")
	}
	b = b[n:]
	var ents []hlog.Record
	for len(b) > 0 {
		term, n := binary.Uvarint(b)
		if n <= 0 || len(b) < n+1 {
			return nil, fmt.Errorf("entry %d has a bad term", index)
		}
		typ := b[n]
		b = b[n+1:]
		size, n := binary.Uvarint(b)
		if n <= 0 || uint64(len(b)-n) < size {
			return nil, fmt.Errorf("entry %d has a bad length", index)
		}
		ents = append(ents, hlog.Record{Index: index, Term: term, Type: typ, Data: b[n : n+int(size)]})
		b = b[n+int(size):]
		index++
	}
	if len(ents) == 0 {
		return nil, errors.New("entries record holds no entry")
	}
	return ents, nil
}
