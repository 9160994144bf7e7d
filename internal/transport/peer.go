package transport

import (
	"context"
	"fmt"

	"connectrpc.com/connect"
	pb "go.etcd.io/raft/v3/raftpb"

	"herald/internal/backoff"
	clusterv1 "herald/proto/herald/cluster/v1"
	"herald/proto/herald/cluster/v1/clusterv1connect"
)

// peer sends the messages queued for one node over one stream at a time.
type peer struct {
	t      *Transport
	id     uint64
	url    string
	queue  chan outgoing
	client clusterv1connect.ClusterServiceClient
}

// run opens a stream, sends batches on it until it breaks, and opens the
// next after a pause, until the transport stops.
func (p *peer) run() {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		<-p.t.stop
		cancel()
	}()
	retry := backoff.New(p.t.cfg.Retry)
	for ctx.Err() == nil {
		sent, err := p.stream(ctx)
		if ctx.Err() != nil {
			return
		}
		if sent {
			retry.Reset()
		}
		p.t.log.Debug("raft stream to peer broke; reopening", "peer", p.id, "url", p.url, "err", err)
		if backoff.Sleep(ctx, retry.Next()) != nil {
			return
		}
	}
}

// stream sends batches on one stream until sending fails. It reports
// whether any batch went out. The messages of the batch that failed are
// reported lost.
func (p *peer) stream(ctx context.Context) (sent bool, err error) {
	var first outgoing
	select {
	case first = <-p.queue:
	case <-ctx.Done():
		return false, ctx.Err()
	}
	s := p.client.Raft(ctx)
	defer func() {
		if _, cerr := s.CloseAndReceive(); err == nil && cerr != nil {
			err = cerr
		}
	}()
	batch := []outgoing{first}
	for {
		batch = p.fill(batch)
		if err := s.Send(p.encode(batch)); err != nil {
			p.lost(batch)
			return sent, fmt.Errorf("send to node %d: %w", p.id, err)
		}
		sent = true
		p.delivered(batch)
		batch = batch[:0]
		select {
		case o := <-p.queue:
			batch = append(batch, o)
		case <-ctx.Done():
			return sent, ctx.Err()
		}
	}
}

// fill adds to batch what else is queued, up to MaxBatch messages.
func (p *peer) fill(batch []outgoing) []outgoing {
	for len(batch) < p.t.cfg.MaxBatch {
		select {
		case o := <-p.queue:
			batch = append(batch, o)
		default:
			return batch
		}
	}
	return batch
}

func (p *peer) encode(batch []outgoing) *clusterv1.RaftBatch {
	b := &clusterv1.RaftBatch{From: p.t.cfg.NodeID, Messages: make([]*clusterv1.RaftMessage, 0, len(batch))}
	for _, o := range batch {
		b.Messages = append(b.Messages, &clusterv1.RaftMessage{Group: o.group, Message: o.msg})
	}
	return b
}

func (p *peer) lost(batch []outgoing) {
	for _, o := range batch {
		p.t.report(o.group, o.msg, true)
	}
}

// delivered reports the snapshots of a batch that went out.
func (p *peer) delivered(batch []outgoing) {
	for _, o := range batch {
		if o.msg.GetType() == pb.MessageType_MsgSnap {
			p.t.report(o.group, o.msg, false)
		}
	}
}

// service is the receiving side of the node-to-node API. It embeds no
// UnimplementedClusterServiceHandler, so that the compiler asks for every
// rpc cluster.proto declares.
type service struct {
	t *Transport
}

// Raft hands every message of every batch of a peer's stream to the
// receiver, until the peer closes the stream or this transport closes.
func (s *service) Raft(ctx context.Context, stream *connect.ClientStream[clusterv1.RaftBatch]) (*connect.Response[clusterv1.RaftAck], error) {
	s.t.mu.RLock()
	r := s.t.receiver
	s.t.mu.RUnlock()
	if r == nil {
		return nil, connect.NewError(connect.CodeUnavailable, fmt.Errorf("node %d is starting; its raft groups are not open yet", s.t.cfg.NodeID))
	}
	done := make(chan error, 1)
	// Receive blocks on the stream; once this handler returns, the server
	// closes the stream and Receive returns, so the goroutine ends.
	s.t.wg.Go(func() { done <- receive(stream, r) })
	select {
	case err := <-done:
		if err != nil {
			return nil, err
		}
		return connect.NewResponse(&clusterv1.RaftAck{}), nil
	case <-s.t.stop:
		return nil, connect.NewError(connect.CodeUnavailable, fmt.Errorf("node %d is shutting down", s.t.cfg.NodeID))
	}
}

func receive(stream *connect.ClientStream[clusterv1.RaftBatch], r Receiver) error {
	for stream.Receive() {
		for _, rm := range stream.Msg().GetMessages() {
			m := rm.GetMessage()
			if m == nil {
				return connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("a batch from node %d holds no raft message for group %d", stream.Msg().GetFrom(), rm.GetGroup()))
			}
			// A message for a group this node does not run yet (its
			// topic is not applied here yet) is dropped: raft resends.
			_ = r.Receive(rm.GetGroup(), m)
		}
	}
	return stream.Err()
}
