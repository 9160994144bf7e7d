package host

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"

	raft "go.etcd.io/raft/v3"
	pb "go.etcd.io/raft/v3/raftpb"

	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"herald/internal/vfs"
)

// listMachine appends every command to a list. Its snapshot is the list.
type listMachine struct {
	cmds    []string
	indexes []uint64
	// keepFrom, when set, makes CompactIndex report that entries from this
	// index on are still needed.
	keepFrom uint64
}

func (m *listMachine) Apply(index uint64, cmd []byte) any {
	m.cmds = append(m.cmds, string(cmd))
	m.indexes = append(m.indexes, index)
	return len(m.cmds)
}

func (m *listMachine) Snapshot() ([]byte, error) {
	var b []byte
	for i, c := range m.cmds {
		b = binary.AppendUvarint(b, m.indexes[i])
		b = binary.AppendUvarint(b, uint64(len(c)))
		b = append(b, c...)
	}
	return b, nil
}

func (m *listMachine) Restore(data []byte) error {
	m.cmds, m.indexes = nil, nil
	for len(data) > 0 {
		idx, n := binary.Uvarint(data)
		data = data[n:]
		l, n := binary.Uvarint(data)
		data = data[n:]
		m.indexes = append(m.indexes, idx)
		m.cmds = append(m.cmds, string(data[:l]))
		data = data[l:]
	}
	return nil
}

func (m *listMachine) CompactIndex() uint64 {
	if m.keepFrom > 0 {
		return m.keepFrom
	}
	if len(m.indexes) == 0 {
		return 1
	}
	return m.indexes[len(m.indexes)-1] + 1
}

func quietLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func newTestHost(t *testing.T, dir string, mod func(*Config)) *Host {
	t.Helper()
	h, err := openTestHost(t, dir, mod)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// openTestHost is newTestHost returning the error: after a crash, the
// node's write-ahead log may refuse to open.
func openTestHost(t *testing.T, dir string, mod func(*Config)) (*Host, error) {
	cfg := Config{Dir: dir, TickInterval: 10 * time.Millisecond, Logger: quietLogger()}
	if mod != nil {
		mod(&cfg)
	}
	h, err := New(cfg)
	if err != nil {
		return nil, err
	}
	t.Cleanup(func() { h.Close() })
	return h, nil
}

func propose(t *testing.T, h *Host, group uint64, cmd string) int {
	t.Helper()
	return proposeResult(t, h, group, cmd).(int)
}

// proposeResult proposes cmd to group and returns what its state machine
// answered.
func proposeResult(t *testing.T, h *Host, group uint64, cmd string) any {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	r, err := h.Propose(ctx, group, Bytes([]byte(cmd)))
	if err != nil {
		t.Fatalf("propose %q: %v", cmd, err)
	}
	return r
}

// proposeConcurrently has writers propose each commands apiece to group
// at once, writer w's i-th being "w<w>-<i>", and waits for them all.
func proposeConcurrently(t *testing.T, h *Host, group uint64, writers, each int) {
	var wg sync.WaitGroup
	for w := range writers {
		wg.Go(func() {
			for i := range each {
				propose(t, h, group, fmt.Sprintf("w%d-%d", w, i))
			}
		})
	}
	wg.Wait()
}

func machineState(t *testing.T, h *Host, group uint64) []string {
	t.Helper()
	var cmds []string
	err := h.View(context.Background(), group, func(sm StateMachine, _ uint64) {
		cmds = append(cmds, sm.(*listMachine).cmds...)
	})
	if err != nil {
		t.Fatal(err)
	}
	return cmds
}

func TestProposeAppliesInOrderAndSurvivesRestart(t *testing.T) {
	dir := t.TempDir()
	h := newTestHost(t, dir, nil)
	if err := h.AddGroup(GroupConfig{ID: 1, Name: "g1", StateMachine: &listMachine{}}); err != nil {
		t.Fatal(err)
	}
	for i := range 100 {
		if got := propose(t, h, 1, fmt.Sprint("cmd", i)); got != i+1 {
			t.Fatalf("result of proposal %d = %d, want %d", i, got, i+1)
		}
	}
	h.Close()

	h2 := newTestHost(t, dir, nil)
	if err := h2.AddGroup(GroupConfig{ID: 1, Name: "g1", StateMachine: &listMachine{}}); err != nil {
		t.Fatal(err)
	}
	// The group replays its log on restart; a new proposal is applied after it.
	if got := propose(t, h2, 1, "after"); got != 101 {
		t.Fatalf("first proposal after restart got result %d, want 101", got)
	}
	cmds := machineState(t, h2, 1)
	for i := range 100 {
		if cmds[i] != fmt.Sprint("cmd", i) {
			t.Fatalf("after restart cmds[%d] = %q", i, cmds[i])
		}
	}
}

func TestConcurrentProposalsBatchIntoFewSyncs(t *testing.T) {
	h := newTestHost(t, t.TempDir(), nil)
	if err := h.AddGroup(GroupConfig{ID: 1, Name: "g", StateMachine: &listMachine{}}); err != nil {
		t.Fatal(err)
	}
	propose(t, h, 1, "warm-up")
	before := h.Stats().Fsyncs.Load()
	const writers, each = 32, 50
	proposeConcurrently(t, h, 1, writers, each)
	syncs := h.Stats().Fsyncs.Load() - before
	if syncs >= writers*each {
		t.Fatalf("%d proposals took %d fsyncs: concurrent proposals are not group-committed", writers*each, syncs)
	}
	cmds := machineState(t, h, 1)
	if len(cmds) != writers*each+1 {
		t.Fatalf("applied %d commands, want %d", len(cmds), writers*each+1)
	}
	// Each writer's proposals are applied in the order it made them.
	next := make(map[int]int)
	for _, c := range cmds[1:] {
		var w, i int
		fmt.Sscanf(c, "w%d-%d", &w, &i)
		if next[w] != i {
			t.Fatalf("writer %d: applied %d, expected %d", w, i, next[w])
		}
		next[w]++
	}
}

// TestConcurrentProposalsShareAppendMessages: proposals waiting together
// are proposed as one, so a follower receives them in one append message
// rather than one message each.
func TestConcurrentProposalsShareAppendMessages(t *testing.T) {
	w := &wire{hosts: make(map[uint64]*Host)}
	hosts := map[uint64]*Host{}
	for id := uint64(1); id <= 3; id++ {
		hosts[id] = w.host(t, id)
		if err := hosts[id].AddGroup(GroupConfig{ID: 1, Name: "g", Peers: []uint64{1, 2, 3}, Campaign: id == 1, StateMachine: &listMachine{}}); err != nil {
			t.Fatal(err)
		}
	}
	var leader *Host
	eventually(t, "a leader is elected", func() bool {
		l, _ := hosts[1].Leader(1)
		leader = hosts[l]
		return leader != nil
	})
	propose(t, leader, 1, "warm-up")
	w.mu.Lock()
	before := w.appends
	w.mu.Unlock()
	const writers, each = 32, 20
	proposeConcurrently(t, leader, 1, writers, each)
	w.mu.Lock()
	appends := w.appends - before
	w.mu.Unlock()
	// One message per proposal and follower would be 2*writers*each, and
	// more with the retries of appends; one per batch is far fewer.
	if appends >= writers*each {
		t.Fatalf("%d proposals went to 2 followers in %d append messages: concurrent proposals are sent one by one", writers*each, appends)
	}
	t.Logf("%d proposals, %d append messages", writers*each, appends)
}

// TestProposeAsLeaderOnAFollowerIsRefused: a follower does not pass a
// leader-only proposal on to the leader, as it does others; the leader
// takes it.
func TestProposeAsLeaderOnAFollowerIsRefused(t *testing.T) {
	w := &wire{hosts: make(map[uint64]*Host)}
	hosts := map[uint64]*Host{}
	machines := map[uint64]*listMachine{}
	for id := uint64(1); id <= 3; id++ {
		hosts[id] = w.host(t, id)
		machines[id] = &listMachine{}
		if err := hosts[id].AddGroup(GroupConfig{ID: 1, Name: "g", Peers: []uint64{1, 2, 3}, Campaign: id == 1, StateMachine: machines[id]}); err != nil {
			t.Fatal(err)
		}
	}
	var leader uint64
	eventually(t, "a leader is elected", func() bool {
		leader, _ = hosts[1].Leader(1)
		return leader != 0
	})
	follower := leader%3 + 1
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := hosts[follower].ProposeAsLeader(ctx, 1, Bytes([]byte("from a follower"))); !errors.Is(err, ErrNotLeader) {
		t.Fatalf("leader-only proposal on follower %d: %v, want ErrNotLeader", follower, err)
	}
	if _, err := hosts[follower].Propose(ctx, 1, Bytes([]byte("forwarded"))); err != nil {
		t.Fatalf("plain proposal on follower %d: %v", follower, err)
	}
	if _, err := hosts[leader].ProposeAsLeader(ctx, 1, Bytes([]byte("from the leader"))); err != nil {
		t.Fatalf("leader-only proposal on leader %d: %v", leader, err)
	}
	var cmds []string
	if err := hosts[leader].View(ctx, 1, func(StateMachine, uint64) { cmds = slices.Clone(machines[leader].cmds) }); err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(cmds, "from the leader") || slices.Contains(cmds, "from a follower") {
		t.Fatalf("the leader applied %q: want the leader's leader-only command and not the follower's", cmds)
	}
}

func TestSnapshotsCompactLogAndRestore(t *testing.T) {
	for _, sync := range []bool{false, true} {
		t.Run(fmt.Sprintf("sync=%v", sync), func(t *testing.T) {
			dir := t.TempDir()
			mod := func(c *Config) {
				c.SnapshotEntries = 20
				c.SegmentSize = 2048
				c.SyncSnapshots = sync
			}
			h := newTestHost(t, dir, mod)
			if err := h.AddGroup(GroupConfig{ID: 7, Name: "g7", StateMachine: &listMachine{}}); err != nil {
				t.Fatal(err)
			}
			for i := range 300 {
				propose(t, h, 7, fmt.Sprintf("entry-%03d-%s", i, make([]byte, 40)))
			}
			st := waitFor(t, h, 7, func(st Status) bool { return st.SnapIndex >= 280 && st.FirstIndex > 100 })
			if st.LogSegments > 5 {
				t.Errorf("log still has %d segments after compaction", st.LogSegments)
			}
			h.Close()

			h2 := newTestHost(t, dir, mod)
			if err := h2.AddGroup(GroupConfig{ID: 7, Name: "g7", StateMachine: &listMachine{}}); err != nil {
				t.Fatal(err)
			}
			propose(t, h2, 7, "last")
			cmds := machineState(t, h2, 7)
			if len(cmds) != 301 {
				t.Fatalf("restored %d commands, want 301", len(cmds))
			}
			for i := range 300 {
				if want := fmt.Sprintf("entry-%03d-%s", i, make([]byte, 40)); cmds[i] != want {
					t.Fatalf("cmds[%d] = %q", i, cmds[i])
				}
			}
		})
	}
}

func TestCompactionKeepsEntriesTheStateMachineNeeds(t *testing.T) {
	h := newTestHost(t, t.TempDir(), func(c *Config) {
		c.SnapshotEntries = 10
		c.SegmentSize = 1024
	})
	sm := &listMachine{keepFrom: 5}
	if err := h.AddGroup(GroupConfig{ID: 1, Name: "g", StateMachine: sm}); err != nil {
		t.Fatal(err)
	}
	for i := range 200 {
		propose(t, h, 1, fmt.Sprintf("entry-%03d-%s", i, make([]byte, 40)))
	}
	waitFor(t, h, 1, func(st Status) bool { return st.SnapIndex >= 150 })
	// Entry 5 is still needed: it must be readable even though snapshots passed it.
	cmd, err := h.Entry(1, 5)
	if err != nil {
		t.Fatalf("entry the state machine still needs was compacted: %v", err)
	}
	if want := fmt.Sprintf("entry-%03d-%s", 2, make([]byte, 40)); string(cmd) != want {
		// Index 1 is the bootstrap snapshot, 2 the leader's empty entry, so
		// proposal 2 sits at index 5.
		t.Fatalf("entry 5 = %q, want %q", cmd, want)
	}
}

func TestErrors(t *testing.T) {
	h := newTestHost(t, t.TempDir(), nil)
	if _, err := h.Propose(context.Background(), 99, Bytes([]byte("x"))); !errors.Is(err, ErrUnknownGroup) {
		t.Fatalf("propose to unknown group: err = %v, want ErrUnknownGroup", err)
	}
	if err := h.AddGroup(GroupConfig{ID: 1, Name: "g", StateMachine: &listMachine{}}); err != nil {
		t.Fatal(err)
	}
	if err := h.AddGroup(GroupConfig{ID: 1, Name: "g", StateMachine: &listMachine{}}); err == nil {
		t.Fatal("adding a group id twice succeeded")
	}
	if err := h.RemoveGroup(1, true); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(h.cfg.Dir, "shards", "1-g")); !os.IsNotExist(err) {
		t.Fatalf("group directory still exists after RemoveGroup with deleteData: %v", err)
	}
	if _, err := h.Propose(context.Background(), 1, Bytes([]byte("x"))); !errors.Is(err, ErrUnknownGroup) {
		t.Fatalf("propose to removed group: err = %v", err)
	}
}

