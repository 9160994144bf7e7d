package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"time"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"herald/client"
	heraldv1 "herald/proto/herald/v1"
)

// The CLI's JSON is the API's: what a command shows of a topic, a
// subscription, an event, a dead letter, a topic's statistics or the
// cluster's status is written as the API's protobuf message in protojson
// (camelCase names, 64-bit integers as strings, RFC 3339 times, base64
// bytes), so a script may read either. Every field is written, zeros included, so that scripts find
// each one.
var protoJSON = protojson.MarshalOptions{EmitUnpopulated: true}

// writeProto writes m as one indented JSON document.
func writeProto(w io.Writer, m proto.Message) error {
	b, err := protoJSON.Marshal(m)
	if err != nil {
		return fmt.Errorf("encode %T as JSON: %w", m, err)
	}
	// protojson varies its spacing from build to build on purpose;
	// indenting again makes the output the same every time.
	var out bytes.Buffer
	if err := json.Indent(&out, b, "", "  "); err != nil {
		return err
	}
	out.WriteByte('\n')
	_, err = w.Write(out.Bytes())
	return err
}

// writeProtoLine writes m as JSON on one line, for streams of items.
func writeProtoLine(w io.Writer, m proto.Message) error {
	b, err := protoJSON.Marshal(m)
	if err != nil {
		return fmt.Errorf("encode %T as JSON: %w", m, err)
	}
	var out bytes.Buffer
	if err := json.Compact(&out, b); err != nil {
		return err
	}
	out.WriteByte('\n')
	_, err = w.Write(out.Bytes())
	return err
}

// apiMessage returns the API's message for what the client returned, or
// nil if v is not one of those.
func apiMessage(v any) proto.Message {
	switch v := v.(type) {
	case *client.Topic:
		return topicProto(v)
	case []*client.Topic:
		resp := &heraldv1.ListTopicsResponse{Topics: make([]*heraldv1.Topic, 0, len(v))}
		for _, t := range v {
			resp.Topics = append(resp.Topics, topicProto(t))
		}
		return resp
	case *client.Subscription:
		return subscriptionProto(v)
	case []*client.Subscription:
		resp := &heraldv1.ListSubscriptionsResponse{Subscriptions: make([]*heraldv1.Subscription, 0, len(v))}
		for _, sub := range v {
			resp.Subscriptions = append(resp.Subscriptions, subscriptionProto(sub))
		}
		return resp
	case *client.TopicStats:
		resp := &heraldv1.TopicStatsResponse{Name: v.Name, Total: shardStatsProto(v.Total)}
		for _, st := range v.Shards {
			resp.Shards = append(resp.Shards, shardStatsProto(st))
		}
		return resp
	case client.Delivery:
		return eventProto(v)
	case client.DeadLetter:
		return &heraldv1.DeadLetter{Event: eventProto(v.Delivery), Reason: v.Reason,
			LastError: v.LastError, DeadAt: timestamp(v.DeadAt)}
	case *client.Reservation:
		return &heraldv1.ReserveResponse{ReservationId: v.ID, ExpiresAt: timestamp(v.ExpiresAt)}
	case *client.ClusterStatus:
		return clusterStatusProto(v)
	}
	return nil
}

func topicProto(t *client.Topic) *heraldv1.Topic {
	return &heraldv1.Topic{Name: t.Name, Attributes: t.Attributes,
		CreatedAt: timestamp(t.CreatedAt), UpdatedAt: timestamp(t.UpdatedAt)}
}

func subscriptionProto(s *client.Subscription) *heraldv1.Subscription {
	p := &heraldv1.Subscription{Topic: s.Topic, Name: s.Name, Id: s.ID, Attributes: s.Attributes,
		Disabled: s.Disabled, DisabledReason: s.DisabledReason, DisabledAt: timestamp(s.DisabledAt),
		CreatedAt: timestamp(s.CreatedAt), UpdatedAt: timestamp(s.UpdatedAt)}
	if s.Stats != nil {
		p.Stats = shardStatsProto(*s.Stats)
		p.ShardStats = make([]*heraldv1.ShardStats, 0, len(s.ShardStats))
		for _, st := range s.ShardStats {
			p.ShardStats = append(p.ShardStats, shardStatsProto(st))
		}
	}
	return p
}

func eventProto(d client.Delivery) *heraldv1.Event {
	return &heraldv1.Event{Id: d.ID, Topic: d.Topic, Shard: uint32(d.Shard), Offset: d.Offset,
		Key: d.Key, Payload: d.Payload, Headers: d.Headers, Time: timestamp(d.Time),
		DeliveryAttempt: uint32(d.Attempt), Receipt: d.Receipt}
}

func shardStatsProto(s client.ShardStats) *heraldv1.ShardStats {
	p := &heraldv1.ShardStats{
		Shard: uint32(s.Shard), Name: s.Name, Events: s.Events, Bytes: s.Bytes,
		ReservedBytes: s.ReservedBytes, Reservations: uint32(s.Reservations),
		OldestEventTime: timestamp(s.OldestEventTime), Published: s.Published, Acked: s.Acked,
		Leased: s.Leased, NextOffset: s.NextOffset, Head: s.Head, Error: s.Error,
		Delivered: s.Delivered, Retried: s.Retried, DeadLettered: s.DeadLettered,
		DeadLetters: s.DeadLetters, DeadLetterBytes: s.DeadLetterBytes, Skipped: s.Skipped,
	}
	if h := s.Delivery; h != nil {
		p.Delivery = &heraldv1.DeliveryHealth{LastError: h.LastError, LastErrorTime: timestamp(h.LastErrorTime),
			ConsecutiveFailures: h.ConsecutiveFailures, LastSuccess: timestamp(h.LastSuccess),
			FailingSince: timestamp(h.FailingSince), PausedUntil: timestamp(h.PausedUntil)}
	}
	return p
}

func clusterStatusProto(st *client.ClusterStatus) *heraldv1.ClusterStatusResponse {
	p := &heraldv1.ClusterStatusResponse{NodeId: st.NodeID, ControllerLeader: st.ControllerLeader,
		Rebalancing: st.Rebalancing}
	for _, n := range st.Nodes {
		p.Nodes = append(p.Nodes, &heraldv1.ClusterNode{Id: n.ID, Address: n.Address, Self: n.Self,
			Reachable: n.Reachable, Draining: n.Draining, Replicas: uint32(n.Replicas), Error: n.Error})
	}
	for _, s := range st.Shards {
		ps := &heraldv1.ClusterShard{Topic: s.Topic, Shard: uint32(s.Shard), Name: s.Name, Group: s.Group,
			PreferredLeader: s.PreferredLeader, Leader: s.Leader}
		for _, r := range s.Replicas {
			ps.Replicas = append(ps.Replicas, &heraldv1.ClusterReplica{Node: r.Node, Applied: r.Applied, Error: r.Error})
		}
		p.Shards = append(p.Shards, ps)
	}
	return p
}

// timestamp returns t as the API sends it: unset when zero.
func timestamp(t time.Time) *timestamppb.Timestamp {
	if t.IsZero() {
		return nil
	}
	return timestamppb.New(t)
}
