package host

// replayGate owns the signals that a reopened group has replayed its log,
// so that it is not served to callers half replayed. Each channel is
// closed once, when its condition first holds; the loop checks them.
type replayGate struct {
	// caughtUp is closed once the group has applied everything its log
	// held when it was opened (replayTo).
	replayTo  uint64
	soleVoter bool // a group of one also waits until it has elected itself
	caughtUp  chan struct{}
	// applyTo is the commit index the group knew at open: what it
	// applies without waiting for an election. appliedOld is closed once
	// it has (see AddGroupsFunc).
	applyTo    uint64
	appliedOld chan struct{}
}

func newReplayGate(applyTo, replayTo uint64, soleVoter bool) *replayGate {
	return &replayGate{
		replayTo: replayTo, soleVoter: soleVoter, caughtUp: make(chan struct{}),
		applyTo: applyTo, appliedOld: make(chan struct{}),
	}
}

// check closes the channels whose condition holds once the group applied
// up to applied; selfLeader says whether it publishes this node as its
// leader.
func (r *replayGate) check(applied uint64, selfLeader bool) {
	if applied >= r.applyTo {
		closeOnce(r.appliedOld)
	}
	// A group of one is served once it names itself the leader (see
	// leadership.publish), so that its first reads find it led.
	if applied >= r.replayTo && (!r.soleVoter || selfLeader) {
		closeOnce(r.caughtUp)
	}
}

// closeOnce closes c unless it is closed; only one goroutine may call it.
func closeOnce(c chan struct{}) {
	select {
	case <-c:
	default:
		close(c)
	}
}
