package robustness

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"herald/internal/testkit"
	"herald/internal/testkit/faultproxy"
	"herald/internal/testkit/heraldproc"
	"herald/tests/framework"
)

// faultCluster is three herald serve processes on loopback whose
// node-to-node links each pass through a fault proxy: node i reaches
// node j through link[i][j], so a test can cut exactly the links it
// wants. Clients talk to the nodes directly.
type faultCluster struct {
	t       *testing.T
	n       int
	dirs    []string
	addrs   []string
	logs    []string
	link    [][]*faultproxy.Proxy // link[from][to]; nil on the diagonal
	leaders *leaderTracker
	// restored counts, per node, the snapshots its replicas restored
	// from a leader (raft logs each).
	restored []atomic.Int64
	extra    []string // more serve flags

	mu    sync.Mutex
	nodes []*faultNode // nil while a node is down
	// installs sums, over the nodes' runs that ended, the snapshots their
	// replicas installed from a leader and the log entries fetched with
	// them (each run's counters start at zero).
	installs installCount
}

// installCount is what herald_snapshot_installs_total and
// herald_snapshot_install_entries_total count.
type installCount struct{ snapshots, entries float64 }

// faultNode is one running herald serve and its log file, closed once
// the node has been killed.
type faultNode struct {
	srv *heraldproc.Server
	log *os.File
}

// stop kills the node and closes its log.
func (n *faultNode) stop() {
	n.srv.Kill() // returns once the output is all written
	n.log.Close()
}

func newFaultCluster(t *testing.T, extra ...string) *faultCluster {
	t.Helper()
	const n = 3
	c := &faultCluster{t: t, n: n, leaders: newLeaderTracker(), restored: make([]atomic.Int64, n), extra: extra, nodes: make([]*faultNode, n)}
	logDir := t.TempDir()
	for i := range n {
		c.dirs = append(c.dirs, t.TempDir())
		c.addrs = append(c.addrs, testkit.FreeAddr(t))
		c.logs = append(c.logs, filepath.Join(logDir, fmt.Sprintf("node%d.log", i+1)))
	}
	c.link = make([][]*faultproxy.Proxy, n)
	for from := range n {
		c.link[from] = make([]*faultproxy.Proxy, n)
		for to := range n {
			if from == to {
				continue
			}
			p, err := faultproxy.Listen("127.0.0.1:0", c.addrs[to])
			if err != nil {
				t.Fatal(err)
			}
			c.link[from][to] = p
		}
	}
	t.Cleanup(func() {
		for i := range n {
			c.kill(i)
		}
		for _, row := range c.link {
			for _, p := range row {
				if p != nil {
					p.Close()
				}
			}
		}
		if t.Failed() {
			c.dumpLogs()
		}
	})
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := range n {
		wg.Go(func() { errs[i] = c.start(i) })
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("node %d: %v", i+1, err)
		}
	}
	return c
}

// peers is node i's --peers: its own address, and for every other node
// the proxy of the link from i to it.
func (c *faultCluster) peers(i int) string {
	var spec []string
	for j := range c.n {
		addr := c.addrs[j]
		if j != i {
			addr = c.link[i][j].Addr()
		}
		spec = append(spec, fmt.Sprintf("%d=%s", j+1, addr))
	}
	return strings.Join(spec, ",")
}

// start starts node i (0-based) and waits until it serves: a majority of
// the cluster must be up for that.
func (c *faultCluster) start(i int) error {
	out, err := os.OpenFile(c.logs[i], os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	c.leaders.forget(i)
	srv, err := heraldproc.Launch(heraldproc.Config{
		Binary:  framework.Binary(),
		DataDir: c.dirs[i],
		Listen:  c.addrs[i],
		Args:    append([]string{"--node-id", strconv.Itoa(i + 1), "--peers", c.peers(i), "--log-level", "debug"}, c.extra...),
		Output:  &nodeLog{node: i, leaders: c.leaders, restored: &c.restored[i], out: out},
		Timeout: 90 * time.Second,
	})
	if err != nil {
		out.Close()
		return fmt.Errorf("start node %d: %w", i+1, err)
	}
	node := &faultNode{srv: srv, log: out}
	c.mu.Lock()
	old := c.nodes[i]
	c.nodes[i] = node
	c.mu.Unlock()
	if old != nil {
		old.stop() // it exited on its own; its log is still open
	}
	if err := srv.Wait(context.Background()); err != nil {
		return fmt.Errorf("node %d does not serve (%w); its log ends with:\n%s", i+1, err, c.logTail(i, 30))
	}
	return nil
}

// kill SIGKILLs node i and waits for it to exit; a node that is down
// stays down. What the node counted of snapshot installs is kept first.
func (c *faultCluster) kill(i int) {
	if c.up(i) {
		if n, err := c.installCountOf(i); err == nil {
			c.mu.Lock()
			c.installs.snapshots += n.snapshots
			c.installs.entries += n.entries
			c.mu.Unlock()
		}
	}
	c.mu.Lock()
	node := c.nodes[i]
	c.nodes[i] = nil
	c.mu.Unlock()
	if node == nil {
		return
	}
	node.stop()
	c.leaders.forget(i)
}

// installCountOf reads node i's counts of snapshot installs from its
// metrics.
func (c *faultCluster) installCountOf(i int) (installCount, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+c.addrs[i]+"/metrics", nil)
	if err != nil {
		return installCount{}, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return installCount{}, err
	}
	defer resp.Body.Close()
	var n installCount
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		name, value, ok := strings.Cut(sc.Text(), " ")
		var into *float64
		switch name {
		case "herald_snapshot_installs_total":
			into = &n.snapshots
		case "herald_snapshot_install_entries_total":
			into = &n.entries
		}
		if ok && into != nil {
			if *into, err = strconv.ParseFloat(value, 64); err != nil {
				return installCount{}, fmt.Errorf("node %d's metrics: %q: %w", i+1, sc.Text(), err)
			}
		}
	}
	return n, sc.Err()
}

