package host

import (
	"context"
	"encoding/binary"
	"fmt"

	"go.etcd.io/raft/v3"
)

// Read barriers. A leader serves reads from its state machine (pull
// leases), but a leader cut off from its followers does not know at once
// that it has been replaced, and until CheckQuorum makes it step down its
// state misses what its successor commits — an ack, say, so that it would
// hand out an event already acknowledged. A read barrier asks a quorum,
// through raft's ReadIndex (a round of heartbeats), whether this replica
// still leads, and then waits until the state machine has applied what
// was committed when it asked. Barriers asked while one is in flight share
// the next one, so a busy group pays one round per batch of reads. A lost
// heartbeat or answer costs no more than a wait: raft's next heartbeats
// carry the request's context again.

// readBarriers is a group's state of read barriers. Loop fields.
type readBarriers struct {
	seq       uint64          // the context of the ReadIndex in flight
	waiting   []chan error    // for the next ReadIndex
	inFlight  []chan error    // for the ReadIndex seq
	confirmed []confirmedRead // answered by a quorum, waiting to be applied
}

type confirmedRead struct {
	index   uint64
	waiters []chan error
}

// ReadBarrier returns once the group's state on this node may be read as
// the leader's: a quorum confirmed after the call that this replica leads,
// and it has applied everything committed then. It returns ErrNotLeader on
// a replica that does not lead, or that stops leading meanwhile.
func (h *Host) ReadBarrier(ctx context.Context, id uint64) error {
	g, err := h.group(id)
	if err != nil {
		return err
	}
	done := make(chan error, 1)
	if err := g.onLoop(ctx, func() { g.askRead(done) }); err != nil {
		return err
	}
	select {
	case err := <-done:
		if err != nil {
			return fmt.Errorf("group %s: %w", g.name, err)
		}
		return nil
	case <-g.done:
		return g.closedErr()
	case <-ctx.Done():
		return ctx.Err()
	}
}

// askRead queues a barrier, sending a ReadIndex unless one is in flight.
func (g *group) askRead(done chan error) {
	if !g.isLeader.Load() {
		done <- ErrNotLeader
		return
	}
	g.wake(true)
	g.reads.waiting = append(g.reads.waiting, done)
	if g.reads.inFlight == nil {
		g.sendReadIndex()
	}
}

func (g *group) sendReadIndex() {
	g.reads.seq++
	g.reads.inFlight, g.reads.waiting = g.reads.waiting, nil
	g.rn.ReadIndex(binary.BigEndian.AppendUint64(nil, g.reads.seq))
}

// readStates takes raft's answers to the group's ReadIndex requests, and
// sends the next one if barriers wait for it.
func (g *group) readStates(states []raft.ReadState) {
	for _, rs := range states {
		if len(rs.RequestCtx) != 8 || binary.BigEndian.Uint64(rs.RequestCtx) != g.reads.seq || g.reads.inFlight == nil {
			continue // answered already, or failed with a change of leader
		}
		g.reads.confirmed = append(g.reads.confirmed, confirmedRead{index: rs.Index, waiters: g.reads.inFlight})
		g.reads.inFlight = nil
	}
	if g.reads.inFlight == nil && len(g.reads.waiting) > 0 {
		g.sendReadIndex()
	}
}

// releaseReads answers the confirmed barriers whose index is applied.
func (g *group) releaseReads() {
	i := 0
	for ; i < len(g.reads.confirmed) && g.reads.confirmed[i].index <= g.applied; i++ {
		for _, done := range g.reads.confirmed[i].waiters {
			done <- nil
		}
	}
	g.reads.confirmed = g.reads.confirmed[i:]
	if len(g.reads.confirmed) == 0 {
		g.reads.confirmed = nil
	}
}

// failReads answers every barrier with ErrNotLeader: raft drops the
// ReadIndex requests of a leader that steps down without answering them.
func (g *group) failReads() {
	fail := func(waiters []chan error) {
		for _, done := range waiters {
			done <- ErrNotLeader
		}
	}
	fail(g.reads.waiting)
	fail(g.reads.inFlight)
	for _, c := range g.reads.confirmed {
		fail(c.waiters)
	}
	g.reads = readBarriers{seq: g.reads.seq}
}
