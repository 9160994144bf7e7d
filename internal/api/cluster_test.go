package api

import (
	"context"
	"strings"
	"testing"

	"connectrpc.com/connect"

	heraldv1 "herald/proto/herald/v1"
)

// ClusterStatus of a node alone: itself, reachable, leading its shards;
// AddNode and RemoveNode map the node's refusals to their codes.
func TestClusterStatusAndMembershipErrors(t *testing.T) {
	_, c := startServer(t)
	ctx := context.Background()
	if _, err := c.CreateTopic(ctx, connect.NewRequest(&heraldv1.CreateTopicRequest{Name: "orders", Attributes: map[string]string{"shards": "2"}})); err != nil {
		t.Fatal(err)
	}
	resp, err := c.ClusterStatus(ctx, connect.NewRequest(&heraldv1.ClusterStatusRequest{}))
	if err != nil {
		t.Fatal(err)
	}
	st := resp.Msg
	if st.NodeId != 1 || st.ControllerLeader != 1 || len(st.Nodes) != 1 || !st.Nodes[0].Self || !st.Nodes[0].Reachable || st.Nodes[0].Replicas != 2 {
		t.Fatalf("status %v, want node 1 alone, reachable, with 2 replicas", st)
	}
	if len(st.Shards) != 2 {
		t.Fatalf("shards %v", st.Shards)
	}
	for i, sh := range st.Shards {
		if sh.Topic != "orders" || sh.Shard != uint32(i) || sh.Leader != 1 || sh.PreferredLeader != 1 || sh.Group == 0 ||
			len(sh.Replicas) != 1 || sh.Replicas[0].Node != 1 || sh.Replicas[0].Applied == 0 {
			t.Errorf("shard %d: %v", i, sh)
		}
	}
	if want := "orders.1"; st.Shards[1].Name != want {
		t.Errorf("shard 1 is named %q, want %q", st.Shards[1].Name, want)
	}

	for _, tc := range []struct {
		call func() error
		code connect.Code
		want string
	}{
		{func() error {
			_, err := c.RemoveNode(ctx, connect.NewRequest(&heraldv1.RemoveNodeRequest{Id: 1}))
			return err
		}, connect.CodeFailedPrecondition, "cannot be drained"},
		{func() error {
			_, err := c.RemoveNode(ctx, connect.NewRequest(&heraldv1.RemoveNodeRequest{Id: 4}))
			return err
		}, connect.CodeNotFound, "node 4 is not a member"},
		{func() error {
			_, err := c.AddNode(ctx, connect.NewRequest(&heraldv1.AddNodeRequest{Id: 2, Address: "nowhere"}))
			return err
		}, connect.CodeInvalidArgument, "not host:port"},
		{func() error {
			_, err := c.AddNode(ctx, connect.NewRequest(&heraldv1.AddNodeRequest{Id: 2, Address: "127.0.0.1:7602"}))
			return err
		}, connect.CodeFailedPrecondition, "without --peers"},
	} {
		err := tc.call()
		if connect.CodeOf(err) != tc.code || err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("error %v, want %v saying %q", err, tc.code, tc.want)
		}
	}
}
