package transport

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/emptypb"

	clusterv1 "herald/proto/herald/cluster/v1"
	"herald/proto/herald/cluster/v1/clusterv1connect"
)

// echoJoin answers a Join with the joining node as the only founder.
func echoJoin(_ context.Context, req *clusterv1.JoinRequest) (*clusterv1.JoinResponse, error) {
	return &clusterv1.JoinResponse{Member: true, Founders: []uint64{req.GetNode()}}, nil
}

// pair starts two nodes that know each other.
func pair(t *testing.T) (a, b *node, bURL string) {
	t.Helper()
	ln1, ln2 := listen(t), listen(t)
	peers := map[uint64]string{1: "http://" + ln1.Addr().String(), 2: "http://" + ln2.Addr().String()}
	return startNode(t, 1, ln1, peers), startNode(t, 2, ln2, peers), peers[2]
}

// Handlers has a handler for every unary rpc of the cluster service, by
// its name, and for nothing else.
func TestHandlersCoverTheService(t *testing.T) {
	unary := map[string]bool{}
	methods := clusterv1.File_herald_cluster_v1_cluster_proto.Services().ByName("ClusterService").Methods()
	for i := range methods.Len() {
		if m := methods.Get(i); !m.IsStreamingClient() && !m.IsStreamingServer() {
			unary[string(m.Name())] = true
		}
	}
	fields := reflect.TypeFor[Handlers]()
	for i := range fields.NumField() {
		if !unary[fields.Field(i).Name] {
			t.Errorf("Handlers.%s is no unary rpc of the cluster service", fields.Field(i).Name)
		}
		delete(unary, fields.Field(i).Name)
	}
	for name := range unary {
		t.Errorf("Handlers has no handler for the %s rpc", name)
	}
}

// A typed rpc carries its request to the peer's handler and the
// handler's answer back, nested messages and all.
func TestRPCRoundTrip(t *testing.T) {
	a, b, _ := pair(t)
	b.tr.Handle(Handlers{
		Join: echoJoin,
		Fetch: func(_ context.Context, req *clusterv1.FetchRequest) (*clusterv1.FetchResponse, error) {
			d := &clusterv1.Delivery{Id: req.GetShard().GetTopic(), Shard: req.GetShard().GetShard(), Attempt: req.GetMax(),
				Event: &clusterv1.Event{Payload: []byte("payload"), Headers: map[string]string{"relay": fmt.Sprint(req.GetShard().GetRelay())}}}
			return &clusterv1.FetchResponse{Deliveries: []*clusterv1.Delivery{d}}, nil
		},
	})
	ctx := context.Background()
	out, err := a.tr.Join(ctx, 2, &clusterv1.JoinRequest{Node: 5})
	if err != nil || !out.GetMember() || !slices.Equal(out.GetFounders(), []uint64{5}) {
		t.Fatalf("Join = %v, %v; want member, founders [5]", out, err)
	}
	f, err := a.tr.Fetch(ctx, 2, &clusterv1.FetchRequest{Shard: &clusterv1.ShardCall{Topic: "orders", Shard: 3, Relay: true}, Max: 9})
	if err != nil || len(f.GetDeliveries()) != 1 {
		t.Fatalf("Fetch = %v, %v; want one delivery", f, err)
	}
	d := f.GetDeliveries()[0]
	if d.GetId() != "orders" || d.GetShard() != 3 || d.GetAttempt() != 9 ||
		string(d.GetEvent().GetPayload()) != "payload" || d.GetEvent().GetHeaders()["relay"] != "true" {
		t.Errorf("Fetch answered %v", d)
	}
}

// A handler's error reaches the caller with its code (Unknown for an
// error that has none) and its message, in an error that names the rpc,
// the node and its URL.
func TestRPCErrors(t *testing.T) {
	a, b, url := pair(t)
	b.tr.Handle(Handlers{
		Ping: func(context.Context, *clusterv1.PingRequest) (*clusterv1.PingResponse, error) {
			return nil, connect.NewError(connect.CodeFailedPrecondition, errors.New("not now"))
		},
		Started: func(context.Context, *clusterv1.StartedRequest) (*clusterv1.StartedResponse, error) {
			return nil, errors.New("unavailable: node 2 no longer leads shard orders/0; retry")
		},
	})
	ctx := context.Background()
	_, err := a.tr.Ping(ctx, 2, &clusterv1.PingRequest{From: 1})
	if connect.CodeOf(err) != connect.CodeFailedPrecondition || !strings.Contains(err.Error(), "not now") ||
		!strings.Contains(err.Error(), "rpc Ping on node 2 at "+url) {
		t.Errorf("Ping = %v; want failed precondition, naming the rpc, the node and its URL, and saying why", err)
	}
	_, err = a.tr.Started(ctx, 2, &clusterv1.StartedRequest{})
	if connect.CodeOf(err) != connect.CodeUnknown || !strings.Contains(err.Error(), "node 2 no longer leads shard orders/0; retry") {
		t.Errorf("Started = %v; want unknown, with the handler's message", err)
	}
}

