package robustness

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"herald/client"
	"herald/internal/testkit/history"
)

// TestFaults is a Jepsen-style fault suite: three real herald serve
// processes on loopback, each node-to-node link behind a fault proxy,
// clients publishing and consuming through every node while a nemesis
// SIGKILLs shard leaders and followers, kills two nodes one after the
// other and cuts a leader off from the others. After each fault it heals
// the cluster and waits until every shard takes writes through every node
// again. At the end it drains the topic and checks the history of
// everything the clients saw: no acknowledged publish lost, nothing
// consumed that was never published, each key in order, duplicates only
// of events in flight. While a node is down or cut off, the leaders of
// its shards compact their logs past its end: it catches up through a
// snapshot and the log entries from the delivery head up, and the suite
// checks from the nodes' metrics that such installs happened.
//
// The short form, run by `make test`, applies each fault once. The long
// form loops random faults, a wiped data directory and partitions that
// refuse connections or cut one way only among them:
// HERALD_FAULTS_DURATION=10m (or HERALD_FAULTS_LONG=1 for ten minutes),
// HERALD_FAULTS_SEED to replay a sequence, HERALD_FAULTS_ONLY=partition,wipe
// to choose the faults.
func TestFaults(t *testing.T) {
	runFaults(t, "kill-leader", "kill-follower", "partition", "kill-two")
}

// TestFaultsWipedDataDir kills a node, deletes its data directory and
// starts it again with the same --node-id and --peers, under load: it must
// rejoin, catch up, and then carry the cluster while another node is
// down.
func TestFaultsWipedDataDir(t *testing.T) {
	runFaults(t, "wipe")
}

// fault is one kind of fault the nemesis applies.
type fault struct {
	name string
	run  func(*nemesis)
}

var faultKinds = []fault{
	{"kill-leader", func(n *nemesis) { n.killLeader(n.rnd.IntN(faultShards)) }},
	{"kill-follower", func(n *nemesis) { n.killFollower(n.rnd.IntN(faultShards)) }},
	{"partition", func(n *nemesis) { n.partitionLeader(n.rnd.IntN(faultShards), silently) }},
	{"partition-refused", func(n *nemesis) { n.partitionLeader(n.rnd.IntN(faultShards), refused) }},
	{"partition-one-way", func(n *nemesis) { n.partitionLeader(n.rnd.IntN(faultShards), deaf) }},
	{"kill-two", func(n *nemesis) { n.killTwo(n.rnd.IntN(faultShards)) }},
	{"wipe", (*nemesis).wipeAndRejoin},
}