// Start hands a proposal over at once: proposals to several groups
// commit before any is waited for, and each Wait returns its own result.
func TestStartedProposalsCommitBeforeAnyIsWaitedFor(t *testing.T) {
	h := newTestHost(t, t.TempDir(), nil)
	const groups = 3
	for id := uint64(1); id <= groups; id++ {
		if err := h.AddGroup(GroupConfig{ID: id, Name: fmt.Sprint("g", id), StateMachine: &listMachine{}}); err != nil {
			t.Fatal(err)
		}
		propose(t, h, id, "first") // the group has a leader
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var started []*Proposal
	for id := uint64(1); id <= groups; id++ {
		started = append(started, h.Start(ctx, id, Bytes(fmt.Sprint("second in g", id))))
	}
	for id := uint64(1); id <= groups; id++ {
		for len(machineState(t, h, id)) < 2 {
			if ctx.Err() != nil {
				t.Fatalf("group %d did not apply its started proposal before it was waited for", id)
			}
			time.Sleep(time.Millisecond)
		}
	}
	for i := groups - 1; i >= 0; i-- {
		r, err := started[i].Wait(ctx)
		if err != nil || r != 2 {
			t.Fatalf("wait for the proposal to group %d: %v, %v; want result 2", i+1, r, err)
		}
	}
	if _, err := h.Start(ctx, 99, Bytes("x")).Wait(ctx); !errors.Is(err, ErrUnknownGroup) {
		t.Fatalf("start on an unknown group: err = %v, want ErrUnknownGroup", err)
	}
}

func TestAddGroupsOpensInParallelAndReportsFailures(t *testing.T) {
	h := newTestHost(t, t.TempDir(), func(c *Config) { c.BootParallelism = 4 })
	var gcs []GroupConfig
	for i := range 40 {
		gcs = append(gcs, GroupConfig{ID: uint64(i + 1), Name: fmt.Sprint("g", i), StateMachine: &listMachine{}})
	}
	gcs = append(gcs, GroupConfig{ID: 100, Name: "", StateMachine: &listMachine{}}) // invalid
	failed := h.AddGroups(context.Background(), gcs)
	if len(failed) != 1 || failed[100] == nil {
		t.Fatalf("failed = %v, want only group 100", failed)
	}
	for i := range 40 {
		propose(t, h, uint64(i+1), "hello")
	}
}

func waitFor(t *testing.T, h *Host, group uint64, cond func(Status) bool) Status {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		st, err := h.GroupStatus(group)
		if err != nil {
			t.Fatal(err)
		}
		if cond(st) {
			return st
		}
		if time.Now().After(deadline) {
			t.Fatalf("condition not reached; status %+v", st)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestCorruptedGroupFailsToOpenWithFileAndOffsetOthersRun(t *testing.T) {
	dir := t.TempDir()
	h := newTestHost(t, dir, func(c *Config) { c.SegmentSize = 1024 })
	for id, name := range map[uint64]string{1: "good", 2: "bad"} {
		if err := h.AddGroup(GroupConfig{ID: id, Name: name, StateMachine: &listMachine{}}); err != nil {
			t.Fatal(err)
		}
		for i := range 60 {
			propose(t, h, id, fmt.Sprintf("%s-%03d-%s", name, i, make([]byte, 30)))
		}
	}
	h.Close()
	// Flip a byte in the middle of the first segment of the bad group.
	segs, _ := filepath.Glob(filepath.Join(dir, "shards", "2-bad", "log", "*"))
	if len(segs) < 2 {
		t.Fatalf("expected several segments, got %v", segs)
	}
	b, _ := os.ReadFile(segs[0])
	b[len(b)/2] ^= 0x55
	os.WriteFile(segs[0], b, 0o644)

	h2 := newTestHost(t, dir, func(c *Config) { c.SegmentSize = 1024 })
	failed := h2.AddGroups(context.Background(), []GroupConfig{
		{ID: 1, Name: "good", StateMachine: &listMachine{}},
		{ID: 2, Name: "bad", StateMachine: &listMachine{}},
	})
	err := failed[2]
	if err == nil || !strings.Contains(err.Error(), segs[0]) || !strings.Contains(err.Error(), "offset") {
		t.Fatalf("opening the corrupted group: err = %v, want one naming %s and the byte offset", err, segs[0])
	}
	if failed[1] != nil {
		t.Fatalf("the healthy group failed too: %v", failed[1])
	}
	if got := len(machineState(t, h2, 1)); got != 60 {
		t.Fatalf("healthy group has %d commands after restart, want 60", got)
	}
}

// A group that never goes idle must still finish background snapshots and
// take new ones (the loop must not starve the snapshotter's completion).
func TestAsyncSnapshotsKeepUpUnderContinuousLoad(t *testing.T) {
	h := newTestHost(t, t.TempDir(), func(c *Config) { c.SnapshotEntries = 100 })
	if err := h.AddGroup(GroupConfig{ID: 1, Name: "g", StateMachine: &listMachine{}}); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for w := range 16 {
		wg.Go(func() {
			for i := range 200 {
				propose(t, h, 1, fmt.Sprintf("w%d-%d", w, i))
			}
		})
	}
	wg.Wait()
	if n := h.Stats().Snapshots.Load(); n < 10 {
		t.Fatalf("%d snapshots for 3,200 entries at one per 100: background snapshots stalled under load", n)
	}
}

// asyncListMachine captures its state on the loop and encodes it when the
// host asks, off the loop.
type asyncListMachine struct {
	*listMachine
	encoded *atomic.Int64
}

func (m asyncListMachine) SnapshotFunc() func() ([]byte, error) {
	frozen := &listMachine{cmds: slices.Clone(m.cmds), indexes: slices.Clone(m.indexes)}
	return func() ([]byte, error) {
		m.encoded.Add(1)
		return frozen.Snapshot()
	}
}

func TestDeferredSnapshotEncodingRestores(t *testing.T) {
	dir := t.TempDir()
	var encoded atomic.Int64
	mod := func(c *Config) { c.SnapshotEntries = 20; c.SegmentSize = 2048 }
	h := newTestHost(t, dir, mod)
	if err := h.AddGroup(GroupConfig{ID: 1, Name: "g", StateMachine: asyncListMachine{&listMachine{}, &encoded}}); err != nil {
		t.Fatal(err)
	}
	for i := range 200 {
		propose(t, h, 1, fmt.Sprintf("entry-%03d-%s", i, make([]byte, 40)))
	}
	waitFor(t, h, 1, func(st Status) bool { return st.SnapIndex >= 180 && st.FirstIndex > 50 })
	if encoded.Load() == 0 {
		t.Fatal("the host never used SnapshotFunc")
	}
	h.Close()
	h2 := newTestHost(t, dir, mod)
	if err := h2.AddGroup(GroupConfig{ID: 1, Name: "g", StateMachine: &listMachine{}}); err != nil {
		t.Fatal(err)
	}
	cmds := machineState(t, h2, 1)
	if len(cmds) != 200 || cmds[199] != fmt.Sprintf("entry-%03d-%s", 199, make([]byte, 40)) {
		t.Fatalf("restored %d commands from a deferred snapshot, want 200", len(cmds))
	}
}

// Proposals queued when a replica wins an election are taken by the new
// leader before it processes its own election; they are in its log and
// must be answered with their results, not with ErrOutcomeUnknown.
func TestProposalsTakenByANewLeaderAreAnswered(t *testing.T) {
	h := newTestHost(t, t.TempDir(), func(c *Config) { c.ElectionTicks = 100_000 })
	if err := h.AddGroup(GroupConfig{ID: 1, Name: "g", StateMachine: &listMachine{}}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, h, 1, func(s Status) bool { return s.IsLeader })
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	// A heartbeat of a later term from a node that is not a member makes
	// the leader step down and follow it.
	err := h.onLoop(ctx, 1, func(g *group) error {
		term := g.rn.BasicStatus().Term
		return g.rn.Step(pb.Message{Type: pb.MsgHeartbeat, From: 2, To: 1, Term: term + 1})
	})
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, h, 1, func(s Status) bool { return !s.IsLeader })

	// The group's only voter campaigns. Raft counts its own vote once the
	// Ready that persists it is done, so the replica leads from then on,
	// but the Ready that says so is the next one.
	if err := h.onLoop(ctx, 1, func(g *group) error { return g.rn.Campaign() }); err != nil {
		t.Fatal(err)
	}
	// Once raft says the replica leads, the loop holds still until every
	// proposal waits in its queue; the next Ready then takes them together
	// with the news of the election.
	const proposers = 8
	held := make(chan error, 1)
	holding := make(chan struct{})
	go func() {
		for {
			leads := false
			err := h.onLoop(ctx, 1, func(g *group) error {
				if leads = g.rn.BasicStatus().RaftState == raft.StateLeader; !leads {
					return nil
				}
				close(holding)
				for len(g.propc) < proposers {
					if ctx.Err() != nil {
						return ctx.Err()
					}
					time.Sleep(time.Millisecond)
				}
				return nil
			})
			if leads || err != nil {
				held <- err
				return
			}
		}
	}()
	select {
	case <-holding:
	case err := <-held:
		t.Fatalf("the replica never led: %v", err)
	}
	var wg sync.WaitGroup
	errs := make(chan error, proposers)
	for p := range proposers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := h.Propose(ctx, 1, Bytes([]byte(fmt.Sprint("p", p)))); err != nil {
				errs <- fmt.Errorf("proposer %d: %w", p, err)
			}
		}()
	}
	wg.Wait()
	close(errs)
	if err := <-held; err != nil {
		t.Fatal(err)
	}
	for err := range errs {
		t.Error(err)
	}
	if got := len(machineState(t, h, 1)); got != proposers {
		t.Errorf("the group applied %d proposals, want %d", got, proposers)
	}
}

