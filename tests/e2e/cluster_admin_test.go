package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protojson"

	"herald/client"
	"herald/internal/testkit"
	heraldv1 "herald/proto/herald/v1"
	"herald/tests/framework"
)

// waitStatus polls the cluster's status through c until cond holds, for
// up to two minutes, and returns the status that satisfied it.
func waitStatus(t *testing.T, c *client.Client, what string, cond func(*client.ClusterStatus) bool) *client.ClusterStatus {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	var last *client.ClusterStatus
	var lastErr error
	for time.Now().Before(deadline) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		st, err := c.ClusterStatus(ctx)
		cancel()
		if err == nil && cond(st) {
			return st
		}
		last, lastErr = st, err
		time.Sleep(100 * time.Millisecond)
	}
	dump, _ := json.MarshalIndent(last, "", "  ")
	t.Fatalf("timed out waiting until %s; last status (error %v):\n%s", what, lastErr, dump)
	return nil
}

// ledByPreferred reports whether every shard is led by its preferred
// leader.
func ledByPreferred(st *client.ClusterStatus) bool {
	for _, s := range st.Shards {
		if s.Leader == 0 || s.Leader != s.PreferredLeader {
			return false
		}
	}
	return len(st.Shards) > 0
}

// A node alone lists itself and its shards, in a table and in JSON.
func TestClusterStatusOfANodeAlone(t *testing.T) {
	addr := testkit.FreeAddr(t)
	framework.StartServer(t, t.TempDir(), addr)
	url := "http://" + addr
	cli(t, url, "", "topic", "create", "orders", "--shards", "2")

	out := cli(t, url, "", "cluster", "status")
	for _, want := range []string{"NODE", "1  ", "up (answered)", "controller leader: 1", "orders.1", "PREFERRED"} {
		if !strings.Contains(out, want) {
			t.Errorf("cluster status lacks %q:\n%s", want, out)
		}
	}
	var st heraldv1.ClusterStatusResponse
	if err := protojson.Unmarshal([]byte(cli(t, url, "", "cluster", "status", "-o", "json")), &st); err != nil {
		t.Fatal(err)
	}
	if st.NodeId != 1 || len(st.Nodes) != 1 || !st.Nodes[0].Reachable || st.Nodes[0].Replicas != 2 || len(st.Shards) != 2 {
		t.Fatalf("status %v", &st)
	}
	for _, s := range st.Shards {
		if s.Leader != 1 || s.PreferredLeader != 1 || len(s.Replicas) != 1 || s.Replicas[0].Applied == 0 {
			t.Errorf("shard %v", s)
		}
	}

	for args, want := range map[string]string{
		"cluster remove 1":          "node 1 cannot be drained",
		"cluster remove 0":          `node id "0": want a whole number from 1 up`,
		"cluster remove x":          `node id "x"`,
		"cluster add 2 nowhere":     `node 2's address "nowhere" is not host:port`,
		"cluster add 2 127.0.0.1:1": "started without --peers",
		"cluster status extra":      "wrong number of arguments",
	} {
		if got := cliFails(t, url, "", strings.Fields(args)...); !strings.Contains(got, want) {
			t.Errorf("herald %s: %q, want it to say %q", args, got, want)
		}
	}
}