// runFaults starts a cluster and its clients, applies the faults named in
// short (each once, in order) or, in the long form, random faults of
// every kind, then heals, drains and checks the history.
func runFaults(t *testing.T, short ...string) {
	duration, seed := faultsConfig(t)
	names := short
	if duration > 0 {
		names = nil
		for _, f := range faultKinds {
			names = append(names, f.name)
		}
	}
	if only := os.Getenv("HERALD_FAULTS_ONLY"); only != "" {
		names = strings.Split(only, ",")
	}
	var faults []fault
	for _, name := range names {
		i := slices.IndexFunc(faultKinds, func(f fault) bool { return f.name == name })
		if i < 0 {
			t.Fatalf("HERALD_FAULTS_ONLY: no fault %q; name faults among kill-leader, kill-follower, partition, partition-refused, partition-one-way, kill-two, wipe", name)
		}
		faults = append(faults, faultKinds[i])
	}

	// Small snapshots and log files, so that the log is compacted under
	// the load, past the end of a follower's log while it is down or cut
	// off: it catches up through a snapshot and the entries from the
	// delivery head up (as does a replica that lost its data).
	c := newFaultCluster(t, "--snapshot-entries", "100", "--segment-size", "4096")
	admin := client.New("http://"+c.addrs[0], client.WithTimeout(10*time.Second))
	if _, err := admin.CreateTopic(context.Background(), faultTopic, map[string]string{"shards": strconv.Itoa(faultShards)}); err != nil {
		t.Fatal(err)
	}
	h := history.New()
	t.Logf("the history begins at %s (the nodes' logs are in UTC)", time.Now().UTC().Format("15:04:05.000"))
	nem := &nemesis{t: t, c: c, p: newProber(c, h), rnd: rand.New(rand.NewPCG(seed, seed))}
	if err := nem.p.serving(time.Minute); err != nil {
		t.Fatal(err)
	}
	nem.w = startWorkload(c, h, 3)
	t.Cleanup(nem.w.stop)
	nem.progress(50)

	began := time.Now()
	if duration == 0 {
		for _, f := range faults {
			f.run(nem)
			t.Logf("%s done at %v", f.name, time.Since(began).Round(time.Millisecond))
		}
	} else {
		t.Logf("long form: random faults among %v for %v, HERALD_FAULTS_SEED=%d", names, duration, seed)
		for end := time.Now().Add(duration); time.Now().Before(end) && !t.Failed(); {
			f := faults[nem.rnd.IntN(len(faults))]
			f.run(nem)
			t.Logf("%s done at %v", f.name, time.Since(began).Round(time.Millisecond))
		}
	}

	nem.w.stop()
	c.heal()
	for i := range c.n {
		if !c.up(i) {
			if err := c.start(i); err != nil {
				t.Errorf("final restart: %v", err)
			}
		}
	}
	if err := nem.p.serving(time.Minute); err != nil {
		t.Errorf("after the last fault: %v", err)
	}
	nem.w.drain(t, 2*time.Minute)
	nem.replicasAgree(time.Minute)
	if n, err := c.snapshotInstalls(); err != nil {
		t.Errorf("count snapshot installs: %v", err)
	} else {
		t.Logf("replicas installed %v snapshots from their leaders, with %v log entries", n.snapshots, n.entries)
		switch {
		case n.snapshots == 0:
			t.Errorf("no replica installed a snapshot: the suite did not exercise a follower catching up past its leader's compacted log")
		case n.entries == 0:
			t.Errorf("no snapshot installed carried log entries: the suite did not exercise a replica fetching the events from the delivery head up with its snapshot")
		}
	}

	r := h.Check()
	t.Logf("history: %s", r)
	for i, v := range r.Violations {
		if i == 30 {
			t.Errorf("... and %d more violations", len(r.Violations)-i)
			break
		}
		t.Error(v)
	}
	if r.PublishedOK == 0 || r.Consumed == 0 {
		t.Errorf("the workload did nothing: %s", r)
	}
	logPercentiles(t, "failover after SIGKILL of a leader (kill → first write acknowledged by its shard)", nem.failovers)
	logPercentiles(t, "failover after cutting a leader off (cut → first write acknowledged by its shard)", nem.partitionFailovers)
}

// faultsConfig reads the long form's settings: its duration (0 for the
// short form) and the seed of its random choices.
func faultsConfig(t *testing.T) (time.Duration, uint64) {
	t.Helper()
	var d time.Duration
	if v := os.Getenv("HERALD_FAULTS_DURATION"); v != "" {
		var err error
		if d, err = time.ParseDuration(v); err != nil || d <= 0 {
			t.Fatalf("HERALD_FAULTS_DURATION=%q: want a positive duration such as 10m", v)
		}
	} else if os.Getenv("HERALD_FAULTS_LONG") == "1" {
		d = 10 * time.Minute
	}
	seed := uint64(1)
	if v := os.Getenv("HERALD_FAULTS_SEED"); v != "" {
		var err error
		if seed, err = strconv.ParseUint(v, 10, 64); err != nil {
			t.Fatalf("HERALD_FAULTS_SEED=%q: want a number", v)
		}
	}
	return d, seed
}

// nemesis applies the faults and checks what must hold during each.
type nemesis struct {
	t   *testing.T
	c   *faultCluster
	w   *workload
	p   *prober
	rnd *rand.Rand

	mu                 sync.Mutex
	failovers          []time.Duration
	partitionFailovers []time.Duration
}

// shardGroup is the name of shard s's Raft group, as nodes log it.
func shardGroup(s int) string {
	if s == 0 {
		return faultTopic
	}
	return fmt.Sprintf("%s.%d", faultTopic, s)
}