// A node of a newer version may call a procedure its peer does not
// serve: the call fails loudly, Unimplemented, naming the procedure,
// whether the peer is of an older version (which has no such route),
// of this one without a handler for it, or of this one called by an
// older node on a procedure that is gone.
func TestRPCUnknownProcedure(t *testing.T) {
	a, b, url := pair(t)
	ctx := context.Background()

	_, err := a.tr.Ping(ctx, 2, &clusterv1.PingRequest{})
	if connect.CodeOf(err) != connect.CodeUnavailable || !strings.Contains(err.Error(), "starting") {
		t.Errorf("Ping on a node without handlers yet = %v; want unavailable, starting", err)
	}

	b.tr.Handle(Handlers{Join: echoJoin})
	_, err = a.tr.Fetch(ctx, 2, &clusterv1.FetchRequest{})
	if connect.CodeOf(err) != connect.CodeUnimplemented || !strings.Contains(err.Error(), clusterv1connect.ClusterServiceFetchProcedure) {
		t.Errorf("Fetch on a node without a Fetch handler = %v; want unimplemented, naming %s", err, clusterv1connect.ClusterServiceFetchProcedure)
	}

	// An older node calls a procedure this version does not have.
	old := connect.NewClient[emptypb.Empty, emptypb.Empty](http2Client(nil), url+"/herald.cluster.v1.ClusterService/Call", connect.WithGRPC())
	_, err = old.CallUnary(ctx, connect.NewRequest(&emptypb.Empty{}))
	if connect.CodeOf(err) != connect.CodeUnimplemented || !strings.Contains(err.Error(), "/herald.cluster.v1.ClusterService/Call") ||
		!strings.Contains(err.Error(), "same version") {
		t.Errorf("a removed procedure = %v; want unimplemented, naming it and asking about versions", err)
	}

	// This node calls an older one, whose service has no Fetch: connect's
	// handler answers a procedure it does not know with a 404.
	ln := listen(t)
	var p http.Protocols
	p.SetUnencryptedHTTP2(true)
	srv := &http.Server{Handler: http.NotFoundHandler(), Protocols: &p}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	a.tr.AddPeer(3, ln.Addr().String())
	_, err = a.tr.Fetch(ctx, 3, &clusterv1.FetchRequest{})
	if connect.CodeOf(err) != connect.CodeUnimplemented || !strings.Contains(err.Error(), "rpc Fetch on node 3") ||
		!strings.Contains(err.Error(), "same version") {
		t.Errorf("Fetch on an older node = %v; want unimplemented, naming the rpc and asking for one version", err)
	}
}

// Nodes of different clusters refuse each other's rpcs, as they refuse
// each other's raft streams: the handler does not run.
func TestRPCRefusedAcrossClusters(t *testing.T) {
	a, b, _ := pair(t)
	ran := make(chan struct{}, 1)
	b.tr.Handle(Handlers{Ping: func(context.Context, *clusterv1.PingRequest) (*clusterv1.PingResponse, error) {
		ran <- struct{}{}
		return &clusterv1.PingResponse{}, nil
	}})
	a.tr.SetCluster("cluster-a")
	b.tr.SetCluster("cluster-b")
	_, err := a.tr.Ping(context.Background(), 2, &clusterv1.PingRequest{From: 1})
	var foreign *ForeignClusterError
	if !errors.As(err, &foreign) || foreign.Cluster != "cluster-b" {
		t.Errorf("Ping across clusters = %v; want a ForeignClusterError naming cluster-b", err)
	}
	if f := b.tr.Foreign(); f == nil || f.Cluster != "cluster-a" {
		t.Errorf("the callee saw %v; want a node of cluster-a", f)
	}
	select {
	case <-ran:
		t.Error("the handler ran for a node of another cluster")
	case <-time.After(50 * time.Millisecond):
	}

	b.tr.SetCluster("cluster-a")
	if _, err := a.tr.Ping(context.Background(), 2, &clusterv1.PingRequest{From: 1}); err != nil {
		t.Errorf("Ping within the cluster = %v", err)
	}
}