// TestE2ELeadershipReturnsToPreferredLeader: in a three-node cluster every
// shard ends up led by its preferred leader; SIGKILLed, node 1's shards are
// led by others; restarted, it catches up and leads them again.
func TestE2ELeadershipReturnsToPreferredLeader(t *testing.T) {
	c := startCluster(t)
	ctx := context.Background()
	if _, err := c.client(0).CreateTopic(ctx, "orders", map[string]string{"shards": "6"}); err != nil {
		t.Fatal(err)
	}
	st := waitStatus(t, c.client(1), "every shard is led by its preferred leader", ledByPreferred)
	preferred := map[uint64]int{}
	for _, s := range st.Shards {
		preferred[s.PreferredLeader]++
	}
	if preferred[1] != 2 || preferred[2] != 2 || preferred[3] != 2 {
		t.Fatalf("preferred leaders %v, want two shards each", preferred)
	}
	for i := range 30 {
		if _, err := c.client(i%3).Publish(ctx, "orders", client.Event{Key: fmt.Sprint("k", i), Payload: []byte("x")}); err != nil {
			t.Fatal(err)
		}
	}

	c.nodes[0].Kill()
	waitStatus(t, c.client(1), "node 1 is unreachable and its shards are led by others", func(st *client.ClusterStatus) bool {
		for _, n := range st.Nodes {
			if n.ID == 1 && n.Reachable {
				return false
			}
		}
		for _, s := range st.Shards {
			if s.Leader == 0 || s.Leader == 1 {
				return false
			}
		}
		return true
	})
	for i := range 30 { // node 1 has to catch up on these
		if _, err := c.client(1+i%2).Publish(ctx, "orders", client.Event{Key: fmt.Sprint("k", i), Payload: []byte("y")}); err != nil {
			t.Fatal(err)
		}
	}

	start := time.Now()
	var err error
	if c.nodes[0], err = c.tryStart(0); err != nil {
		t.Fatalf("restart node 1: %v", err)
	}
	st = waitStatus(t, c.client(2), "node 1 leads its preferred shards again", ledByPreferred)
	t.Logf("node 1 led its %d preferred shards again %v after its restart began", preferred[1], time.Since(start).Round(time.Millisecond))
	for _, s := range st.Shards {
		if s.PreferredLeader == 1 && s.Leader != 1 {
			t.Errorf("shard %s is led by %d, want node 1", s.Name, s.Leader)
		}
	}
}

