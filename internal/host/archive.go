package host

import (
	"context"
	"fmt"
	"time"

	pb "go.etcd.io/raft/v3/raftpb"
)

// Archive holds committed log entries of Tiered state machines that their
// groups' local logs no longer keep (object storage, for a node that
// tiers). The host reads them there when a state machine's reader asks
// for one (Entry); Raft itself never does: entries below the local log
// reach a lagging follower as a snapshot's state, which reads them here.
type Archive interface {
	// Entry returns the committed entry at index of group, as the
	// group's log held it.
	Entry(ctx context.Context, group, index uint64) (pb.Entry, error)
}

// archiveReadTimeout bounds one read from the archive: Entry's callers
// (the readers of a shard's events) pass no context of their own.
const archiveReadTimeout = time.Minute

// archived reads the entry at index of g from the archive.
func (h *Host) archived(g *group, index uint64) ([]pb.Entry, error) {
	ctx, cancel := context.WithTimeout(context.Background(), archiveReadTimeout)
	defer cancel()
	e, err := h.cfg.Archive.Entry(ctx, g.id, index)
	if err != nil {
		return nil, fmt.Errorf("below the local log, from the archive: %w", err)
	}
	if e.Index != index {
		return nil, fmt.Errorf("the archive returned entry %d for %d", e.Index, index)
	}
	return []pb.Entry{e}, nil
}

// LogBounds describes a group's local log, for the reconciler that
// tiers it and the stats.
type LogBounds struct {
	// ClosedThrough is the last index in a segment no longer written
	// (0 if none): entries up to it are settled on disk.
	ClosedThrough uint64
	// First is the first index it holds: entries below it are read from
	// the Archive.
	First uint64
	Bytes int64 // the size of its segment files
}

// LogBounds returns the bounds of group id's local log.
func (h *Host) LogBounds(id uint64) (LogBounds, error) {
	g, err := h.group(id)
	if err != nil {
		return LogBounds{}, err
	}
	l := g.storage.Log()
	return LogBounds{ClosedThrough: l.ClosedThrough(), First: l.FirstIndex(), Bytes: l.SizeBytes()}, nil
}

// Entries returns the entries of group id's local log from lo up to hi
// (exclusive), at most maxBytes of them but at least one, as the log
// holds them: for a reconciler that copies them elsewhere.
func (h *Host) Entries(id, lo, hi, maxBytes uint64) ([]pb.Entry, error) {
	g, err := h.group(id)
	if err != nil {
		return nil, err
	}
	ents, err := g.storage.Entries(lo, hi, maxBytes)
	if err != nil {
		return nil, fmt.Errorf("read entries %d to %d of group %s: %w", lo, hi-1, g.name, err)
	}
	return ents, nil
}