// leaderOf waits until some node says it leads shard s.
func (n *nemesis) leaderOf(s int) int {
	n.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		if l, ok := n.c.leaders.leader(shardGroup(s)); ok && n.c.up(l) {
			return l
		}
		if time.Now().After(deadline) {
			n.t.Fatalf("no node says it leads shard %d after 30s", s)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// ledBy returns the shards node leads.
func (n *nemesis) ledBy(node int) []int {
	var out []int
	for s := range faultShards {
		if l, ok := n.c.leaders.leader(shardGroup(s)); ok && l == node {
			out = append(out, s)
		}
	}
	return out
}

func (n *nemesis) others(node ...int) []int {
	var out []int
	for i := range n.c.n {
		if !slices.Contains(node, i) {
			out = append(out, i)
		}
	}
	return out
}

// failover waits until each of shards takes a write through the nodes in
// through, and records how long after start each first did.
func (n *nemesis) failover(shards, through []int, start time.Time, into *[]time.Duration, what string) {
	n.t.Helper()
	var wg sync.WaitGroup
	for _, s := range shards {
		wg.Go(func() {
			at, err := n.p.untilWrites(s, through, start.Add(time.Minute))
			if err != nil {
				n.t.Errorf("%s: %v", what, err)
				return
			}
			n.mu.Lock()
			*into = append(*into, at.Sub(start))
			n.mu.Unlock()
		})
	}
	wg.Wait()
}

// progress waits until the publishers have had another count publishes
// acknowledged.
func (n *nemesis) progress(count int64) {
	n.t.Helper()
	from := n.w.okPub.Load()
	deadline := time.Now().Add(time.Minute)
	for n.w.okPub.Load() < from+count {
		if time.Now().After(deadline) {
			n.t.Fatalf("the publishers had %d publishes acknowledged in a minute, want %d", n.w.okPub.Load()-from, count)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (n *nemesis) restart(node int, what string) {
	n.t.Helper()
	if err := n.c.start(node); err != nil {
		n.t.Fatalf("%s: restart: %v", what, err)
	}
}

func (n *nemesis) healed(what string) {
	n.t.Helper()
	n.c.heal()
	if err := n.p.serving(time.Minute); err != nil {
		n.t.Fatalf("%s, healed: %v", what, err)
	}
}

// killLeader SIGKILLs the leader of shard s; the others elect a new one
// for each shard it led, and serve.
func (n *nemesis) killLeader(s int) {
	l := n.leaderOf(s)
	what := fmt.Sprintf("SIGKILL node %d, leader of shard %d", l+1, s)
	n.t.Log(what)
	led := n.ledBy(l)
	start := time.Now()
	n.c.kill(l)
	n.failover(led, n.others(l), start, &n.failovers, what)
	n.behind(s, l, what)
	n.progress(30)
	n.restart(l, what)
	n.healed(what)
}

// killFollower SIGKILLs a follower of shard s: s's leader takes writes
// on at once. (The follower may lead other shards, which fail over.)
func (n *nemesis) killFollower(s int) {
	l := n.leaderOf(s)
	f := n.others(l)[n.rnd.IntN(n.c.n-1)]
	what := fmt.Sprintf("SIGKILL node %d, a follower of shard %d", f+1, s)
	n.t.Log(what)
	led := n.ledBy(f)
	start := time.Now()
	n.c.kill(f)
	if _, err := n.p.untilWrites(s, []int{l}, time.Now().Add(5*time.Second)); err != nil {
		n.t.Errorf("%s: its leader, node %d, should take writes on: %v", what, l+1, err)
	}
	n.failover(led, n.others(f), start, &n.failovers, what)
	n.behind(s, f, what)
	n.progress(30)
	n.restart(f, what)
	n.healed(what)
}

// behindCompaction is how many entries a fault writes to a shard while
// one of its replicas is down or cut off: with the suite's snapshots every
// 100 entries and log files of 4 KiB (some 40 entries), its leader
// compacts its log past the replica's end, and the replica catches up
// through a snapshot.
const behindCompaction = 200

// behind writes behindCompaction entries' worth of probes to shard s
// through the nodes other than node, which is down or cut off.
func (n *nemesis) behind(s, node int, what string) {
	n.t.Helper()
	start := time.Now()
	ok := n.p.burst(s, n.others(node), behindCompaction/2) // each probe is acknowledged too
	n.t.Logf("%s: %d probes to shard %d acknowledged in %v while node %d is away", what, ok, s, time.Since(start).Round(time.Millisecond), node+1)
}

// killTwo SIGKILLs the leader of shard s, then a second node: the one
// left has no majority and takes no write. Both come back.
func (n *nemesis) killTwo(s int) {
	a := n.leaderOf(s)
	b := n.others(a)[n.rnd.IntN(n.c.n-1)]
	last := n.others(a, b)[0]
	what := fmt.Sprintf("SIGKILL node %d (leader of shard %d), then node %d", a+1, s, b+1)
	n.t.Log(what)
	led := n.ledBy(a)
	start := time.Now()
	n.c.kill(a)
	n.failover(led, n.others(a), start, &n.failovers, what)
	n.behind(s, a, what)
	n.progress(10)
	n.c.kill(b)
	if err := n.p.probe(s, last); err == nil {
		n.t.Errorf("%s: node %d, alone, acknowledged a write", what, last+1)
	}
	n.restart(b, what)
	n.restart(a, what)
	n.healed(what)
}

// partitionLeader cuts the leader of shard s off from the other nodes,
// the way how says. The majority elects new leaders and serves; the
// cut-off node steps down from every group it led (CheckQuorum) and takes
// no write.
func (n *nemesis) partitionLeader(s int, how cutOff) {
	x := n.leaderOf(s)
	what := fmt.Sprintf("cut node %d, leader of shard %d, off %v", x+1, s, how)
	n.t.Log(what)
	led := n.ledBy(x)
	start := time.Now()
	n.c.isolate(x, how)
	n.failover(led, n.others(x), start, &n.partitionFailovers, what)

	groups := []string{"controller"}
	for s := range faultShards {
		groups = append(groups, shardGroup(s))
	}
	deadline := time.Now().Add(15 * time.Second)
	for _, g := range groups {
		for n.c.leaders.leads(x, g) && time.Now().Before(deadline) {
			time.Sleep(20 * time.Millisecond)
		}
		if n.c.leaders.leads(x, g) {
			n.t.Errorf("%s: it still leads group %s after %v: an isolated leader should step down", what, g, time.Since(start).Round(time.Millisecond))
		}
	}
	for s := range faultShards {
		if err := n.p.probe(s, x); err == nil {
			n.t.Errorf("%s: it acknowledged a write to shard %d", what, s)
		}
	}
	n.behind(s, x, what)
	n.progress(15) // slowly: a third of the publishes go to the cut-off node and time out
	n.healed(what)
}

// wipeAndRejoin kills a node, deletes its data directory and starts it
// again with the same id and peers: it must rejoin and catch up. Then
// another node is killed, so that every write needs the rebuilt node,
// and the final drain may read from it.
func (n *nemesis) wipeAndRejoin() {
	w := n.rnd.IntN(n.c.n)
	what := fmt.Sprintf("wipe node %d's data directory", w+1)
	// First large events: the log grows, and fetches carry megabytes and
	// take long, which widens the windows in which concurrent fetches and
	// acks race (that found a bug: an acknowledged event handed out again,
	// after its key's next one).
	filled := time.Now()
	n.p.fill(0, 24<<20)
	n.t.Logf("%s: first 24 MiB of 256 KiB events into shard 0, in %v", what, time.Since(filled).Round(time.Millisecond))
	// Then the consumers wait until the wiped node has caught up, while
	// every shard takes more than a snapshot's worth of events
	// (--snapshot-entries 100): the leaders' snapshots then hold events
	// not yet delivered, and the rebuilt replicas fetch those events' log
	// entries with their snapshots. Consumers that keep up would leave
	// none. The log below the pause is compacted all the same, so the
	// rebuilt replicas need snapshots.
	n.w.paused.Store(true)
	defer n.w.paused.Store(false)
	n.shardsGrow((w+1)%n.c.n, 110)
	n.t.Log(what)
	led := n.ledBy(w)
	start := time.Now()
	n.c.kill(w)
	n.failover(led, n.others(w), start, &n.failovers, what)
	n.c.wipe(w)
	n.progress(30)
	want := n.nextOffsets(n.others(w)[0])
	n.c.restored[w].Store(0)
	start = time.Now()
	if err := n.c.start(w); err != nil {
		n.t.Errorf("%s: restart: %v", what, err)
		return
	}
	if !n.caughtUp(w, want, time.Minute, what) {
		return
	}
	n.t.Logf("%s: node %d caught up in %v, its replicas restoring %d snapshots from their leaders",
		what, w+1, time.Since(start).Round(time.Millisecond), n.c.restored[w].Load())
	n.w.paused.Store(false)

	y := n.others(w)[n.rnd.IntN(n.c.n-1)]
	what = fmt.Sprintf("%s, then SIGKILL node %d", what, y+1)
	n.t.Log(what)
	led = n.ledBy(y)
	start = time.Now()
	n.c.kill(y)
	n.failover(led, n.others(y), start, &n.failovers, what)
	n.progress(30)
	n.restart(y, what)
	n.healed(what)
}

// shardsGrow waits until every shard, as node sees it, has taken by
// events more than it had.
func (n *nemesis) shardsGrow(node int, by uint64) {
	n.t.Helper()
	from := n.nextOffsets(node)
	deadline := time.Now().Add(2 * time.Minute)
	for {
		now := n.nextOffsets(node)
		grown := true
		for s := range now {
			grown = grown && now[s] >= from[s]+by
		}
		if grown {
			return
		}
		if time.Now().After(deadline) {
			n.t.Fatalf("in two minutes the shards grew from %v to %v events, want %d more each", from, now, by)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// nextOffsets returns each shard's next offset in node's replica.
func (n *nemesis) nextOffsets(node int) []uint64 {
	n.t.Helper()
	st, err := n.w.cons[node].TopicStats(context.Background(), faultTopic)
	if err != nil {
		n.t.Fatalf("topic stats through node %d: %v", node+1, err)
	}
	out := make([]uint64, faultShards)
	for _, s := range st.Shards {
		out[s.Shard] = s.NextOffset
	}
	return out
}

// caughtUp waits until node's replica of every shard has reached want,
// and reports whether it did.
func (n *nemesis) caughtUp(node int, want []uint64, timeout time.Duration, what string) bool {
	n.t.Helper()
	deadline := time.Now().Add(timeout)
	var got []uint64
	for time.Now().Before(deadline) {
		if !n.c.up(node) {
			n.t.Errorf("%s: node %d exited while catching up; its log ends with:\n%s", what, node+1, n.c.logTail(node, 30))
			return false
		}
		st, err := n.w.cons[node].TopicStats(context.Background(), faultTopic)
		if err == nil && len(st.Shards) == faultShards {
			got = make([]uint64, faultShards)
			for _, s := range st.Shards {
				got[s.Shard] = s.NextOffset
			}
			behind := false
			for s := range want {
				behind = behind || got[s] < want[s]
			}
			if !behind {
				return true
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	n.t.Errorf("%s: node %d has not caught up after %v: its shards' next offsets are %v, the others had %v before it started", what, node+1, timeout, got, want)
	return false
}

// replicasAgree waits until every node's replica of every shard has the
// same next offset, head and acknowledged count.
func (n *nemesis) replicasAgree(timeout time.Duration) {
	n.t.Helper()
	deadline := time.Now().Add(timeout)
	var views []string
	for time.Now().Before(deadline) {
		views = views[:0]
		for i := range n.c.n {
			if !n.c.up(i) {
				continue // reported already
			}
			st, err := n.w.cons[i].TopicStats(context.Background(), faultTopic)
			if err != nil {
				views = append(views, fmt.Sprintf("node %d: %v", i+1, err))
				continue
			}
			var v string
			for _, s := range st.Shards {
				v += fmt.Sprintf(" shard %d: next %d head %d acked %d events %d;", s.Shard, s.NextOffset, s.Head, s.Acked, s.Events)
			}
			views = append(views, v)
		}
		if len(views) > 0 && !slices.ContainsFunc(views, func(v string) bool { return v != views[0] }) {
			n.t.Logf("replicas agree:%s", views[0])
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	n.t.Errorf("the replicas do not agree after %v:\n%q", timeout, views)
}

// logPercentiles logs the median and the maximum of ds.
func logPercentiles(t *testing.T, what string, ds []time.Duration) {
	t.Helper()
	if len(ds) == 0 {
		t.Logf("%s: no sample", what)
		return
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	t.Logf("%s: %d samples, p50 %v, max %v", what, len(s), s[(len(s)-1)/2].Round(time.Millisecond), s[len(s)-1].Round(time.Millisecond))
}
