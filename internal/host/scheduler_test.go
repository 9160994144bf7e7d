package host

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// One worker runs many groups with proposers at work on all of them at
// once: nothing waits for a turn that never comes (work arriving while a
// group's turn runs queues it again), every proposal is applied once and
// in each proposer's order, and the groups share rounds.
func TestOneWorkerRunsManyBusyGroups(t *testing.T) {
	h := newTestHost(t, t.TempDir(), func(c *Config) { c.Workers = 1 })
	const groups, writers, each = 12, 6, 30
	addListGroups(t, h, groups)
	rounds, turns := h.Stats().Rounds.Load(), h.Stats().Turns.Load()
	var wg sync.WaitGroup
	for id := uint64(1); id <= groups; id++ {
		wg.Go(func() { proposeConcurrently(t, h, id, writers, each) })
	}
	wg.Wait()
	rounds, turns = h.Stats().Rounds.Load()-rounds, h.Stats().Turns.Load()-turns
	for id := uint64(1); id <= groups; id++ {
		cmds := machineState(t, h, id)
		if len(cmds) != writers*each {
			t.Fatalf("group %d applied %d commands, want %d", id, len(cmds), writers*each)
		}
		next := make([]int, writers)
		for _, c := range cmds {
			var w, i int
			if _, err := fmt.Sscanf(strings.Replace(c, "-", " ", 1), "w%d %d", &w, &i); err != nil {
				t.Fatalf("group %d applied %q: %v", id, c, err)
			}
			if i != next[w] {
				t.Fatalf("group %d applied writer %d's command %d when %d was next", id, w, i, next[w])
			}
			next[w]++
		}
	}
	t.Logf("%d turns in %d rounds", turns, rounds)
	if turns < 2*rounds {
		t.Errorf("%d turns in %d rounds: groups with work at once do not share rounds", turns, rounds)
	}
}

// Idle groups cost nothing: once they are quiet, no group takes a turn,
// however many ticks pass.
func TestIdleGroupsTakeNoTurns(t *testing.T) {
	h := newTestHost(t, t.TempDir(), nil)
	const groups = 50
	for id := uint64(1); id <= groups; id++ {
		if err := h.AddGroup(GroupConfig{ID: id, Name: fmt.Sprint("g", id), StateMachine: &listMachine{}}); err != nil {
			t.Fatal(err)
		}
		propose(t, h, id, "one")
	}
	for id := uint64(1); id <= groups; id++ {
		waitFor(t, h, id, func(st Status) bool { return st.Quiesced })
	}
	turns := h.Stats().Turns.Load()
	time.Sleep(30 * h.cfg.TickInterval)
	if n := h.Stats().Turns.Load() - turns; n != 0 {
		t.Fatalf("%d quiet groups took %d turns in 30 ticks; an idle group must take none", groups, n)
	}
	// A proposal wakes its group, and only it.
	propose(t, h, 7, "two")
	if got := machineState(t, h, 7); len(got) != 2 {
		t.Fatalf("group 7 applied %v after waking", got)
	}
}

// A view whose context ends before the group's turn comes returns the
// context's error, and its function never runs: the caller may reuse what
// the function would have written.
func TestViewGivenUpNeverRuns(t *testing.T) {
	h := newTestHost(t, t.TempDir(), nil)
	if err := h.AddGroup(GroupConfig{ID: 1, Name: "g", StateMachine: &listMachine{}}); err != nil {
		t.Fatal(err)
	}
	// Hold the group's turn.
	release := make(chan struct{})
	holding := make(chan struct{})
	go h.View(context.Background(), 1, func(StateMachine, uint64) {
		close(holding)
		<-release
	})
	<-holding
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	var ran atomic.Bool
	err := h.View(ctx, 1, func(StateMachine, uint64) { ran.Store(true) })
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a view given up returned %v, want the context's deadline", err)
	}
	close(release)
	propose(t, h, 1, "after") // the group has taken turns since
	if ran.Load() {
		t.Fatal("a view given up ran after its caller had gone")
	}
}

// Views sent to groups while their turns run all run: a group looks at
// its views, ticks, reports and finished jobs only when one was posted,
// so a post that came while a turn took the last ones must bring another
// turn, not wait for unrelated work.
func TestViewsPostedDuringTurnsAllRun(t *testing.T) {
	h := newTestHost(t, t.TempDir(), func(c *Config) { c.Workers = 1 })
	const groups, viewers, each = 4, 4, 200
	addListGroups(t, h, groups)
	var wg sync.WaitGroup
	for id := uint64(1); id <= groups; id++ {
		wg.Go(func() { proposeConcurrently(t, h, id, 2, 50) })
		for range viewers {
			wg.Go(func() {
				for i := range each {
					ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
					err := h.View(ctx, id, func(StateMachine, uint64) {})
					cancel()
					if err != nil {
						t.Errorf("group %d's view %d: %v", id, i, err)
						return
					}
				}
			})
		}
	}
	wg.Wait()
}

