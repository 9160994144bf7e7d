package client

import (
	"context"

	"connectrpc.com/connect"

	heraldv1 "herald/proto/herald/v1"
)

// CreateTopic creates the topic name and all its shards. attrs sets
// attributes such as "shards", "persistent" or "push_endpoint"; the others
// take their defaults. It returns the topic with every attribute.
func (c *Client) CreateTopic(ctx context.Context, name string, attrs map[string]string) (*Topic, error) {
	ctx, cancel := c.callContext(ctx, 0)
	defer cancel()
	req := &heraldv1.CreateTopicRequest{Name: name, Attributes: attrs}
	resp, err := c.svc.CreateTopic(ctx, connect.NewRequest(req))
	if err != nil {
		return nil, err
	}
	return topicFromProto(resp.Msg.GetTopic()), nil
}

// GetTopic returns the topic name.
func (c *Client) GetTopic(ctx context.Context, name string) (*Topic, error) {
	ctx, cancel := c.callContext(ctx, 0)
	defer cancel()
	req := &heraldv1.GetTopicRequest{Name: name}
	resp, err := c.svc.GetTopic(ctx, connect.NewRequest(req))
	if err != nil {
		return nil, err
	}
	return topicFromProto(resp.Msg.GetTopic()), nil
}

// ListTopics returns every topic.
func (c *Client) ListTopics(ctx context.Context) ([]*Topic, error) {
	ctx, cancel := c.callContext(ctx, 0)
	defer cancel()
	resp, err := c.svc.ListTopics(ctx, connect.NewRequest(&heraldv1.ListTopicsRequest{}))
	if err != nil {
		return nil, err
	}
	topics := make([]*Topic, 0, len(resp.Msg.GetTopics()))
	for _, t := range resp.Msg.GetTopics() {
		topics = append(topics, topicFromProto(t))
	}
	return topics, nil
}

// SetTopicAttributes changes the attributes in attrs, leaving the others as
// they are, and returns the updated topic. The shard count cannot change.
func (c *Client) SetTopicAttributes(ctx context.Context, name string, attrs map[string]string) (*Topic, error) {
	ctx, cancel := c.callContext(ctx, 0)
	defer cancel()
	req := &heraldv1.SetTopicAttributesRequest{Name: name, Attributes: attrs}
	resp, err := c.svc.SetTopicAttributes(ctx, connect.NewRequest(req))
	if err != nil {
		return nil, err
	}
	return topicFromProto(resp.Msg.GetTopic()), nil
}

// DeleteTopic removes the topic name, all its shards and their events.
func (c *Client) DeleteTopic(ctx context.Context, name string) error {
	ctx, cancel := c.callContext(ctx, 0)
	defer cancel()
	_, err := c.svc.DeleteTopic(ctx, connect.NewRequest(&heraldv1.DeleteTopicRequest{Name: name}))
	return err
}

// TopicStats returns the counters of the topic name, summed over its shards
// and per shard.
func (c *Client) TopicStats(ctx context.Context, name string) (*TopicStats, error) {
	ctx, cancel := c.callContext(ctx, 0)
	defer cancel()
	resp, err := c.svc.TopicStats(ctx, connect.NewRequest(&heraldv1.TopicStatsRequest{Name: name}))
	if err != nil {
		return nil, err
	}
	stats := &TopicStats{
		Name:   resp.Msg.GetName(),
		Total:  shardStatsFromProto(resp.Msg.GetTotal()),
		Shards: make([]ShardStats, 0, len(resp.Msg.GetShards())),
	}
	for _, s := range resp.Msg.GetShards() {
		stats.Shards = append(stats.Shards, shardStatsFromProto(s))
	}
	return stats, nil
}
