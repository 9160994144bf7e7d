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

// The replay gate opens appliedOld at the commit index the group knew,
// and caughtUp once it replayed its log: a group of one only once it
// publishes itself as the leader, so that its first reads find it led.
func TestReplayGate(t *testing.T) {
	type check struct {
		applied          uint64
		selfLeader       bool
		old, caughtUpNow bool // what is closed after the check
	}
	for _, tt := range []struct {
		name      string
		soleVoter bool
		checks    []check
	}{
		{name: "replica of many", checks: []check{
			{applied: 4},
			{applied: 5, old: true},
			{applied: 8, old: true, caughtUpNow: true},
			{applied: 9, selfLeader: true, old: true, caughtUpNow: true}, // closed already: no double close
		}},
		{name: "group of one", soleVoter: true, checks: []check{
			{applied: 8, old: true},
			{applied: 8, selfLeader: true, old: true, caughtUpNow: true},
		}},
	} {
		r := newReplayGate(5, 8, tt.soleVoter)
		for _, c := range tt.checks {
			r.check(c.applied, c.selfLeader)
			if isClosed(r.appliedOld) != c.old || isClosed(r.caughtUp) != c.caughtUpNow {
				t.Fatalf("%s: applied %d, self leader %v: appliedOld closed %v, caughtUp closed %v; want %v, %v",
					tt.name, c.applied, c.selfLeader, isClosed(r.appliedOld), isClosed(r.caughtUp), c.old, c.caughtUpNow)
			}
		}
	}
}
