package host

import (
	"errors"
	"testing"
	"time"

	pb "go.etcd.io/raft/v3/raftpb"
)

// entryOf is the log entry of proposal id at index.
func entryOf(id, index uint64) pb.Entry {
	return pb.Entry{Index: index, Data: encodeEnvelope(id, Bytes("cmd"))}
}

func mustRegister(t *testing.T, tr *proposalTracker, id uint64, now time.Time) chan any {
	t.Helper()
	c, ok := tr.register(id, now)
	if !ok {
		t.Fatalf("register %d: the tracker refused it", id)
	}
	return c
}

// answerOf returns the answer waiting on c, failing if there is none.
func answerOf(t *testing.T, c chan any) any {
	t.Helper()
	select {
	case r := <-c:
		return r
	default:
		t.Fatal("no answer")
		return nil
	}
}

func wantNoAnswer(t *testing.T, c chan any) {
	t.Helper()
	select {
	case r := <-c:
		t.Fatalf("answered %v, want no answer yet", r)
	default:
	}
}

func TestProposalTrackerAnswersTheAppliedProposer(t *testing.T) {
	tr := newProposalTracker("g")
	c := mustRegister(t, tr, 7, time.Now())
	tr.place([]pb.Entry{entryOf(7, 3)}, time.Now())
	tr.answer(3, 7, "ok")
	if r := answerOf(t, c); r != "ok" {
		t.Fatalf("answer = %v, want ok", r)
	}
	if n := tr.pending(); n != 0 {
		t.Fatalf("%d waiters left after the answer", n)
	}
	if len(tr.placed) != 0 {
		t.Fatalf("placements left after the answer: %v", tr.placed)
	}
}

// A new leader replaced the entry before it committed: the proposer
// placed there learns that its entry was not applied.
func TestProposalTrackerReplacedEntryIsNotApplied(t *testing.T) {
	tr := newProposalTracker("g")
	mine := mustRegister(t, tr, 7, time.Now())
	tr.place([]pb.Entry{entryOf(7, 3)}, time.Now())
	tr.answer(3, 9, "someone else's") // proposal 9 came from another replica
	if r, _ := answerOf(t, mine).(error); !errors.Is(r, ErrNotApplied) {
		t.Fatalf("answer = %v, want ErrNotApplied", r)
	}
}

// An entry placed again at a higher index (a new leader appended it
// anew) is not failed by the old index being applied with another one.
func TestProposalTrackerOnlyTheLatestPlacementCounts(t *testing.T) {
	tr := newProposalTracker("g")
	c := mustRegister(t, tr, 7, time.Now())
	tr.place([]pb.Entry{entryOf(7, 3)}, time.Now())
	tr.place([]pb.Entry{entryOf(7, 5)}, time.Now())
	tr.answer(3, 0, nil)
	wantNoAnswer(t, c)
	tr.answer(5, 7, "ok")
	if r := answerOf(t, c); r != "ok" {
		t.Fatalf("answer = %v, want ok", r)
	}
}

func TestProposalTrackerUnplaceUpToASnapshot(t *testing.T) {
	tr := newProposalTracker("g")
	below := mustRegister(t, tr, 1, time.Now())
	above := mustRegister(t, tr, 2, time.Now())
	tr.place([]pb.Entry{entryOf(1, 10), entryOf(2, 11)}, time.Now())
	tr.unplace(10)
	if r, _ := answerOf(t, below).(error); !errors.Is(r, ErrOutcomeUnknown) {
		t.Fatalf("answer below the snapshot = %v, want ErrOutcomeUnknown", r)
	}
	wantNoAnswer(t, above)
	if _, ok := tr.placed[11]; !ok {
		t.Fatal("the placement above the snapshot was forgotten")
	}
}

func TestProposalTrackerDeliverAndForget(t *testing.T) {
	tr := newProposalTracker("g")
	c := mustRegister(t, tr, 1, time.Now())
	tr.deliver(1, ErrNotLeader)
	if r := answerOf(t, c); r != ErrNotLeader {
		t.Fatalf("answer = %v, want ErrNotLeader", r)
	}
	tr.deliver(1, "again") // answered already: nothing more
	wantNoAnswer(t, c)
	tr.deliver(0, "none") // id 0 has no waiter
	mustRegister(t, tr, 2, time.Now())
	tr.forget(2)
	if n := tr.pending(); n != 0 {
		t.Fatalf("%d waiters after forget", n)
	}
}

func TestProposalTrackerCloseAnswersAllAndRefusesNew(t *testing.T) {
	tr := newProposalTracker("g")
	a, b := mustRegister(t, tr, 1, time.Now()), mustRegister(t, tr, 2, time.Now())
	tr.close(ErrClosed)
	for _, c := range []chan any{a, b} {
		if r := answerOf(t, c); r != ErrClosed {
			t.Fatalf("answer = %v, want ErrClosed", r)
		}
	}
	if _, ok := tr.register(3, time.Now()); ok {
		t.Fatal("a closed tracker took a new waiter")
	}
	tr.forget(1) // safe after close
}

