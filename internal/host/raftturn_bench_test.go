package host

import (
	"fmt"
	"testing"

	"go.etcd.io/raft/v3"
	pb "go.etcd.io/raft/v3/raftpb"
)

// BenchmarkRaftTurn measures what etcd raft alone, configured as a host's
// groups are (raftConfig), costs per entry on a group whose only voter is
// this node, as a host's groups are on a single node: a proposal stepped
// in, the Ready with its entries taken and handed to a memory storage,
// raft advanced, and the second Ready, which commits them, taken and
// advanced. Nothing else runs: no WAL, no apply, no scheduler. b.N counts
// entries of 1 KiB.
//
// entries is how many entries each turn takes: 64 is one shard under the
// node benchmark's 64 publishers (BenchmarkPublish in internal/node), 1
// is the same load spread over 100 shards, where a turn takes about one
// event. groups is how many groups the turns go round, so that 100 groups
// pay for their state falling out of the processor's caches as the
// node's do. What a turn of one entry costs beyond a sixty-fourth of a
// turn of 64 is the least that spreading events over groups costs per
// event, however the host schedules them.
func BenchmarkRaftTurn(b *testing.B) {
	for _, c := range []struct{ entries, groups int }{{64, 1}, {1, 1}, {1, 100}} {
		b.Run(fmt.Sprintf("entries=%d/groups=%d", c.entries, c.groups), func(b *testing.B) {
			benchRaftTurn(b, c.entries, c.groups)
		})
	}
}

func benchRaftTurn(b *testing.B, entries, groups int) {
	nodes := make([]*soleVoter, groups)
	for i := range nodes {
		nodes[i] = newSoleVoter(b)
	}
	payload := make([]byte, 1024)
	b.ReportAllocs()
	b.ResetTimer()
	for done, turn := 0, 0; done < b.N; turn++ {
		n := min(entries, b.N-done)
		nodes[turn%groups].turn(b, payload, n)
		done += n
	}
}

// soleVoter is a raft group of one voter on a memory storage.
type soleVoter struct {
	rn      *raft.RawNode
	storage *raft.MemoryStorage
}

func newSoleVoter(b *testing.B) *soleVoter {
	storage := raft.NewMemoryStorage()
	voters := []uint64{1}
	if err := storage.ApplySnapshot(pb.Snapshot{Metadata: pb.SnapshotMetadata{
		Index: 1, Term: 1, ConfState: pb.ConfState{Voters: voters},
	}}); err != nil {
		b.Fatal(err)
	}
	cfg := Config{NodeID: 1}
	cfg.setDefaults()
	rn, err := raft.NewRawNode(raftConfig(&cfg, storage, 0, quietLogger()))
	if err != nil {
		b.Fatal(err)
	}
	v := &soleVoter{rn: rn, storage: storage}
	if err := rn.Campaign(); err != nil {
		b.Fatal(err)
	}
	for rn.HasReady() {
		v.handleReady(b)
	}
	if st := rn.BasicStatus(); st.RaftState != raft.StateLeader {
		b.Fatalf("sole voter is %v after campaigning, not leader", st.RaftState)
	}
	return v
}

// turn proposes n entries of payload and handles the Readies until raft
// has committed them.
func (v *soleVoter) turn(b *testing.B, payload []byte, n int) {
	ents := make([]pb.Entry, n)
	for i := range ents {
		ents[i] = pb.Entry{Data: payload}
	}
	if err := v.rn.Step(pb.Message{Type: pb.MsgProp, From: 1, Entries: ents}); err != nil {
		b.Fatal(err)
	}
	for v.rn.HasReady() {
		v.handleReady(b)
	}
}

func (v *soleVoter) handleReady(b *testing.B) {
	rd := v.rn.Ready()
	if !raft.IsEmptyHardState(rd.HardState) {
		if err := v.storage.SetHardState(rd.HardState); err != nil {
			b.Fatal(err)
		}
	}
	if err := v.storage.Append(rd.Entries); err != nil {
		b.Fatal(err)
	}
	v.rn.Advance(rd)
	// Keep the storage small, as a host's group compacts its log.
	if last := len(rd.CommittedEntries); last > 0 {
		if err := v.storage.Compact(rd.CommittedEntries[last-1].Index); err != nil {
			b.Fatal(err)
		}
	}
}
