package host

import (
	"context"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	pb "go.etcd.io/raft/v3/raftpb"

	"herald/internal/vfs"
)

// TestLeaderAppendsWhileItsFsyncRuns holds the leader's fdatasync and
// checks that both followers receive and persist the entry meanwhile, so
// that the leader's write and theirs overlap; the proposal is answered
// once the leader's sync is done.
func TestLeaderAppendsWhileItsFsyncRuns(t *testing.T) {
	gate := newSyncGate()
	_, hosts, machines := wireLedByNode1(t, func(c *Config) {
		c.ElectionTicks = 100_000
		if c.NodeID == 1 {
			c.FS = gate
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	// The leader sends an append at once only to a follower it knows to
	// replicate to; one it still probes gets the entry when its answer is
	// stepped, and the held fsync stops the leader's worker before that.
	eventually(t, "the leader replicates to both followers", func() bool {
		m, err := hosts[1].Membership(ctx, 1)
		if err != nil {
			t.Fatal(err)
		}
		return m.CaughtUp(2) && m.CaughtUp(3)
	})
	before := lastIndex(t, hosts[2])

	gate.hold()
	t.Cleanup(gate.release) // before the hosts close, on failure too
	p := hosts[1].Start(ctx, 1, Bytes([]byte("x")))
	eventually(t, "both followers hold the entry", func() bool {
		return lastIndex(t, hosts[2]) > before && lastIndex(t, hosts[3]) > before
	})
	// The leader's fsync cannot have returned: the gate holds it. That it
	// reaches the gate shows it ran (its goroutine may start late on a
	// busy machine); if it never does, the test proves nothing.
	eventually(t, "the leader's fsync waits at the gate", func() bool { return gate.waiting.Load() > 0 })
	gate.release()
	if _, err := p.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	if got := applied(t, hosts, machines, 1); len(got) == 0 || got[len(got)-1] != "x" {
		t.Fatalf("the leader applied %q", got)
	}
}

func lastIndex(t *testing.T, h *Host) uint64 {
	t.Helper()
	var last uint64
	err := h.onLoop(context.Background(), 1, func(g *group) error {
		var err error
		last, err = g.storage.LastIndex()
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return last
}

// syncGate is a file system whose fdatasyncs wait, while it is held,
// until it is released.
type syncGate struct {
	vfs.FS
	mu      sync.Mutex
	open    chan struct{} // closed: syncs pass
	waiting atomic.Int32  // syncs waiting now
}

func newSyncGate() *syncGate {
	open := make(chan struct{})
	close(open)
	return &syncGate{FS: vfs.OS, open: open}
}

func (g *syncGate) hold() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.open = make(chan struct{})
}

func (g *syncGate) release() {
	g.mu.Lock()
	defer g.mu.Unlock()
	select {
	case <-g.open:
	default:
		close(g.open)
	}
}

func (g *syncGate) wait() {
	g.mu.Lock()
	open := g.open
	g.mu.Unlock()
	g.waiting.Add(1)
	defer g.waiting.Add(-1)
	<-open
}

func (g *syncGate) OpenFile(name string, flag int, perm os.FileMode) (vfs.File, error) {
	f, err := g.FS.OpenFile(name, flag, perm)
	if err != nil {
		return nil, err
	}
	return gatedFile{File: f, gate: g}, nil
}

type gatedFile struct {
	vfs.File
	gate *syncGate
}

func (f gatedFile) SyncData() error {
	f.gate.wait()
	return f.File.SyncData()
}

// TestSplitMessages checks which messages wait for the Ready to be
// durable: the answers that vouch for it, and only those.
func TestSplitMessages(t *testing.T) {
	msg := func(typ pb.MessageType) pb.Message { return pb.Message{Type: typ} }
	all := []pb.Message{
		msg(pb.MsgApp), msg(pb.MsgAppResp), msg(pb.MsgHeartbeat), msg(pb.MsgVoteResp),
		msg(pb.MsgProp), msg(pb.MsgPreVoteResp), msg(pb.MsgSnap), msg(pb.MsgVote),
	}
	early, late := splitMessages(all)
	for _, m := range early {
		if vouches(&m) {
			t.Errorf("%v goes out before the Ready is durable", m.Type)
		}
	}
	if len(late) != 3 || len(early) != 5 {
		t.Errorf("early %v, late %v; want 5 and the 3 answers", early, late)
	}
	if e, l := splitMessages(all[:1]); len(e) != 1 || l != nil {
		t.Errorf("an append alone: early %v, late %v", e, l)
	}
}