// Groups persisting at the same moment share one fdatasync of the node's
// WAL: with sixteen groups each proposing one command at a time (so every
// proposal needs a Ready of its own group), the fdatasyncs made are far
// fewer than the proposals.
func TestGroupsShareTheWALsFsyncs(t *testing.T) {
	// Each fdatasync takes at least a millisecond, as on a fast disk; the
	// groups that persist meanwhile wait for the next one.
	slow := slowSyncFS{FS: vfs.OS, delay: time.Millisecond}
	h := newTestHost(t, t.TempDir(), func(c *Config) { c.FS = slow })
	const groups, each = 16, 40
	for id := uint64(1); id <= groups; id++ {
		if err := h.AddGroup(GroupConfig{ID: id, Name: fmt.Sprint("g", id), StateMachine: &listMachine{}}); err != nil {
			t.Fatal(err)
		}
		propose(t, h, id, "warm-up")
	}
	walSyncs := h.wal.SyncCount()
	var wg sync.WaitGroup
	for id := uint64(1); id <= groups; id++ {
		wg.Go(func() {
			for i := range each {
				propose(t, h, id, fmt.Sprint("c", i))
			}
		})
	}
	wg.Wait()
	walSyncs = h.wal.SyncCount() - walSyncs
	t.Logf("%d proposals made durable with %d WAL fdatasyncs", groups*each, walSyncs)
	if walSyncs*4 > groups*each {
		t.Fatalf("%d proposals, each waited for before the next, took %d fdatasyncs of the WAL: groups do not share them", groups*each, walSyncs)
	}
}

