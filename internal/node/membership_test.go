package node

import (
	"context"
	"errors"
	"strings"
	"testing"
)

// A node alone reports itself, reachable, and every shard on it, led by
// it, with its applied index; it cannot be drained (nothing could take
// its shards) nor grow without --peers, and bad requests say why.
func TestClusterStatusOfASingleNode(t *testing.T) {
	ctx := context.Background()
	n := openNode(t, testConfig(t.TempDir()))
	mustCreate(t, n, "orders", map[string]string{"shards": "2"})
	publish(t, n, "orders", ev("k", "v"))

	st, err := n.ClusterStatus(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.NodeID != 1 || st.ControllerLeader != 1 || len(st.Nodes) != 1 {
		t.Fatalf("status %+v, want node 1 alone leading the controller", st)
	}
	if nd := st.Nodes[0]; nd.ID != 1 || !nd.Self || !nd.Reachable || nd.Draining || nd.Replicas != 2 {
		t.Errorf("node %+v, want node 1, itself, reachable, holding 2 replicas", nd)
	}
	if len(st.Shards) != 2 {
		t.Fatalf("shards %+v, want 2", st.Shards)
	}
	for i, sp := range st.Shards {
		if sp.Topic != "orders" || sp.Shard != i || sp.Leader != 1 || sp.PreferredLeader != 1 ||
			len(sp.Replicas) != 1 || sp.Replicas[0].Node != 1 || sp.Replicas[0].Applied == 0 || sp.Replicas[0].Err != "" {
			t.Errorf("shard %d: %+v", i, sp)
		}
	}

	for _, tc := range []struct {
		err  error
		kind error
		want string
	}{
		{n.RemoveNode(ctx, 1), ErrFailedPrecondition, "node 1 cannot be drained: shard orders has 1 replicas and only 0 other nodes"},
		{n.RemoveNode(ctx, 0), ErrInvalid, "node ids start at 1"},
		{n.RemoveNode(ctx, 5), ErrNotFound, "node 5 is not a member"},
		{n.AddNode(ctx, 2, "nowhere"), ErrInvalid, `node 2's address "nowhere" is not host:port`},
		{n.AddNode(ctx, 0, "127.0.0.1:1"), ErrInvalid, "node ids start at 1"},
		{n.AddNode(ctx, 2, "127.0.0.1:7602"), ErrFailedPrecondition, "started without --peers"},
	} {
		if !errors.Is(tc.err, tc.kind) || !strings.Contains(tc.err.Error(), tc.want) {
			t.Errorf("error %v, want %v saying %q", tc.err, tc.kind, tc.want)
		}
	}
	after, err := n.ClusterStatus(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(after.Nodes) != 1 || after.Nodes[0].Draining {
		t.Errorf("refused changes changed the members: %+v", after.Nodes)
	}
}
