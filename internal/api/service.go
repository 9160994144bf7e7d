// Package api serves herald over HTTP: the HeraldService (gRPC, gRPC-Web
// and JSON over HTTP from one connect-go handler), Prometheus metrics and
// health checks, all on one port. It translates between the wire types and
// the node, and maps errors to status codes whose messages say what was
// wrong and what to do.
package api

import (
	"context"
	"errors"
	"strings"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"herald/internal/node"
	"herald/internal/protocol"
	heraldv1 "herald/proto/herald/v1"
)

// service implements heraldv1connect.HeraldServiceHandler over a node.
type service struct {
	node    *node.Node
	metrics *Metrics
	stop    <-chan struct{} // Options.Stop: ends the publish streams
}

func (s *service) CreateTopic(ctx context.Context, req *connect.Request[heraldv1.CreateTopicRequest]) (*connect.Response[heraldv1.CreateTopicResponse], error) {
	t, err := s.node.CreateTopic(ctx, req.Msg.Name, req.Msg.Attributes)
	if err != nil {
		return nil, toConnect(err)
	}
	return connect.NewResponse(&heraldv1.CreateTopicResponse{Topic: topicProto(t)}), nil
}

func (s *service) GetTopic(ctx context.Context, req *connect.Request[heraldv1.GetTopicRequest]) (*connect.Response[heraldv1.GetTopicResponse], error) {
	t, err := s.node.GetTopic(req.Msg.Name)
	if err != nil {
		return nil, toConnect(err)
	}
	return connect.NewResponse(&heraldv1.GetTopicResponse{Topic: topicProto(t)}), nil
}

func (s *service) ListTopics(ctx context.Context, req *connect.Request[heraldv1.ListTopicsRequest]) (*connect.Response[heraldv1.ListTopicsResponse], error) {
	resp := &heraldv1.ListTopicsResponse{}
	for _, t := range s.node.ListTopics() {
		resp.Topics = append(resp.Topics, topicProto(t))
	}
	return connect.NewResponse(resp), nil
}

func (s *service) SetTopicAttributes(ctx context.Context, req *connect.Request[heraldv1.SetTopicAttributesRequest]) (*connect.Response[heraldv1.SetTopicAttributesResponse], error) {
	t, err := s.node.SetTopicAttributes(ctx, req.Msg.Name, req.Msg.Attributes)
	if err != nil {
		return nil, toConnect(err)
	}
	return connect.NewResponse(&heraldv1.SetTopicAttributesResponse{Topic: topicProto(t)}), nil
}

func (s *service) DeleteTopic(ctx context.Context, req *connect.Request[heraldv1.DeleteTopicRequest]) (*connect.Response[heraldv1.DeleteTopicResponse], error) {
	if err := s.node.DeleteTopic(ctx, req.Msg.Name); err != nil {
		return nil, toConnect(err)
	}
	return connect.NewResponse(&heraldv1.DeleteTopicResponse{}), nil
}

func (s *service) TopicStats(ctx context.Context, req *connect.Request[heraldv1.TopicStatsRequest]) (*connect.Response[heraldv1.TopicStatsResponse], error) {
	st, err := s.node.TopicStats(ctx, req.Msg.Name)
	if err != nil {
		return nil, toConnect(err)
	}
	resp := &heraldv1.TopicStatsResponse{Name: st.Name, Total: shardStatsProto(st.Total)}
	for _, sh := range st.Shards {
		resp.Shards = append(resp.Shards, shardStatsProto(sh))
	}
	return connect.NewResponse(resp), nil
}

func (s *service) Publish(ctx context.Context, req *connect.Request[heraldv1.PublishRequest]) (*connect.Response[heraldv1.PublishResponse], error) {
	ids, err := s.publish(ctx, req.Msg)
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&heraldv1.PublishResponse{Ids: ids}), nil
}

// publish publishes req's events, for the Publish call and for the
// publish stream; its error is a *connect.Error.
func (s *service) publish(ctx context.Context, req *heraldv1.PublishRequest) ([]string, error) {
	return s.startPublish(ctx, req).wait()
}

// pendingPublish is a publish whose events were proposed.
type pendingPublish struct {
	s       *service
	topic   string
	start   time.Time
	pending *node.PendingPublish
}

// startPublish proposes req's events without waiting for them to commit.
func (s *service) startPublish(ctx context.Context, req *heraldv1.PublishRequest) *pendingPublish {
	return &pendingPublish{s: s, topic: req.Topic, start: time.Now(), pending: s.node.StartPublish(ctx, req.Topic, eventsFromProto(req.Events))}
}