// slowSyncFS makes every fdatasync of a file take at least delay longer.
type slowSyncFS struct {
	vfs.FS
	delay time.Duration
}

func (s slowSyncFS) OpenFile(name string, flag int, perm os.FileMode) (vfs.File, error) {
	f, err := s.FS.OpenFile(name, flag, perm)
	if err != nil {
		return nil, err
	}
	return slowSyncFile{File: f, delay: s.delay}, nil
}

type slowSyncFile struct {
	vfs.File
	delay time.Duration
}

func (f slowSyncFile) SyncData() error {
	time.Sleep(f.delay)
	return f.File.SyncData()
}

// A group not added before Booted (a replica the node's controller did not
// know of yet at the start) still gets what the WAL held for it: Booted
// replays it into the group's directory before the WAL drops it.
func TestBootedReplaysTheWALIntoGroupsNotYetAdded(t *testing.T) {
	fs := vfs.NewMem()
	cfg := func(boot string) func(*Config) {
		return func(c *Config) { c.FS, c.BootID = fs, boot }
	}
	h := newTestHost(t, "/data", cfg("boot-1"))
	if err := h.AddGroup(GroupConfig{ID: 1, Name: "g", StateMachine: &listMachine{}}); err != nil {
		t.Fatal(err)
	}
	for i := range 20 {
		propose(t, h, 1, fmt.Sprint("c", i)) // acknowledged: in the WAL, not yet in the group's log
	}
	fs = fs.CrashClone(nil)
	h.Close()

	h2 := newTestHost(t, "/data", cfg("boot-2"))
	h2.Booted()
	if err := h2.wal.Checkpoint(); err != nil { // drops what the WAL held
		t.Fatal(err)
	}
	if err := h2.AddGroup(GroupConfig{ID: 1, Name: "g", StateMachine: &listMachine{}}); err != nil {
		t.Fatal(err)
	}
	if got := machineState(t, h2, 1); len(got) != 20 {
		t.Fatalf("the group holds %d of its 20 acknowledged commands after a power loss", len(got))
	}
}