// snapshotInstalls returns the snapshots the nodes' replicas installed
// from a leader since the cluster started, and the log entries fetched
// with them: those of the runs that ended, and those of the nodes up now.
func (c *faultCluster) snapshotInstalls() (installCount, error) {
	c.mu.Lock()
	total := c.installs
	c.mu.Unlock()
	for i := range c.n {
		if !c.up(i) {
			continue
		}
		n, err := c.installCountOf(i)
		if err != nil {
			return total, err
		}
		total.snapshots += n.snapshots
		total.entries += n.entries
	}
	return total, nil
}

// up reports whether node i is running: started, neither killed nor
// exited on its own.
func (c *faultCluster) up(i int) bool {
	c.mu.Lock()
	node := c.nodes[i]
	c.mu.Unlock()
	if node == nil {
		return false
	}
	select {
	case <-node.srv.Done():
		return false
	default:
		return true
	}
}

// wipe deletes node i's data directory (the node must be down) and
// leaves an empty one in its place, as a replaced disk would.
func (c *faultCluster) wipe(i int) {
	if c.up(i) {
		c.t.Fatalf("wipe node %d while it runs", i+1)
	}
	if err := os.RemoveAll(c.dirs[i]); err != nil {
		c.t.Fatal(err)
	}
	if err := os.Mkdir(c.dirs[i], 0o755); err != nil {
		c.t.Fatal(err)
	}
}

// cutOff is how a partition cuts a node off.
type cutOff int

const (
	silently cutOff = iota // every link to and from it drops its traffic
	refused                // every link to and from it refuses connections
	deaf                   // only the links to it drop traffic: it still talks, nobody answers
)

func (h cutOff) String() string {
	return [...]string{"silently", "with refused connections", "one way (it talks, hears nothing)"}[h]
}

// isolate cuts node i off from the others, the way how says.
func (c *faultCluster) isolate(i int, how cutOff) {
	for j := range c.n {
		if j == i {
			continue
		}
		switch how {
		case silently:
			c.link[i][j].Blackhole()
			c.link[j][i].Blackhole()
		case refused:
			c.link[i][j].Cut()
			c.link[j][i].Cut()
		case deaf:
			c.link[j][i].Blackhole()
		}
	}
}

// heal makes every link forward again.
func (c *faultCluster) heal() {
	for _, row := range c.link {
		for _, p := range row {
			if p != nil {
				p.Heal()
			}
		}
	}
}

func (c *faultCluster) logTail(i, lines int) string {
	data, err := os.ReadFile(c.logs[i])
	if err != nil {
		return err.Error()
	}
	var kept []string
	for _, l := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		if !strings.Contains(l, "level=DEBUG") {
			kept = append(kept, l)
		}
	}
	return strings.Join(kept[max(len(kept)-lines, 0):], "\n")
}

// dumpLogs shows the end of each node's log (without raft's debug lines)
// and, with $HERALD_TEST_ARTIFACTS set, copies the whole logs there.
func (c *faultCluster) dumpLogs() {
	dir := os.Getenv("HERALD_TEST_ARTIFACTS")
	for i := range c.n {
		c.t.Logf("node %d's log ends with:\n%s", i+1, c.logTail(i, 40))
		if dir == "" {
			continue
		}
		data, err := os.ReadFile(c.logs[i])
		if err == nil {
			err = os.WriteFile(filepath.Join(dir, fmt.Sprintf("%s-node%d.log", c.t.Name(), i+1)), data, 0o644)
		}
		if err != nil {
			c.t.Logf("keep node %d's log: %v", i+1, err)
		}
	}
}

