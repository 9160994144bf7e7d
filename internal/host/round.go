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
	turns, again []*readyTurn
	synced       chan error
}

// round runs the turns of groups, which the calling worker holds.
//
// A group whose own log is a quorum (a single node's) commits its
// Ready's entries only when finishReady advances raft past their sync; it
// then applies and answers them at once (applyAhead), so a publish on a
// single node waits for one sync, not two. The Ready in which raft hands
// them out waits for the group's next turn (commitCanWait), where it
// joins the group's next entries instead of costing a turn of its own.
// Any other group that has a Ready after advancing (a leader whose commit
// its followers must hear of) takes a second turn in this round, which
// takes nothing new and needs no sync of its own unless raft put new
// entries or a vote in it.
//
// The groups queued while the round begins its turns join it, until none
// is, before the round syncs (more takes them): calls that arrive
// together but a little apart, as the answers of the last round come
// back, then share this round's sync instead of waiting a whole round for
// the next. It returns the groups it ran, those taken by more included.
func (h *Host) round(w *roundWorker, groups []*group, more func([]*group) []*group) []*group {
	h.stats.Rounds.Add(1)
	h.metrics.rounds.Inc()
	turns := w.turns[:0]
	for begun := 0; begun < len(groups); {
		for _, g := range groups[begun:] {
			if g.stopping() {
				g.props.close(ErrClosed)
				g.exit()
				continue
			}
			g.takeEvents()
			turns = beginTurn(turns, g, g.beginReady)
		}
		begun = len(groups)
		groups = more(groups)
	}
	h.countTurns(len(groups))
	h.finishTurns(w, turns)
	again := w.again[:0]
	for _, t := range turns {
		if t.g.sched.Load() != schedExited && t.g.rn.HasReady() && !t.g.commitCanWait() {
			again = beginTurn(again, t.g, t.g.takeReady)
		}
	}
	h.countTurns(len(again))
	h.finishTurns(w, again)
	// The turns are over: what their Readies hold may go. A second turn
	// is its group's turn taken again, so this clears those too.
	for _, t := range turns {
		*t = readyTurn{}
	}
	clear(turns)
	clear(again)
	w.turns, w.again = turns[:0], again[:0]
	return groups
}

// beginTurn begins a group's turn with begin (beginReady or takeReady) and
// appends the turn to turns if raft had a Ready; a group whose Ready
// could not be persisted stops.
func beginTurn(turns []*readyTurn, g *group, begin func() (*readyTurn, error)) []*readyTurn {
	t, err := begin()
	if err != nil {
		g.fail(err)
		g.exit()
		return turns
	}
	if t != nil {
		turns = append(turns, t)
	}
	return turns
}

// finishTurns makes the turns' Readies durable with one WAL sync, if any
// needs it, doing each turn's whileSyncing work meanwhile, then finishes
// each turn.
func (h *Host) finishTurns(w *roundWorker, turns []*readyTurn) {
	mustSync := false
	for _, t := range turns {
		mustSync = mustSync || t.mustSync
	}
	if mustSync {
		if w.synced == nil {
			w.synced = make(chan error, 1)
		}
		go func() { w.synced <- h.syncWAL() }()
	}
	for _, t := range turns {
		t.whileSyncing()
	}
	var syncErr error
	if mustSync {
		syncErr = <-w.synced
	}
	for _, t := range turns {
		if err := t.g.finishReady(t, syncErr); err != nil {
			t.g.fail(err)
			t.g.exit()
		}
	}
}

func (h *Host) countTurns(n int) {
	h.stats.Turns.Add(uint64(n))
	h.metrics.turns.Add(float64(n))
}

// syncWAL makes every record appended to the node's WAL durable, and
// times it.
func (h *Host) syncWAL() error {
	start := time.Now()
	err := h.wal.Sync()
	h.observeFsync(time.Since(start))
	return err
}