// addListGroups adds groups 1 to n of listMachines to h.
func addListGroups(t *testing.T, h *Host, n uint64) {
	t.Helper()
	for id := uint64(1); id <= n; id++ {
		if err := h.AddGroup(GroupConfig{ID: id, Name: fmt.Sprint("g", id), StateMachine: &listMachine{}}); err != nil {
			t.Fatal(err)
		}
	}
}

// roundMachine is a listMachine that answers each command with the
// number of the scheduler's round that applied it.
type roundMachine struct {
	listMachine
	h *Host
}

func (m *roundMachine) Apply(index uint64, cmd []byte) any {
	m.listMachine.Apply(index, cmd)
	return m.h.Stats().Rounds.Load()
}

// addRoundGroups adds quiet groups 1 to n of roundMachines to h.
func addRoundGroups(t *testing.T, h *Host, n uint64) {
	t.Helper()
	for id := uint64(1); id <= n; id++ {
		if err := h.AddGroup(GroupConfig{ID: id, Name: fmt.Sprint("g", id), StateMachine: &roundMachine{h: h}}); err != nil {
			t.Fatal(err)
		}
		appliedIn(t, h, id, "first")
	}
	for id := uint64(1); id <= n; id++ {
		waitFor(t, h, id, func(st Status) bool { return st.Quiesced })
	}
}

// appliedIn proposes cmd to group id of roundMachines and returns the
// round that applied it.
func appliedIn(t *testing.T, h *Host, id uint64, cmd string) uint64 {
	t.Helper()
	return proposeResult(t, h, id, cmd).(uint64)
}

// On a single node a group's log alone is a quorum, so an entry commits
// as soon as its round's sync made it durable: the round applies and
// answers it then, and a proposal to an idle group is applied in the
// round that takes it, not in a second one.
func TestSingleNodeAppliesInTheRoundThatSyncs(t *testing.T) {
	h := newTestHost(t, t.TempDir(), nil)
	addRoundGroups(t, h, 1)
	for i := range 5 {
		before := h.Stats().Rounds.Load()
		if applied := appliedIn(t, h, 1, fmt.Sprint("cmd-", i)); applied != before+1 {
			t.Fatalf("proposal %d was applied in round %d, want 1, the round that took it", i, applied-before)
		}
		waitFor(t, h, 1, func(st Status) bool { return st.Quiesced })
	}
}

// Work that reaches the node while a round begins its turns joins that
// round instead of waiting for the next: a proposal to one group, made
// during another group's turn, is applied in the same round.
func TestGroupsQueuedWhileARoundBeginsJoinIt(t *testing.T) {
	h := newTestHost(t, t.TempDir(), func(c *Config) { c.Workers = 1 })
	addRoundGroups(t, h, 2)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	before := h.Stats().Rounds.Load()
	var joined *Proposal
	if err := h.View(ctx, 1, func(StateMachine, uint64) {
		joined = h.Start(ctx, 2, Bytes([]byte("joined")))
	}); err != nil {
		t.Fatal(err)
	}
	r, err := joined.Wait(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if applied := r.(uint64); applied != before+1 {
		t.Fatalf("the proposal made during group 1's turn was applied in round %d, want 1: it did not join the round", applied-before)
	}
}

// A single node's group commits its entries once they are durable, so it
// applies and answers them in the turn that synced them (applyAhead): one
// turn per proposal, not a second for the commit. Raft's Ready that hands
// the entries out follows with the group's next turn, a tick at the
// latest, and applies nothing twice.
func TestSingleNodeAnswersInTheTurnThatSynced(t *testing.T) {
	h := newTestHost(t, t.TempDir(), func(c *Config) { c.TickInterval = 100 * time.Millisecond })
	m := &listMachine{}
	if err := h.AddGroup(GroupConfig{ID: 1, Name: "g", StateMachine: m}); err != nil {
		t.Fatal(err)
	}
	propose(t, h, 1, "first")
	const n = 40
	turns := h.Stats().Turns.Load()
	for i := range n {
		propose(t, h, 1, fmt.Sprint("c", i))
	}
	taken := h.Stats().Turns.Load() - turns
	t.Logf("%d proposals one after another took %d turns", n, taken)
	if taken >= n*3/2 {
		t.Errorf("%d proposals one after another took %d turns; each should take one, and ticks a few", n, taken)
	}
	eventually(t, "raft hands out every entry applied", func() bool {
		var caughtUp bool
		if err := h.onLoop(context.Background(), 1, func(g *group) error {
			caughtUp = g.rn.BasicStatus().Applied == g.applied
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		return caughtUp
	})
	if got := machineState(t, h, 1); len(got) != n+1 {
		t.Fatalf("the group applied %d commands, want %d", len(got), n+1)
	}
}