// nodeLog is a node's stdout and stderr: it writes them to the node's
// log file, hands every line to the leader tracker and counts the
// snapshots restored.
type nodeLog struct {
	node     int
	leaders  *leaderTracker
	restored *atomic.Int64
	out      *os.File
	partial  []byte
}

func (w *nodeLog) Write(p []byte) (int, error) {
	w.out.Write(p)
	w.partial = append(w.partial, p...)
	for {
		line, rest, ok := bytes.Cut(w.partial, []byte("\n"))
		if !ok {
			break
		}
		w.leaders.observe(w.node, string(line))
		if bytes.Contains(line, []byte("restored snapshot")) {
			w.restored.Add(1)
		}
		w.partial = rest
	}
	w.partial = bytes.Clone(w.partial)
	return len(p), nil
}

// leaderTracker follows who leads each Raft group from the nodes' logs:
// raft logs every change of a replica's role, with its term ("2 became
// leader at term 5"), and herald adds the group's name. The API does not
// say who leads, and the fault suite needs to know whom to kill.
type leaderTracker struct {
	mu    sync.Mutex
	roles map[string]map[int]role // group name → node → its last role
}

type role struct {
	leader bool
	term   uint64
}

var (
	roleChange = regexp.MustCompile(`became (leader|follower|candidate|pre-candidate) at term (\d+)`)
	groupAttr  = regexp.MustCompile(`\bgroup=(\S+)`)
)

func newLeaderTracker() *leaderTracker {
	return &leaderTracker{roles: make(map[string]map[int]role)}
}

func (l *leaderTracker) observe(node int, line string) {
	m := roleChange.FindStringSubmatch(line)
	g := groupAttr.FindStringSubmatch(line)
	if m == nil || g == nil {
		return
	}
	term, err := strconv.ParseUint(m[2], 10, 64)
	if err != nil {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.roles[g[1]] == nil {
		l.roles[g[1]] = make(map[int]role)
	}
	l.roles[g[1]][node] = role{leader: m[1] == "leader", term: term}
}

// forget drops what node said: it was killed or is starting again.
func (l *leaderTracker) forget(node int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, nodes := range l.roles {
		delete(nodes, node)
	}
}

// leader returns the node that became group's leader in the highest term
// and has not said since that it stepped down; ok is false if none has.
// A leader cut off from the others keeps its term until it steps down, but
// a newer leader has a higher term.
func (l *leaderTracker) leader(group string) (node int, ok bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	var best role
	for n, r := range l.roles[group] {
		if r.leader && (!ok || r.term > best.term) {
			node, best, ok = n, r, true
		}
	}
	return node, ok
}

// leads reports whether node last said it leads group.
func (l *leaderTracker) leads(node int, group string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.roles[group][node].leader
}

// The tracker reads raft's role changes from the nodes' log lines: the
// leader is whoever became leader in the highest term and has not
// stepped down since, among the nodes not forgotten.
func TestLeaderTrackerFollowsRoleChanges(t *testing.T) {
	l := newLeaderTracker()
	line := func(node int, msg, group string) {
		l.observe(node, fmt.Sprintf(`time=2026-01-01T00:00:00Z level=DEBUG msg="%d %s" group=%s`, node+1, msg, group))
	}
	if _, ok := l.leader("faults"); ok {
		t.Fatal("a leader before any log line")
	}
	line(0, "became follower at term 1", "faults")
	line(1, "became pre-candidate at term 1", "faults")
	line(1, "became candidate at term 2", "faults")
	line(1, "became leader at term 2", "faults")
	line(2, "became leader at term 3", "faults.1")
	l.observe(0, `time=2026-01-01T00:00:00Z level=INFO msg="herald is serving" listen=127.0.0.1:1`)
	if n, ok := l.leader("faults"); !ok || n != 1 {
		t.Errorf("leader of faults: %d, %v; want node index 1", n, ok)
	}
	// Cut off, node 1 still believes it leads at term 2 while node 0 is
	// elected at term 3: the higher term wins.
	line(0, "became leader at term 3", "faults")
	if n, _ := l.leader("faults"); n != 0 || !l.leads(1, "faults") {
		t.Errorf("leader of faults: %d, want 0 (node 1 still says it leads: %v)", n, l.leads(1, "faults"))
	}
	line(1, "became follower at term 3", "faults")
	if l.leads(1, "faults") {
		t.Error("node 1 stepped down but is still taken for a leader")
	}
	l.forget(0)
	if n, ok := l.leader("faults"); ok {
		t.Errorf("leader of faults after its leader was forgotten: %d", n)
	}
	if n, ok := l.leader("faults.1"); !ok || n != 2 {
		t.Errorf("leader of faults.1: %d, %v; want 2", n, ok)
	}
}