// TestLargeSnapshotsAreTakenLessOften checks that once a group's snapshot
// reaches snapshotCostFloor, the next waits for snapshotCostFactor times
// Config.SnapshotEntries entries (or as many times its size in entry
// bytes), where smaller snapshots came every SnapshotEntries entries.
func TestLargeSnapshotsAreTakenLessOften(t *testing.T) {
	const every = 5
	h := newTestHost(t, t.TempDir(), func(c *Config) {
		c.SnapshotEntries = every
		c.SyncSnapshots = true // taken as entries apply: at known indexes
	})
	if err := h.AddGroup(GroupConfig{ID: 1, Name: "g", StateMachine: &listMachine{}}); err != nil {
		t.Fatal(err)
	}
	big := strings.Repeat("x", 64<<10)
	proposeN := func(n int) {
		for range n {
			propose(t, h, 1, big)
		}
	}
	// The list's snapshot passes a megabyte at the 16th command.
	proposeN(24)
	st := waitFor(t, h, 1, func(st Status) bool { return st.Applied >= 25 })
	large := st.SnapIndex
	if large < 17 {
		t.Fatalf("snapshot at index %d after 25 entries, every %d; want one of a megabyte or more, at 17 or later", large, every)
	}
	// Fewer than snapshotCostFactor*every entries since: no snapshot.
	remaining := int(large) + snapshotCostFactor*every - 25 - 1
	proposeN(remaining)
	st = waitFor(t, h, 1, func(st Status) bool { return st.Applied >= 25+uint64(remaining) })
	if st.SnapIndex != large {
		t.Fatalf("snapshot at index %d, %d entries after one of %d bytes or more at %d; want none before %d entries",
			st.SnapIndex, st.Applied-large, snapshotCostFloor, large, snapshotCostFactor*every)
	}
	proposeN(2)
	waitFor(t, h, 1, func(st Status) bool { return st.SnapIndex > large })
}
