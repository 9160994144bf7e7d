package client

import (
	"context"
	"errors"
	"net/http"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/durationpb"

	"herald/internal/protocol"
	heraldv1 "herald/proto/herald/v1"
	"herald/proto/herald/v1/heraldv1connect"
)

// Publish appends events to topic, each routed to its shard by key, and
// returns their ids in order. It returns once every event is committed.
// With WithPublishBatching, concurrent calls share requests; with
// WithPublishRetries, a call that fails for a retryable reason is retried,
// idempotently.
//
// Events that would make a request larger than the server's request
// limit (MaxRequestBytes; EventBytes says how much each takes) are sent
// as several requests, one after another, each with as many events as
// fit. If one of them fails, the events of the requests before it are
// committed: Publish then returns their ids, a prefix of the events', with
// the error. An event too large for a request of its own fails the call
// before anything is sent.
func (c *Client) Publish(ctx context.Context, topic string, events ...Event) ([]string, error) {
	if c.retries > 0 && len(events) > 0 {
		events = withDedupIDs(events)
	}
	parts, err := splitRequests(topic, events)
	if err != nil {
		return nil, err
	}
	if len(parts) == 1 {
		return c.publishPart(ctx, topic, parts[0])
	}
	ids := make([]string, 0, len(events))
	for _, part := range parts {
		got, err := c.publishPart(ctx, topic, part)
		if err != nil {
			return ids, err
		}
		ids = append(ids, got...)
	}
	return ids, nil
}

// publishPart publishes events that fit in one request.
func (c *Client) publishPart(ctx context.Context, topic string, events []Event) ([]string, error) {
	if c.retries > 0 && len(events) > 0 {
		return c.publishRetrying(ctx, topic, events)
	}
	return c.publishOnce(ctx, topic, events)
}

func (c *Client) publishOnce(ctx context.Context, topic string, events []Event) ([]string, error) {
	if c.batchMax > 0 && len(events) > 0 {
		return c.publishBatched(ctx, topic, events)
	}
	return c.sendPublish(ctx, &heraldv1.PublishRequest{Topic: topic, Events: eventsToProto(events)})
}

// Reserve holds bytes of space in the shard of key for a later Commit of
// count events (0 means any number). bytes must cover the keys, payloads
// and header names and values of the events to commit.
func (c *Client) Reserve(ctx context.Context, topic, key string, bytes uint64, count uint32) (*Reservation, error) {
	ctx, cancel := c.callContext(ctx, 0)
	defer cancel()
	req := &heraldv1.ReserveRequest{Topic: topic, Key: key, Bytes: bytes, Count: count}
	resp, err := c.svc.Reserve(ctx, connect.NewRequest(req))
	if err != nil {
		return nil, err
	}
	return &Reservation{
		ID:        resp.Msg.GetReservationId(),
		ExpiresAt: timeOf(resp.Msg.GetExpiresAt()),
	}, nil
}

// Commit appends events into the space of a reservation and returns their
// ids. Every event's key must route to the reservation's shard; the
// simplest is to use the key given to Reserve.
func (c *Client) Commit(ctx context.Context, reservationID string, events ...Event) ([]string, error) {
	ctx, cancel := c.callContext(ctx, 0)
	defer cancel()
	req := &heraldv1.CommitRequest{ReservationId: reservationID, Events: eventsToProto(events)}
	resp, err := c.svc.Commit(ctx, connect.NewRequest(req))
	if err != nil {
		return nil, err
	}
	return resp.Msg.GetIds(), nil
}

// Abort releases a reservation. Aborting twice is not an error.
func (c *Client) Abort(ctx context.Context, reservationID string) error {
	ctx, cancel := c.callContext(ctx, 0)
	defer cancel()
	req := &heraldv1.AbortRequest{ReservationId: reservationID}
	_, err := c.svc.Abort(ctx, connect.NewRequest(req))
	return err
}

// Fetch leases events of topic. It returns no events, and no error, if none
// was available within opts.Wait.
//
// When some shards of the topic could not be read, Fetch returns the events
// of the others together with an *UnreadableError naming the unread shards:
// handle the events, then the error. When no shard could be read, it
// returns no events and an *UnreadableError whose All method reports true.
func (c *Client) Fetch(ctx context.Context, topic string, opts FetchOptions) ([]Delivery, error) {
	if c.router != nil {
		return c.fetchRouted(ctx, topic, opts)
	}
	ds, unread, _, err := c.fetchFrom(ctx, c.svc, topic, opts, nil)
	if err != nil {
		return nil, err
	}
	if len(unread) > 0 {
		return ds, &UnreadableError{Topic: topic, Shards: unread}
	}
	return ds, nil
}

