package host

import (
	"testing"
	"time"
)

func TestLeadershipUpdateReportsChanges(t *testing.T) {
	var l leadership
	now := time.Now()
	if !l.update(2, false, 5, now) {
		t.Fatal("learning of a leader is no change")
	}
	if l.leads() || l.term != 0 || !l.changed.Equal(now) {
		t.Fatalf("a follower: leads %v, term %d, changed %v", l.leads(), l.term, l.changed)
	}
	if l.update(2, false, 5, now.Add(time.Second)) {
		t.Fatal("the same soft state is a change")
	}
	if !l.changed.Equal(now) {
		t.Fatal("no change moved the time of the last change")
	}
	if !l.update(1, true, 6, now.Add(2*time.Second)) {
		t.Fatal("being elected is no change")
	}
	if !l.leads() || l.term != 6 {
		t.Fatalf("elected in term 6: leads %v, term %d", l.leads(), l.term)
	}
	if !l.update(0, false, 7, now) || l.term != 0 {
		t.Fatal("stepping down is no change, or kept its term")
	}
}

// A replica just elected is published as the leader only once it has
// applied an entry of its own term; another leader is published at once.
func TestLeadershipPublishesANewLeaderOnceItAppliedItsTerm(t *testing.T) {
	const self = 1
	var l leadership
	l.update(2, false, 5, time.Now())
	if !l.publish(self, 3) || l.leader() != 2 {
		t.Fatalf("another node's leadership published as %d, want 2 at once", l.leader())
	}
	if l.publish(self, 3) {
		t.Fatal("publishing the same leader again is a change")
	}
	l.update(self, true, 6, time.Now())
	if !l.publish(self, 5) || l.leader() != 0 {
		t.Fatalf("a leader that applied nothing of its term is published as %d, want none", l.leader())
	}
	if !l.publish(self, 6) || l.leader() != self {
		t.Fatalf("a leader that applied an entry of its term is published as %d, want itself", l.leader())
	}
}