func TestProposalTrackerExpireForwarded(t *testing.T) {
	const limit, grace = 2 * time.Second, 300 * time.Millisecond
	now := time.Now()
	tests := []struct {
		name        string
		since       time.Duration // how long ago the proposal was made
		term        uint64        // the term raft took it in; 0: not taken
		index       uint64        // where it is in the log; 0: nowhere
		groupTerm   uint64
		leads       bool
		leadChanged time.Duration // how long ago; 0: never
		expired     bool
	}{
		{name: "not taken by raft yet", since: time.Hour, groupTerm: 2, expired: false},
		{name: "follower, fresh", since: time.Second, term: 2, groupTerm: 2, expired: false},
		{name: "follower, waited the limit", since: 3 * time.Second, term: 2, groupTerm: 2, expired: true},
		{name: "leader's own, waited the limit", since: 3 * time.Second, term: 2, index: 4, groupTerm: 2, leads: true, leadChanged: time.Hour, expired: false},
		{name: "forwarded under an earlier leader, past the grace", since: time.Second, term: 1, groupTerm: 2, leadChanged: time.Second, expired: true},
		{name: "forwarded under an earlier leader, within the grace", since: time.Second, term: 1, groupTerm: 2, leadChanged: 100 * time.Millisecond, expired: false},
		{name: "forwarded under an earlier leader, but in the log", since: time.Second, term: 1, index: 4, groupTerm: 2, leadChanged: time.Second, expired: false},
		{name: "new leader, forwarded before it led", since: time.Second, term: 1, groupTerm: 2, leads: true, leadChanged: time.Second, expired: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tr := newProposalTracker("g")
			c := mustRegister(t, tr, 1, now.Add(-tt.since))
			if tt.term != 0 {
				tr.proposed([]proposal{{id: 1}}, tt.term)
			}
			if tt.index != 0 {
				tr.place([]pb.Entry{entryOf(1, tt.index)}, time.Now())
			}
			var changed time.Time
			if tt.leadChanged != 0 {
				changed = now.Add(-tt.leadChanged)
			}
			tr.expireForwarded(now, tt.groupTerm, tt.leads, changed, limit, grace)
			if !tt.expired {
				wantNoAnswer(t, c)
				return
			}
			if r, _ := answerOf(t, c).(error); !errors.Is(r, ErrOutcomeUnknown) {
				t.Fatalf("answer = %v, want ErrOutcomeUnknown", r)
			}
		})
	}
}

func TestProposalTrackerRefusesAnIdTwice(t *testing.T) {
	tr := newProposalTracker("g")
	mustRegister(t, tr, 1, time.Now())
	defer func() {
		if recover() == nil {
			t.Fatal("a proposal id was registered twice")
		}
	}()
	tr.register(1, time.Now())
}

// A follower's forward that a later forward of the same term overtook
// was lost on the way; a slow one behind entries that keep reaching the
// log is not, however long it waits, until nothing reaches the log for
// the limit.
func TestProposalTrackerForwardsOvertakenOrStalled(t *testing.T) {
	const limit, grace = 2 * time.Second, 300 * time.Millisecond
	now := time.Now()
	wantUnknown := func(t *testing.T, c chan any) {
		t.Helper()
		if r, _ := answerOf(t, c).(error); !errors.Is(r, ErrOutcomeUnknown) {
			t.Fatalf("answer = %v, want ErrOutcomeUnknown", r)
		}
	}
	t.Run("overtaken in its term", func(t *testing.T) {
		tr := newProposalTracker("g")
		first, second := mustRegister(t, tr, 1, now), mustRegister(t, tr, 2, now)
		tr.proposed([]proposal{{id: 1}}, 2)
		tr.proposed([]proposal{{id: 2}}, 2)
		tr.place([]pb.Entry{entryOf(2, 7)}, now)
		tr.expireForwarded(now, 2, false, time.Time{}, limit, grace)
		wantUnknown(t, first)
		wantNoAnswer(t, second)
	})
	t.Run("a later term's entry overtakes nothing", func(t *testing.T) {
		tr := newProposalTracker("g")
		first := mustRegister(t, tr, 1, now)
		mustRegister(t, tr, 2, now)
		tr.proposed([]proposal{{id: 1}}, 2)
		tr.proposed([]proposal{{id: 2}}, 3)
		tr.place([]pb.Entry{entryOf(2, 7)}, now)
		tr.expireForwarded(now, 3, false, time.Time{}, limit, grace)
		wantNoAnswer(t, first)
	})
	t.Run("slow behind entries that keep coming", func(t *testing.T) {
		tr := newProposalTracker("g")
		first := mustRegister(t, tr, 1, now.Add(-3*time.Second))
		second := mustRegister(t, tr, 2, now.Add(-3*time.Second))
		tr.proposed([]proposal{{id: 1}, {id: 2}}, 2)
		tr.place([]pb.Entry{entryOf(1, 7)}, now.Add(-100*time.Millisecond))
		tr.expireForwarded(now, 2, false, time.Time{}, limit, grace)
		wantNoAnswer(t, first)
		wantNoAnswer(t, second)
		// Nothing more reaches the log: the way to the leader is broken.
		tr.expireForwarded(now.Add(limit), 2, false, time.Time{}, limit, grace)
		wantUnknown(t, first)
		wantUnknown(t, second)
	})
}
