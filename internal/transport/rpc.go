package transport

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"connectrpc.com/connect"

	clusterv1 "herald/proto/herald/cluster/v1"
	"herald/proto/herald/cluster/v1/clusterv1connect"
)

// The unary rpcs of the cluster service (cluster.proto says what each
// does). A node calls them on its peers with the typed methods below and
// answers them with its Handlers; only this package knows connect.

// Unary answers one unary rpc.
type Unary[Req, Resp any] func(context.Context, *Req) (*Resp, error)

// Handlers answer the unary rpcs peers call on this node; the Raft stream
// goes to the Receiver. A nil one answers Unimplemented. An error a
// handler returns reaches the caller with its message, and its code if it
// is a *connect.Error (else Unknown).
type Handlers struct {
	Fetch       Unary[clusterv1.FetchRequest, clusterv1.FetchResponse]
	Nack        Unary[clusterv1.NackRequest, clusterv1.NackResponse]
	Ack         Unary[clusterv1.AckRequest, clusterv1.AckResponse]
	Propose     Unary[clusterv1.ProposeRequest, clusterv1.ProposeResponse]
	Entries     Unary[clusterv1.EntriesRequest, clusterv1.EntriesResponse]
	Readd       Unary[clusterv1.ReaddRequest, clusterv1.ReaddResponse]
	Started     Unary[clusterv1.StartedRequest, clusterv1.StartedResponse]
	Ping        Unary[clusterv1.PingRequest, clusterv1.PingResponse]
	LocalStatus Unary[clusterv1.LocalStatusRequest, clusterv1.LocalStatusResponse]
	Join        Unary[clusterv1.JoinRequest, clusterv1.JoinResponse]
}

// Handle answers peers' rpcs with h from now on. Until it is called,
// they are answered Unavailable: the node is starting.
func (t *Transport) Handle(h Handlers) {
	t.handlers.Store(&h)
}

// ErrUnknownPeer is returned by an rpc on a node that is not a peer.
var ErrUnknownPeer = errors.New("node is not a peer of this node; check --peers")

// Fetch leases events of a shard on node to.
func (t *Transport) Fetch(ctx context.Context, to uint64, req *clusterv1.FetchRequest) (*clusterv1.FetchResponse, error) {
	return call(ctx, t, to, clusterv1connect.ClusterServiceFetchProcedure, clusterv1connect.ClusterServiceClient.Fetch, req)
}

// Nack ends leases of a shard's events on node to.
func (t *Transport) Nack(ctx context.Context, to uint64, req *clusterv1.NackRequest) (*clusterv1.NackResponse, error) {
	return call(ctx, t, to, clusterv1connect.ClusterServiceNackProcedure, clusterv1connect.ClusterServiceClient.Nack, req)
}

// Ack acknowledges events of a shard named by receipts on node to.
func (t *Transport) Ack(ctx context.Context, to uint64, req *clusterv1.AckRequest) (*clusterv1.AckResponse, error) {
	return call(ctx, t, to, clusterv1connect.ClusterServiceAckProcedure, clusterv1connect.ClusterServiceClient.Ack, req)
}

// Propose has node to, a replica of a shard, propose a command.
func (t *Transport) Propose(ctx context.Context, to uint64, req *clusterv1.ProposeRequest) (*clusterv1.ProposeResponse, error) {
	return call(ctx, t, to, clusterv1connect.ClusterServiceProposeProcedure, clusterv1connect.ClusterServiceClient.Propose, req)
}

// Entries fetches log entries of a raft group from node to. It
// implements host.Transport.
func (t *Transport) Entries(ctx context.Context, to uint64, req *clusterv1.EntriesRequest) (*clusterv1.EntriesResponse, error) {
	return call(ctx, t, to, clusterv1connect.ClusterServiceEntriesProcedure, clusterv1connect.ClusterServiceClient.Entries, req)
}

// Readd asks node to, a raft group's leader, to re-add a rebuilt replica.
// It implements host.Transport.
func (t *Transport) Readd(ctx context.Context, to uint64, req *clusterv1.ReaddRequest) (*clusterv1.ReaddResponse, error) {
	return call(ctx, t, to, clusterv1connect.ClusterServiceReaddProcedure, clusterv1connect.ClusterServiceClient.Readd, req)
}

// Started asks node to whether the cluster has run before.
func (t *Transport) Started(ctx context.Context, to uint64, req *clusterv1.StartedRequest) (*clusterv1.StartedResponse, error) {
	return call(ctx, t, to, clusterv1connect.ClusterServiceStartedProcedure, clusterv1connect.ClusterServiceClient.Started, req)
}

// Ping checks that node to is alive.
func (t *Transport) Ping(ctx context.Context, to uint64, req *clusterv1.PingRequest) (*clusterv1.PingResponse, error) {
	return call(ctx, t, to, clusterv1connect.ClusterServicePingProcedure, clusterv1connect.ClusterServiceClient.Ping, req)
}

// LocalStatus returns the state of node to's groups.
func (t *Transport) LocalStatus(ctx context.Context, to uint64, req *clusterv1.LocalStatusRequest) (*clusterv1.LocalStatusResponse, error) {
	return call(ctx, t, to, clusterv1connect.ClusterServiceLocalStatusProcedure, clusterv1connect.ClusterServiceClient.LocalStatus, req)
}