// fetchFrom sends one fetch to svc: of the shards at the indexes in
// shards, or of every shard if shards is nil. It returns the events and
// the shards the node could not read; when it could read none, the error
// is an *UnreadableError.
func (c *Client) fetchFrom(ctx context.Context, svc heraldv1connect.HeraldServiceClient, topic string, opts FetchOptions, shards []int) ([]Delivery, []UnreadableShard, http.Header, error) {
	ctx, cancel := c.callContext(ctx, opts.Wait)
	defer cancel()
	req := connect.NewRequest(&heraldv1.FetchRequest{Topic: topic, MaxEvents: toUint32(opts.MaxEvents), Subscription: opts.Subscription})
	if opts.VisibilityTimeout > 0 {
		req.Msg.VisibilityTimeout = durationpb.New(opts.VisibilityTimeout)
	}
	if opts.Wait > 0 {
		req.Msg.Wait = durationpb.New(opts.Wait)
	}
	if shards != nil {
		req.Header().Set(protocol.ShardsHeader, joinInts(shards))
	}
	resp, err := svc.Fetch(ctx, req)
	if err != nil {
		return nil, nil, errorMeta(err), fetchError(topic, err)
	}
	deliveries := make([]Delivery, 0, len(resp.Msg.GetEvents()))
	for _, e := range resp.Msg.GetEvents() {
		deliveries = append(deliveries, deliveryFromProto(e))
	}
	return deliveries, unreadableFromProto(resp.Msg.GetUnreadableShards()), resp.Header(), nil
}

// fetchError returns the error of a fetch that could read no shard, whose
// FetchResponse detail lists the shards, as an *UnreadableError; any other
// error as it is.
func fetchError(topic string, err error) error {
	var ce *connect.Error
	if !errors.As(err, &ce) {
		return err
	}
	for _, d := range ce.Details() {
		m, derr := d.Value()
		if r, ok := m.(*heraldv1.FetchResponse); derr == nil && ok && len(r.GetUnreadableShards()) > 0 {
			return &UnreadableError{Topic: topic, Shards: unreadableFromProto(r.GetUnreadableShards()), server: err}
		}
	}
	return err
}

// Ack marks events as done, named by Delivery.Receipt (or by event id);
// they are never handed out again. It returns how many were newly
// acknowledged. Receipts whose leases lapsed are not acted on, and the
// error is then a *LapsedError naming them. With WithLeaderRouting, each
// goes to the leader of its event's shard.
//
// A receipt is acknowledged in the subscription it was fetched from; an
// event id in the topic's default subscription (see AckSubscription).
func (c *Client) Ack(ctx context.Context, ids ...string) (int, error) {
	return c.AckSubscription(ctx, "", ids...)
}

// AckSubscription is Ack in a subscription: event ids are acknowledged
// in the subscription named ("" for the topic's default one), receipts in
// their own, which must be the one named.
func (c *Client) AckSubscription(ctx context.Context, subscription string, ids ...string) (int, error) {
	var n int
	var lapsed []string
	var err error
	if c.router != nil {
		n, lapsed, err = c.ackRouted(ctx, subscription, ids)
	} else {
		n, lapsed, _, err = c.ackTo(ctx, c.svc, subscription, ids)
	}
	if err == nil && len(lapsed) > 0 {
		err = &LapsedError{Receipts: lapsed}
	}
	return n, err
}

func (c *Client) ackTo(ctx context.Context, svc heraldv1connect.HeraldServiceClient, sub string, ids []string) (int, []string, http.Header, error) {
	ctx, cancel := c.callContext(ctx, 0)
	defer cancel()
	resp, err := svc.Ack(ctx, connect.NewRequest(&heraldv1.AckRequest{Ids: ids, Subscription: sub}))
	if err != nil {
		return 0, nil, errorMeta(err), err
	}
	return int(resp.Msg.GetAcked()), resp.Msg.GetLapsed(), resp.Header(), nil
}

// Nack ends the leases of events early so they can be fetched again,
// named by Delivery.Receipt (which ends that delivery's lease only) or by
// event id. With WithLeaderRouting, each goes to the leader of its event's
// shard.
func (c *Client) Nack(ctx context.Context, ids ...string) error {
	return c.NackSubscription(ctx, "", ids...)
}

// NackSubscription is Nack in a subscription, which event ids and
// receipts name as they do for AckSubscription.
func (c *Client) NackSubscription(ctx context.Context, subscription string, ids ...string) error {
	if c.router != nil {
		return c.nackRouted(ctx, subscription, ids)
	}
	_, err := c.nackTo(ctx, c.svc, subscription, ids)
	return err
}

func (c *Client) nackTo(ctx context.Context, svc heraldv1connect.HeraldServiceClient, sub string, ids []string) (http.Header, error) {
	ctx, cancel := c.callContext(ctx, 0)
	defer cancel()
	resp, err := svc.Nack(ctx, connect.NewRequest(&heraldv1.NackRequest{Ids: ids, Subscription: sub}))
	if err != nil {
		return errorMeta(err), err
	}
	return resp.Header(), nil
}

// errorMeta returns the headers of an error's response, if it had any.
func errorMeta(err error) http.Header {
	var ce *connect.Error
	if errors.As(err, &ce) {
		return ce.Meta()
	}
	return nil
}
