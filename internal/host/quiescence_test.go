package host

import (
	"testing"

	"go.etcd.io/raft/v3"
	pb "go.etcd.io/raft/v3/raftpb"
	"go.etcd.io/raft/v3/tracker"
)

func TestQuiescenceSleepAndWake(t *testing.T) {
	var q quiescence
	if q.wake(false) {
		t.Fatal("an awake group woke")
	}
	for range 3 {
		if q.idleTick(4) {
			t.Fatal("idle before its ticks passed")
		}
	}
	if !q.idleTick(4) {
		t.Fatal("not idle after its ticks passed")
	}
	q.sleep()
	if !q.asleep || !q.now.Load() {
		t.Fatal("asleep not recorded")
	}
	if !q.wake(false) || q.asleep || q.now.Load() {
		t.Fatal("wake did not end the sleep")
	}
	if !q.idleTick(4) {
		t.Fatal("a wake without activity restarted the count of idle ticks")
	}
	q.wake(true)
	if q.idleTick(4) {
		t.Fatal("activity did not restart the count of idle ticks")
	}
}

func TestQuiesceAfter(t *testing.T) {
	alone := pb.ConfState{Voters: []uint64{1}}
	if n := quiesceAfter(&alone, 1, 10); n != 2 {
		t.Fatalf("a group of this node alone quiesces after %d ticks, want 2", n)
	}
	for _, cs := range []*pb.ConfState{
		{Voters: []uint64{1, 2, 3}},
		{Voters: []uint64{1}, Learners: []uint64{2}},
		{Voters: []uint64{1}, VotersOutgoing: []uint64{1, 2}},
		{Voters: []uint64{2}},
	} {
		if n := quiesceAfter(cs, 1, 10); n != 20 {
			t.Fatalf("%v quiesces after %d ticks, want two election timeouts", cs, n)
		}
	}
}

func TestMessageActivity(t *testing.T) {
	for _, tt := range []struct {
		t              pb.MessageType
		wakes, actives bool
	}{
		{pb.MsgHeartbeatResp, false, false},
		{pb.MsgHeartbeat, true, false},
		{pb.MsgApp, true, true},
		{pb.MsgProp, true, true},
		{pb.MsgPreVote, true, true},
	} {
		wakes, active := messageActivity(tt.t)
		if wakes != tt.wakes || active != tt.actives {
			t.Errorf("%v: wakes %v, active %v; want %v, %v", tt.t, wakes, active, tt.wakes, tt.actives)
		}
	}
}

func TestReadyActive(t *testing.T) {
	beat := pb.Message{Type: pb.MsgHeartbeat}
	answer := pb.Message{Type: pb.MsgHeartbeatResp}
	app := pb.Message{Type: pb.MsgApp}
	if readyActive(0, []pb.Message{beat, answer}) {
		t.Fatal("heartbeats are activity")
	}
	if !readyActive(1, nil) {
		t.Fatal("entries to persist are not activity")
	}
	if !readyActive(0, []pb.Message{beat, app}) {
		t.Fatal("an append is not activity")
	}
}

func TestStillQuiet(t *testing.T) {
	up := map[uint64]bool{1: true, 2: true, 3: true}
	alive := func(n uint64) bool { return up[n] }
	voters := []uint64{1, 2, 3}
	if !stillQuiet(false, 2, voters, 1, alive) {
		t.Fatal("a follower whose leader answers woke")
	}
	if stillQuiet(false, 0, voters, 1, alive) {
		t.Fatal("a follower with no leader stays asleep")
	}
	if !stillQuiet(true, 1, voters, 1, alive) {
		t.Fatal("a leader whose followers answer woke")
	}
	up[3] = false
	if stillQuiet(true, 1, voters, 1, alive) {
		t.Fatal("a leader cut off from a follower stays asleep")
	}
	if stillQuiet(false, 3, voters, 1, alive) {
		t.Fatal("a follower whose leader is down stays asleep")
	}
}

func TestLeaderMayQuiesce(t *testing.T) {
	status := func(commit uint64, match2 uint64) raft.Status {
		var st raft.Status
		st.HardState = pb.HardState{Commit: commit}
		st.Progress = map[uint64]tracker.Progress{1: {Match: 10}, 2: {Match: match2}}
		return st
	}
	alive := func(uint64) bool { return true }
	if !leaderMayQuiesce(status(10, 10), 1, 10, 10, alive) {
		t.Fatal("a caught-up group may not quiesce")
	}
	if leaderMayQuiesce(status(9, 10), 1, 10, 10, alive) {
		t.Fatal("quiesced with an entry not committed")
	}
	if leaderMayQuiesce(status(10, 10), 1, 10, 9, alive) {
		t.Fatal("quiesced with an entry not applied")
	}
	if leaderMayQuiesce(status(10, 9), 1, 10, 10, alive) {
		t.Fatal("quiesced with a follower behind")
	}
	if leaderMayQuiesce(status(10, 10), 1, 10, 10, func(n uint64) bool { return n != 2 }) {
		t.Fatal("quiesced with a follower's node down")
	}
	st := status(10, 10)
	st.LeadTransferee = 2
	if leaderMayQuiesce(st, 1, 10, 10, alive) {
		t.Fatal("quiesced while handing over")
	}
}

func TestFollowerMayQuiesce(t *testing.T) {
	var st raft.BasicStatus
	st.Lead = 2
	st.HardState = pb.HardState{Term: 5, Commit: 10}
	m := pb.Message{From: 2, Term: 5, Commit: 10}
	if !followerMayQuiesce(&m, st, 10, 10) {
		t.Fatal("a caught-up follower may not quiesce")
	}
	if followerMayQuiesce(&m, st, 11, 10) {
		t.Fatal("quiesced with a log longer than the leader's commit")
	}
	if followerMayQuiesce(&m, st, 10, 9) {
		t.Fatal("quiesced with an entry not applied")
	}
	other := pb.Message{From: 3, Term: 5, Commit: 10}
	if followerMayQuiesce(&other, st, 10, 10) {
		t.Fatal("quiesced on the word of a node that does not lead")
	}
}