// wait returns what publish does, once the events committed.
func (p *pendingPublish) wait() ([]string, error) {
	ids, err := p.pending.Wait()
	if err != nil {
		return nil, toConnect(err)
	}
	p.s.metrics.published(p.topic, len(ids), time.Since(p.start))
	return ids, nil
}

func (s *service) Reserve(ctx context.Context, req *connect.Request[heraldv1.ReserveRequest]) (*connect.Response[heraldv1.ReserveResponse], error) {
	r, err := s.node.Reserve(ctx, req.Msg.Topic, req.Msg.Key, int64(req.Msg.Bytes), int(req.Msg.Count))
	if err != nil {
		return nil, toConnect(err)
	}
	return connect.NewResponse(&heraldv1.ReserveResponse{ReservationId: r.ID, ExpiresAt: timestamppb.New(r.ExpiresAt)}), nil
}

func (s *service) Commit(ctx context.Context, req *connect.Request[heraldv1.CommitRequest]) (*connect.Response[heraldv1.CommitResponse], error) {
	start := time.Now()
	ids, err := s.node.Commit(ctx, req.Msg.ReservationId, eventsFromProto(req.Msg.Events))
	if err != nil {
		return nil, toConnect(err)
	}
	s.metrics.published(topicOfID(req.Msg.ReservationId), len(ids), time.Since(start))
	return connect.NewResponse(&heraldv1.CommitResponse{Ids: ids}), nil
}

func (s *service) Abort(ctx context.Context, req *connect.Request[heraldv1.AbortRequest]) (*connect.Response[heraldv1.AbortResponse], error) {
	if err := s.node.Abort(ctx, req.Msg.ReservationId); err != nil {
		return nil, toConnect(err)
	}
	return connect.NewResponse(&heraldv1.AbortResponse{}), nil
}

func (s *service) Fetch(ctx context.Context, req *connect.Request[heraldv1.FetchRequest]) (*connect.Response[heraldv1.FetchResponse], error) {
	m := req.Msg
	opts := node.FetchOptions{Max: int(m.MaxEvents), Visibility: durationOf(m.VisibilityTimeout), Wait: durationOf(m.Wait), Subscription: m.Subscription}
	if v := req.Header().Get(protocol.ShardsHeader); v != "" {
		shards, err := parseShards(v)
		if err != nil {
			return nil, connect.NewError(connect.CodeInvalidArgument, err)
		}
		opts.Shards = shards
	}
	res, err := s.node.Fetch(ctx, m.Topic, opts)
	if err != nil {
		return nil, fetchError(err)
	}
	resp := &heraldv1.FetchResponse{
		Events:           make([]*heraldv1.Event, len(res.Deliveries)),
		UnreadableShards: unreadableProto(res.Unreadable),
	}
	// The events and their times in one allocation each, rather than two
	// per event: a fetch hands out hundreds.
	events := make([]heraldv1.Event, len(res.Deliveries))
	times := make([]timestamppb.Timestamp, len(res.Deliveries))
	for i, d := range res.Deliveries {
		resp.Events[i] = fillDeliveryProto(&events[i], &times[i], m.Topic, d)
	}
	s.metrics.fetched(m.Topic, len(res.Deliveries))
	return connect.NewResponse(resp), nil
}

func (s *service) Ack(ctx context.Context, req *connect.Request[heraldv1.AckRequest]) (*connect.Response[heraldv1.AckResponse], error) {
	n, err := s.node.AckSubscription(ctx, req.Msg.Subscription, req.Msg.Ids)
	var lapsed *node.LapsedError
	if err != nil && !errors.As(err, &lapsed) {
		return nil, toConnect(err)
	}
	if len(req.Msg.Ids) > 0 {
		s.metrics.acked(topicOfID(req.Msg.Ids[0]), n)
	}
	resp := &heraldv1.AckResponse{Acked: uint32(n)}
	if lapsed != nil {
		resp.Lapsed = lapsed.Receipts
	}
	return connect.NewResponse(resp), nil
}

func (s *service) Nack(ctx context.Context, req *connect.Request[heraldv1.NackRequest]) (*connect.Response[heraldv1.NackResponse], error) {
	if err := s.node.NackSubscription(ctx, req.Msg.Subscription, req.Msg.Ids); err != nil {
		return nil, toConnect(err)
	}
	return connect.NewResponse(&heraldv1.NackResponse{}), nil
}

