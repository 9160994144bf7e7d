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

// readBarriers owns a group's read barriers: those waiting for a
// ReadIndex request, the ones in flight, and those a quorum confirmed
// that wait for their index to be applied. It keeps them in order — a
// barrier is released only once the state machine applied what was
// committed when a quorum confirmed it — and answers each exactly once.
// The group's loop owns it; it knows nothing of raft but the answers it
// is given.
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
	case <-g.life.done:
		return g.life.closedErr()
	case <-ctx.Done():
		return ctx.Err()
	}
}

// askRead queues a barrier, sending a ReadIndex unless one is in flight.
func (g *group) askRead(done chan error) {
	if !g.lead.leads() {
		done <- ErrNotLeader
		return
	}
	g.wake(true)
	g.readIndex(g.reads.ask(done))
}

// readIndex sends raft a ReadIndex request with the context rctx, unless
// it is nil.
func (g *group) readIndex(rctx []byte) {
	if rctx != nil {
		g.rn.ReadIndex(rctx)
	}
}

// ask queues a barrier, and returns the context of the ReadIndex request
// to send for it, or nil if one is in flight: the barrier waits for the
// next.
func (r *readBarriers) ask(done chan error) []byte {
	r.waiting = append(r.waiting, done)
	if r.inFlight != nil {
		return nil
	}
	return r.next()
}

// next puts the waiting barriers in flight, and returns the context of
// their ReadIndex request.
func (r *readBarriers) next() []byte {
	r.seq++
	r.inFlight, r.waiting = r.waiting, nil
	return binary.BigEndian.AppendUint64(nil, r.seq)
}

// confirm takes raft's answers to the group's ReadIndex requests, and
// returns the context of the next request to send if barriers wait for
// it, nil if none do.
func (r *readBarriers) confirm(states []raft.ReadState) []byte {
	for _, rs := range states {
		if len(rs.RequestCtx) != 8 || binary.BigEndian.Uint64(rs.RequestCtx) != r.seq || r.inFlight == nil {
			continue // answered already, or failed with a change of leader
		}
		r.confirmed = append(r.confirmed, confirmedRead{index: rs.Index, waiters: r.inFlight})
		r.inFlight = nil
	}
	if r.inFlight == nil && len(r.waiting) > 0 {
		return r.next()
	}
	return nil
}

// release answers the confirmed barriers whose index is applied.
func (r *readBarriers) release(applied uint64) {
	i := 0
	for ; i < len(r.confirmed) && r.confirmed[i].index <= applied; i++ {
		for _, done := range r.confirmed[i].waiters {
			done <- nil
		}
	}
	r.confirmed = r.confirmed[i:]
	if len(r.confirmed) == 0 {
		r.confirmed = nil
	}
}

// fail answers every barrier with ErrNotLeader: raft drops the
// ReadIndex requests of a leader that steps down without answering them.
func (r *readBarriers) fail() {
	fail := func(waiters []chan error) {
		for _, done := range waiters {
			done <- ErrNotLeader
		}
	}
	fail(r.waiting)
	fail(r.inFlight)
	for _, c := range r.confirmed {
		fail(c.waiters)
	}
	*r = readBarriers{seq: r.seq}
}
