package host

import "testing"

func isClosed(c chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

func TestReplayGateClosesAtItsIndexes(t *testing.T) {
	r := newReplayGate(5, 8, false)
	r.check(4, false)
	if isClosed(r.appliedOld) || isClosed(r.caughtUp) {
		t.Fatal("closed before the group applied what it knew of")
	}
	r.check(5, false)
	if !isClosed(r.appliedOld) || isClosed(r.caughtUp) {
		t.Fatal("at the known commit index: want appliedOld alone closed")
	}
	r.check(8, false)
	if !isClosed(r.caughtUp) {
		t.Fatal("not caught up after replaying its log")
	}
	r.check(9, true) // closed already: no double close
}

// A group of one is caught up only once it publishes itself as the
// leader, so that its first reads find it led.
func TestReplayGateSoleVoterWaitsForItsElection(t *testing.T) {
	r := newReplayGate(5, 8, true)
	r.check(8, false)
	if !isClosed(r.appliedOld) || isClosed(r.caughtUp) {
		t.Fatal("a group of one was caught up before it led")
	}
	r.check(8, true)
	if !isClosed(r.caughtUp) {
		t.Fatal("a group of one that leads is not caught up")
	}
}