// Join asks node to whether a joining node is a member of the cluster.
func (t *Transport) Join(ctx context.Context, to uint64, req *clusterv1.JoinRequest) (*clusterv1.JoinResponse, error) {
	return call(ctx, t, to, clusterv1connect.ClusterServiceJoinProcedure, clusterv1connect.ClusterServiceClient.Join, req)
}

// call runs the rpc of procedure on node to. Its errors name the rpc, the
// node and the node's URL, and wrap connect's error (connect.CodeOf
// gives its code).
func call[Req, Resp any](ctx context.Context, t *Transport, to uint64, procedure string,
	rpc func(clusterv1connect.ClusterServiceClient, context.Context, *connect.Request[Req]) (*connect.Response[Resp], error),
	req *Req) (*Resp, error) {
	name := procedure[strings.LastIndexByte(procedure, '/')+1:]
	p := t.peer(to)
	if p == nil {
		return nil, fmt.Errorf("rpc %s on node %d: %w", name, to, ErrUnknownPeer)
	}
	resp, err := rpc(p.client, ctx, connect.NewRequest(req))
	if err != nil {
		hint := ""
		if connect.CodeOf(err) == connect.CodeUnimplemented {
			hint = " (all the nodes of a cluster must run the same version of herald)"
		}
		return nil, fmt.Errorf("rpc %s on node %d at %s: %w%s", name, to, p.url, err, hint)
	}
	return resp.Msg, nil
}

// serve answers one rpc with h.
func serve[Req, Resp any](ctx context.Context, t *Transport, req *connect.Request[Req], h Unary[Req, Resp]) (*connect.Response[Resp], error) {
	if t.handlers.Load() == nil {
		return nil, connect.NewError(connect.CodeUnavailable, fmt.Errorf("node %d is starting; it does not answer %s yet", t.cfg.NodeID, req.Spec().Procedure))
	}
	if h == nil {
		return nil, connect.NewError(connect.CodeUnimplemented, fmt.Errorf("node %d does not serve %s", t.cfg.NodeID, req.Spec().Procedure))
	}
	out, err := h(ctx, req.Msg)
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(out), nil
}

// handlers returns what Handle registered; none before it.
func (s *service) handlers() *Handlers {
	if h := s.t.handlers.Load(); h != nil {
		return h
	}
	return &Handlers{}
}

func (s *service) Fetch(ctx context.Context, req *connect.Request[clusterv1.FetchRequest]) (*connect.Response[clusterv1.FetchResponse], error) {
	return serve(ctx, s.t, req, s.handlers().Fetch)
}

func (s *service) Nack(ctx context.Context, req *connect.Request[clusterv1.NackRequest]) (*connect.Response[clusterv1.NackResponse], error) {
	return serve(ctx, s.t, req, s.handlers().Nack)
}

func (s *service) Ack(ctx context.Context, req *connect.Request[clusterv1.AckRequest]) (*connect.Response[clusterv1.AckResponse], error) {
	return serve(ctx, s.t, req, s.handlers().Ack)
}

func (s *service) Propose(ctx context.Context, req *connect.Request[clusterv1.ProposeRequest]) (*connect.Response[clusterv1.ProposeResponse], error) {
	return serve(ctx, s.t, req, s.handlers().Propose)
}

func (s *service) Entries(ctx context.Context, req *connect.Request[clusterv1.EntriesRequest]) (*connect.Response[clusterv1.EntriesResponse], error) {
	return serve(ctx, s.t, req, s.handlers().Entries)
}

func (s *service) Readd(ctx context.Context, req *connect.Request[clusterv1.ReaddRequest]) (*connect.Response[clusterv1.ReaddResponse], error) {
	return serve(ctx, s.t, req, s.handlers().Readd)
}

func (s *service) Started(ctx context.Context, req *connect.Request[clusterv1.StartedRequest]) (*connect.Response[clusterv1.StartedResponse], error) {
	return serve(ctx, s.t, req, s.handlers().Started)
}

func (s *service) Ping(ctx context.Context, req *connect.Request[clusterv1.PingRequest]) (*connect.Response[clusterv1.PingResponse], error) {
	return serve(ctx, s.t, req, s.handlers().Ping)
}

func (s *service) LocalStatus(ctx context.Context, req *connect.Request[clusterv1.LocalStatusRequest]) (*connect.Response[clusterv1.LocalStatusResponse], error) {
	return serve(ctx, s.t, req, s.handlers().LocalStatus)
}

func (s *service) Join(ctx context.Context, req *connect.Request[clusterv1.JoinRequest]) (*connect.Response[clusterv1.JoinResponse], error) {
	return serve(ctx, s.t, req, s.handlers().Join)
}

// knownProcedures answers a request for a procedure the cluster service
// does not have (a node of another version calling one that was removed
// or renamed) with Unimplemented naming it, where connect's handler would
// answer a bare 404.
func (t *Transport) knownProcedures(h http.Handler) http.Handler {
	known := make(map[string]bool)
	methods := clusterv1.File_herald_cluster_v1_cluster_proto.Services().ByName("ClusterService").Methods()
	for i := range methods.Len() {
		known["/"+clusterv1connect.ClusterServiceName+"/"+string(methods.Get(i).Name())] = true
	}
	errs := connect.NewErrorWriter()
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !known[r.URL.Path] {
			err := fmt.Errorf("node %d has no procedure %s; are all the nodes of the cluster the same version of herald?", t.cfg.NodeID, r.URL.Path)
			errs.Write(w, r, connect.NewError(connect.CodeUnimplemented, err))
			return
		}
		h.ServeHTTP(w, r)
	})
}