func topicProto(t node.Topic) *heraldv1.Topic {
	return &heraldv1.Topic{
		Name:       t.Name,
		Attributes: t.Attributes,
		CreatedAt:  timestamppb.New(t.CreatedAt),
		UpdatedAt:  timestamppb.New(t.UpdatedAt),
	}
}

func shardStatsProto(s node.ShardStats) *heraldv1.ShardStats {
	st := s.Stats
	p := &heraldv1.ShardStats{
		Name: s.Name, Events: uint64(st.Events), Bytes: uint64(st.Bytes),
		ReservedBytes: uint64(st.ReservedBytes), Reservations: uint32(st.Reservations),
		Published: st.Published, Acked: st.Acked, Leased: uint64(s.Leased),
		NextOffset: st.NextOffset, Head: st.Head,
		Delivered: st.Delivered, Retried: st.Retried, DeadLettered: st.DeadLettered,
		DeadLetters: uint64(st.DeadLetters), DeadLetterBytes: uint64(st.DeadLetterBytes),
		Skipped: st.Skipped,
		Lro:     s.LRO, LocalFirst: s.LocalFirst, LocalBytes: uint64(s.LocalBytes), TieredBytes: uint64(s.TieredBytes), TierError: s.TierError,
	}
	if s.Shard >= 0 {
		p.Shard = uint32(s.Shard)
	}
	if st.OldestEventTime != 0 {
		p.OldestEventTime = timestamppb.New(time.Unix(0, st.OldestEventTime))
	}
	if s.Err != nil {
		p.Error = s.Err.Error()
	}
	if h := s.Delivery; h != nil {
		p.Delivery = deliveryHealthProto(h, time.Now())
	}
	return p
}

// deliveryHealthProto is h as the API sends it; a pause over by now is
// left unset.
func deliveryHealthProto(h *node.DeliveryHealth, now time.Time) *heraldv1.DeliveryHealth {
	p := &heraldv1.DeliveryHealth{LastError: h.LastError, ConsecutiveFailures: h.ConsecutiveFailures,
		LastErrorTime: timestampOrNil(h.LastErrorTime), LastSuccess: timestampOrNil(h.LastSuccess),
		FailingSince: timestampOrNil(h.FailingSince)}
	if h.PausedUntil.After(now) {
		p.PausedUntil = timestamppb.New(h.PausedUntil)
	}
	return p
}

// timestampOrNil leaves the zero time unset.
func timestampOrNil(t time.Time) *timestamppb.Timestamp {
	if t.IsZero() {
		return nil
	}
	return timestamppb.New(t)
}

func eventsFromProto(in []*heraldv1.PublishEvent) []node.Event {
	out := make([]node.Event, len(in))
	for i, e := range in {
		out[i] = node.Event{Key: e.Key, Payload: e.Payload, Headers: e.Headers, DedupID: e.DedupId}
	}
	return out
}

func deliveryProto(topicName string, d node.Delivery) *heraldv1.Event {
	return fillDeliveryProto(new(heraldv1.Event), new(timestamppb.Timestamp), topicName, d)
}

// fillDeliveryProto is deliveryProto into e, a zero message, with its time
// in ts, also zero.
func fillDeliveryProto(e *heraldv1.Event, ts *timestamppb.Timestamp, topicName string, d node.Delivery) *heraldv1.Event {
	ts.Seconds, ts.Nanos = d.Time.Unix(), int32(d.Time.Nanosecond())
	e.Id, e.Receipt, e.Topic, e.Shard, e.Offset = d.ID, d.Receipt, topicName, uint32(d.Shard), d.Offset
	e.Key, e.Payload, e.Time = d.Event.Key, d.Event.Payload, ts
	e.DeliveryAttempt, e.Headers = d.Attempt, d.Event.Headers
	return e
}

func unreadableProto(shards []node.UnreadableShard) []*heraldv1.UnreadableShard {
	var out []*heraldv1.UnreadableShard
	for _, u := range shards {
		out = append(out, &heraldv1.UnreadableShard{Shard: uint32(u.Shard), Name: u.Name, Reason: u.Err.Error()})
	}
	return out
}

func durationOf(d *durationpb.Duration) time.Duration {
	if d == nil {
		return 0
	}
	return d.AsDuration()
}

// topicOfID returns the topic part of an event or reservation id, for
// metric labels.
func topicOfID(id string) string {
	t, _, _ := strings.Cut(id, "/")
	return t
}
