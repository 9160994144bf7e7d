package api

import (
	"context"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	"herald/internal/protocol"
	heraldv1 "herald/proto/herald/v1"
	"herald/proto/herald/v1/heraldv1connect"
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

// ShardLeaders of a node alone: it leads every shard; an unknown topic is
// not found. Rebalance is refused: there is nothing to balance.
func TestShardLeadersAndRebalanceOfANodeAlone(t *testing.T) {
	_, c := startServer(t)
	ctx := context.Background()
	if _, err := c.CreateTopic(ctx, connect.NewRequest(&heraldv1.CreateTopicRequest{Name: "orders", Attributes: map[string]string{"shards": "3"}})); err != nil {
		t.Fatal(err)
	}
	resp, err := c.ShardLeaders(ctx, connect.NewRequest(&heraldv1.ShardLeadersRequest{Topic: "orders"}))
	if err != nil {
		t.Fatal(err)
	}
	if resp.Msg.NodeId != 1 || len(resp.Msg.Shards) != 3 {
		t.Fatalf("ShardLeaders: %v, want node 1's answer for 3 shards", resp.Msg)
	}
	for i, sl := range resp.Msg.Shards {
		if sl.Shard != uint32(i) || sl.Leader != 1 {
			t.Errorf("shard %d: %v, want led by node 1", i, sl)
		}
	}
	if _, err := c.ShardLeaders(ctx, connect.NewRequest(&heraldv1.ShardLeadersRequest{Topic: "nope"})); connect.CodeOf(err) != connect.CodeNotFound {
		t.Errorf("ShardLeaders of an unknown topic: %v, want not found", err)
	}
	if _, err := c.Rebalance(ctx, connect.NewRequest(&heraldv1.RebalanceRequest{})); connect.CodeOf(err) != connect.CodeFailedPrecondition ||
		!strings.Contains(err.Error(), "runs alone") {
		t.Errorf("Rebalance of a node alone: %v, want failed precondition saying it runs alone", err)
	}
	st, err := c.ClusterStatus(ctx, connect.NewRequest(&heraldv1.ClusterStatusRequest{}))
	if err != nil || st.Msg.Rebalancing {
		t.Errorf("status after a refused rebalance: %v, rebalancing %v", err, st.Msg.GetRebalancing())
	}
}

// Any client that routes may ask where shards are led: a publish or a
// consume token will do. Rebalancing needs admin.
func TestShardLeadersNeedsAnyTokenRebalanceAdmin(t *testing.T) {
	tt := makeTokens(t, time.Now())
	url, n := startAuthServer(t, Options{Tokens: tt.store})
	if _, err := n.CreateTopic(context.Background(), "orders", nil); err != nil {
		t.Fatal(err)
	}
	leaders := heraldv1connect.HeraldServiceShardLeadersProcedure
	for _, name := range []string{"publish", "consume"} {
		if status, body := callJSON(t, url, leaders, tt.secrets[name], `{"topic":"orders"}`); status != http.StatusOK {
			t.Errorf("ShardLeaders with a %s token: %d %s", name, status, body)
		}
	}
	if status, _ := callJSON(t, url, leaders, "", `{"topic":"orders"}`); status != http.StatusUnauthorized {
		t.Errorf("ShardLeaders without a token: %d, want 401", status)
	}
	if status, _ := callJSON(t, url, heraldv1connect.HeraldServiceRebalanceProcedure, tt.secrets["publish"], `{}`); status != http.StatusForbidden {
		t.Errorf("Rebalance with a publish token: %d, want 403", status)
	}
}

// A Fetch with Herald-Shards reads only the shards it names: events of
// the others stay, and come to a fetch without it. A header that names no
// shard index, or an index the topic lacks, is refused, leasing nothing.
func TestFetchOfSomeShards(t *testing.T) {
	_, c := startServer(t)
	ctx := context.Background()
	if _, err := c.CreateTopic(ctx, connect.NewRequest(&heraldv1.CreateTopicRequest{Name: "orders", Attributes: map[string]string{"shards": "3"}})); err != nil {
		t.Fatal(err)
	}
	var events []*heraldv1.PublishEvent
	for i := range 30 {
		events = append(events, &heraldv1.PublishEvent{Key: "k" + strconv.Itoa(i), Payload: []byte("x")})
	}
	pub, err := c.Publish(ctx, connect.NewRequest(&heraldv1.PublishRequest{Topic: "orders", Events: events}))
	if err != nil {
		t.Fatal(err)
	}
	perShard := map[string]int{}
	for _, id := range pub.Msg.Ids {
		perShard[strings.Split(id, "/")[1]]++
	}
	fetch := func(shards string) (*connect.Response[heraldv1.FetchResponse], error) {
		req := connect.NewRequest(&heraldv1.FetchRequest{Topic: "orders", MaxEvents: 100})
		if shards != "" {
			req.Header().Set(protocol.ShardsHeader, shards)
		}
		return c.Fetch(ctx, req)
	}

	for _, tc := range []struct{ header, want string }{
		{"x", `header Herald-Shards: "x": want shard indexes, comma-separated, such as 0,3`},
		{"0,-1", `header Herald-Shards: "0,-1": want shard indexes`},
		{"0,3", `topic "orders" has no shard 3: it has 3 (0 to 2)`},
	} {
		_, err := fetch(tc.header)
		if connect.CodeOf(err) != connect.CodeInvalidArgument || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("fetch with %s %q: %v, want invalid argument saying %q", protocol.ShardsHeader, tc.header, err, tc.want)
		}
	}

	resp, err := fetch("0, 2")
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]int{}
	for _, e := range resp.Msg.Events {
		got[strings.Split(e.Id, "/")[1]]++
	}
	if got["0"] != perShard["0"] || got["1"] != 0 || got["2"] != perShard["2"] {
		t.Errorf("fetch of shards 0 and 2 got %v events per shard, of %v published", got, perShard)
	}
	resp, err = fetch("")
	if err != nil {
		t.Fatal(err)
	}
	if n := len(resp.Msg.Events); n != perShard["1"] {
		t.Errorf("a fetch of every shard then got %d events, want shard 1's %d", n, perShard["1"])
	}
}
