package host

import "time"

// A round is what a worker of the scheduler does with the groups it took
// (scheduler.go). Each group takes a turn in three steps, and the round
// runs each step for all its groups before the next:
//
//  1. beginReady: the group takes what reached it (takeEvents, its
//     proposals and messages) and, if raft has a Ready, appends its
//     entries and hard state to the node's WAL and sends the messages that
//     may go before they are durable;
//  2. one fdatasync of the WAL makes every group's Ready durable, while
//     the entries each Ready may apply early are applied (whileSyncing);
//  3. finishReady: the group sends the messages that vouch for its Ready,
//     applies, and advances raft.
//
// A group thus pays no fdatasync, goroutine switch or wake-up of its own:
// a round of many groups costs one sync and one worker's pass.

// roundWorker holds what a worker reuses from round to round.
type roundWorker struct {
	turns  []*readyTurn
	synced chan error
}

// round runs the turns of groups, which the calling worker holds.
func (h *Host) round(w *roundWorker, groups []*group) {
	h.stats.Rounds.Add(1)
	h.stats.Turns.Add(uint64(len(groups)))
	h.metrics.rounds.Inc()
	h.metrics.turns.Add(float64(len(groups)))
	turns := w.turns[:0]
	mustSync := false
	for _, g := range groups {
		if g.stopping() {
			g.props.close(ErrClosed)
			g.exit()
			continue
		}
		g.takeEvents()
		t, err := g.beginReady()
		if err != nil {
			g.fail(err)
			g.exit()
			continue
		}
		if t != nil {
			turns = append(turns, t)
			mustSync = mustSync || t.mustSync
		}
	}
	var syncErr error
	if mustSync {
		if w.synced == nil {
			w.synced = make(chan error, 1)
		}
		go func() { w.synced <- h.syncWAL() }()
	}
	for _, t := range turns {
		t.whileSyncing()
	}
	if mustSync {
		syncErr = <-w.synced
	}
	for _, t := range turns {
		if err := t.g.finishReady(t, syncErr); err != nil {
			t.g.fail(err)
			t.g.exit()
		}
	}
	clear(turns)
	w.turns = turns[:0]
}

// syncWAL makes every record appended to the node's WAL durable, and
// times it.
func (h *Host) syncWAL() error {
	start := time.Now()
	err := h.wal.Sync()
	h.observeFsync(time.Since(start))
	return err
}