// TestE2EDrainANodeOfFour drains node 4 of a four-node cluster: every
// replica it held moves to another node, it leaves the cluster, and every
// event published before the drain is still there; the cluster serves
// with node 4 stopped, and a second drain that would leave too few nodes
// is refused.
func TestE2EDrainANodeOfFour(t *testing.T) {
	c := startClusterOf(t, 4)
	ctx := context.Background()
	if _, err := c.client(0).CreateTopic(ctx, "orders", map[string]string{"shards": "4"}); err != nil {
		t.Fatal(err)
	}
	before := waitStatus(t, c.client(0), "every shard is led by its preferred leader", ledByPreferred)
	held := 0
	for _, s := range before.Shards {
		if slices.ContainsFunc(s.Replicas, func(r client.ClusterReplica) bool { return r.Node == 4 }) {
			held++
		}
	}
	if held == 0 {
		t.Fatalf("node 4 holds no replica to move: %+v", before.Shards)
	}
	var acked []string
	for i := range 40 {
		ids, err := c.client(i%4).Publish(ctx, "orders", client.Event{Key: fmt.Sprint("k", i), Payload: fmt.Appendf(nil, "e%d", i)})
		if err != nil {
			t.Fatal(err)
		}
		acked = append(acked, ids...)
	}

	url := "http://" + c.addrs[0]
	if got := cliFails(t, "http://"+c.addrs[3], "", "cluster", "remove", "4", "--wait"); !strings.Contains(got, "ask another node") {
		t.Errorf("remove --wait through the drained node: %q", got)
	}
	start := time.Now()
	wctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	r := runCLI(wctx, "", "--server", url, "cluster", "remove", "4", "--wait")
	if r.code != 0 {
		t.Fatalf("cluster remove 4 --wait: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	t.Logf("drained node 4 (%d replicas) in %v:\n%s", held, time.Since(start).Round(time.Millisecond), r.stdout)
	if !strings.Contains(r.stdout, "node 4 holds no replica and has left the cluster") {
		t.Errorf("remove --wait said:\n%s", r.stdout)
	}

	st := waitStatus(t, c.client(1), "every shard is led by its preferred leader without node 4", ledByPreferred)
	if len(st.Nodes) != 3 {
		t.Errorf("nodes after the drain: %+v", st.Nodes)
	}
	for _, s := range st.Shards {
		if len(s.Replicas) != 3 || slices.ContainsFunc(s.Replicas, func(r client.ClusterReplica) bool { return r.Node == 4 }) {
			t.Errorf("shard %s on %+v after the drain, want three replicas, none on node 4", s.Name, s.Replicas)
		}
	}

	c.nodes[3].Kill()
	for i := range 8 {
		ids, err := c.client(i%3).Publish(ctx, "orders", client.Event{Key: fmt.Sprint("k", i), Payload: fmt.Appendf(nil, "after%d", i)})
		if err != nil {
			t.Fatalf("publish with node 4 stopped: %v", err)
		}
		acked = append(acked, ids...)
	}
	byShard, unreadable := framework.DrainTopic(t, c.client(2), "orders")
	if len(unreadable) > 0 {
		t.Fatalf("unreadable shards: %v", unreadable)
	}
	got := map[string]bool{}
	for _, ds := range byShard {
		for _, d := range ds {
			got[d.ID] = true
		}
	}
	for _, id := range acked {
		if !got[id] {
			t.Errorf("acknowledged event %s is missing after the drain", id)
		}
	}
	if len(got) != len(acked) {
		t.Errorf("consumed %d events, published %d", len(got), len(acked))
	}

	if got := cliFails(t, url, "", "cluster", "remove", "2"); !strings.Contains(got, "node 2 cannot be drained") || !strings.Contains(got, "herald cluster add") {
		t.Errorf("draining a node of three: %q", got)
	}
}

// TestE2EAddAFourthNode grows a three-node cluster: node 4 is made a
// member, started with --join, and then holds and leads shards of a topic
// created after it joined; everything published through it, or to the
// topic from before, is consumed through it.
func TestE2EAddAFourthNode(t *testing.T) {
	c := startCluster(t)
	ctx := context.Background()
	url := "http://" + c.addrs[0]
	cli(t, url, "", "topic", "create", "before", "--shards", "3")
	dir4, addr4 := t.TempDir(), testkit.FreeAddr(t)
	peers4 := c.peers + ",4=" + addr4

	// Not a member yet: --join is refused, saying what to do.
	if _, err := framework.TryStartServer(t, t.TempDir(), addr4, "--node-id", "4", "--peers", peers4, "--join"); err == nil ||
		!strings.Contains(err.Error(), "node 4 is not a member") || !strings.Contains(err.Error(), "cluster add 4") {
		t.Fatalf("joining before being added: %v", err)
	}
	if out := cli(t, url, "", "cluster", "add", "4", addr4); !strings.Contains(out, "node 4 is a member at "+addr4) {
		t.Errorf("cluster add said %q", out)
	}
	if got := cliFails(t, url, "", "cluster", "add", "4", "127.0.0.1:1"); !strings.Contains(got, "node 4 is already a member") {
		t.Errorf("adding node 4 again elsewhere: %q", got)
	}
	start := time.Now()
	if _, err := framework.TryStartServer(t, dir4, addr4, "--node-id", "4", "--peers", peers4, "--join"); err != nil {
		t.Fatalf("start node 4 with --join: %v", err)
	}
	t.Logf("node 4 joined and served in %v", time.Since(start).Round(time.Millisecond))
	waitStatus(t, c.client(1), "node 2 reaches all four nodes", func(st *client.ClusterStatus) bool {
		up := 0
		for _, n := range st.Nodes {
			if n.Reachable {
				up++
			}
		}
		return up == 4
	})

	c4 := client.New("http://"+addr4, client.WithPublishRetries(20))
	if _, err := c4.CreateTopic(ctx, "after", map[string]string{"shards": "4"}); err != nil {
		t.Fatal(err)
	}
	st := waitStatus(t, c4, "every shard is led by its preferred leader", ledByPreferred)
	held, leads := 0, 0
	for _, s := range st.Shards {
		if s.Topic != "after" {
			continue
		}
		if slices.ContainsFunc(s.Replicas, func(r client.ClusterReplica) bool { return r.Node == 4 }) {
			held++
		}
		if s.Leader == 4 {
			leads++
		}
	}
	if held != 3 || leads != 1 {
		t.Errorf("node 4 holds %d and leads %d of the 4 shards of a topic created after it joined, want 3 and 1", held, leads)
	}

	want := map[string]bool{}
	for i := range 24 {
		for _, tc := range []struct {
			c     *client.Client
			topic string
		}{{c4, "after"}, {c.client(i % 3), "after"}, {c4, "before"}} {
			ids, err := tc.c.Publish(ctx, tc.topic, client.Event{Key: fmt.Sprint("k", i), Payload: []byte("x")})
			if err != nil {
				t.Fatalf("publish to %s: %v", tc.topic, err)
			}
			want[ids[0]] = true
		}
	}
	for _, topic := range []string{"after", "before"} {
		byShard, unreadable := framework.DrainTopic(t, c4, topic)
		if len(unreadable) > 0 {
			t.Fatalf("%s: unreadable shards %v", topic, unreadable)
		}
		for _, ds := range byShard {
			for _, d := range ds {
				delete(want, d.ID)
			}
		}
	}
	if len(want) > 0 {
		t.Errorf("%d acknowledged events were not consumed through node 4", len(want))
	}

	// And out again: its replicas move back to the other three.
	wctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	r := runCLI(wctx, "", "--server", "http://"+c.addrs[1], "cluster", "remove", "4", "--wait")
	if r.code != 0 || !strings.Contains(r.stdout, "node 4 holds no replica and has left the cluster") {
		t.Fatalf("cluster remove 4 --wait: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	st = waitStatus(t, c.client(0), "three nodes lead their preferred shards", ledByPreferred)
	if len(st.Nodes) != 3 {
		t.Errorf("nodes after removing node 4: %+v", st.Nodes)
	}
	for _, s := range st.Shards {
		if len(s.Replicas) != 3 || slices.ContainsFunc(s.Replicas, func(r client.ClusterReplica) bool { return r.Node == 4 }) {
			t.Errorf("shard %s on %+v after removing node 4", s.Name, s.Replicas)
		}
	}
	if _, err := c.client(2).Publish(ctx, "after", client.Event{Key: "k", Payload: []byte("z")}); err != nil {
		t.Errorf("publish after node 4 left: %v", err)
	}
}

// TestE2EDrainSurvivesALeaderCrash SIGKILLs the leader of a shard whose
// replica is moving off a draining node, half way, and restarts it: the
// drain carries on from where the placement and the group's configuration
// say it is, and loses no event.
func TestE2EDrainSurvivesALeaderCrash(t *testing.T) {
	c := startClusterOf(t, 4)
	ctx := context.Background()
	if _, err := c.client(0).CreateTopic(ctx, "orders", map[string]string{"shards": "4"}); err != nil {
		t.Fatal(err)
	}
	waitStatus(t, c.client(0), "every shard is led by its preferred leader", ledByPreferred)
	var acked []string
	for i := range 40 {
		ids, err := c.client(i%4).Publish(ctx, "orders", client.Event{Key: fmt.Sprint("k", i), Payload: fmt.Appendf(nil, "e%d", i)})
		if err != nil {
			t.Fatal(err)
		}
		acked = append(acked, ids...)
	}
	if err := c.client(0).RemoveNode(ctx, 4); err != nil {
		t.Fatal(err)
	}
	var moving client.ClusterShard
	waitStatus(t, c.client(0), "a replica is moving: a shard has four replicas", func(st *client.ClusterStatus) bool {
		for _, s := range st.Shards {
			if len(s.Replicas) == 4 && s.Leader != 0 && s.Leader != 4 {
				moving = s
				return true
			}
		}
		return false
	})
	victim := int(moving.Leader) - 1
	t.Logf("killing node %d, the leader of %s, while its replicas are %+v", moving.Leader, moving.Name, moving.Replicas)
	c.nodes[victim].Kill()
	var err error
	if c.nodes[victim], err = c.tryStart(victim); err != nil {
		t.Fatalf("restart node %d: %v", moving.Leader, err)
	}

	other := (victim + 1) % 3 // a node that stays, not the one restarted
	wctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	r := runCLI(wctx, "", "--server", "http://"+c.addrs[other], "cluster", "remove", "4", "--wait")
	if r.code != 0 || !strings.Contains(r.stdout, "has left the cluster") {
		t.Fatalf("cluster remove 4 --wait after the crash: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	st := waitStatus(t, c.client(other), "every shard is led by its preferred leader without node 4", ledByPreferred)
	for _, s := range st.Shards {
		if len(s.Replicas) != 3 || slices.ContainsFunc(s.Replicas, func(r client.ClusterReplica) bool { return r.Node == 4 }) {
			t.Errorf("shard %s on %+v after the drain, want three replicas, none on node 4", s.Name, s.Replicas)
		}
	}
	c.nodes[3].Kill()
	byShard, unreadable := framework.DrainTopic(t, c.client(other), "orders")
	if len(unreadable) > 0 {
		t.Fatalf("unreadable shards: %v", unreadable)
	}
	got := map[string]bool{}
	for _, ds := range byShard {
		for _, d := range ds {
			got[d.ID] = true
		}
	}
	for _, id := range acked {
		if !got[id] {
			t.Errorf("acknowledged event %s is missing after the drain", id)
		}
	}
}
