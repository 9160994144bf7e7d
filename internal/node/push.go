package node

import (
	"context"
	"fmt"
	"time"

	"herald/internal/controller"
	"herald/internal/endpoint"
	"herald/internal/push"
	"herald/internal/shard"
	"herald/internal/topic"
)

// pushSource is the node as its push supervisor sees it.
type pushSource struct{ n *Node }

func (ps pushSource) PushTopics() []push.Topic {
	n := ps.n
	n.reg.mu.RLock()
	defer n.reg.mu.RUnlock()
	var out []push.Topic
	for name, tr := range n.reg.topics {
		subs := pushSubscriptions(&tr.info)
		if len(subs) == 0 {
			continue
		}
		t := push.Topic{Name: name, FirstGroup: tr.info.FirstGroup, Subscriptions: subs}
		for _, s := range tr.shards {
			t.Shards = append(t.Shards, shardLog{n, s})
		}
		out = append(out, t)
	}
	return out
}

// pushSubscriptions returns the push subscriptions of a topic: those with
// a push endpoint, the default one's being the topic's own.
func pushSubscriptions(t *controller.Topic) []push.Subscription {
	var out []push.Subscription
	for _, sub := range t.SubscriptionList() {
		a := sub.Attributes.DeliveryAttributes(t.Attributes)
		if a.PushEndpoint == "" {
			continue // a pull subscription
		}
		out = append(out, push.Subscription{ID: sub.ID, Name: sub.Name, Attributes: a,
			Settings: sub.Attributes, Disabled: sub.Disabled, KeepEnabled: sub.ID == 0})
	}
	return out
}

func (ps pushSource) ShardOfGroup(group uint64) (string, push.Shard, bool) {
	n := ps.n
	s, ok := n.reg.shard(group)
	if !ok {
		return "", nil, false
	}
	return s.topic, shardLog{n, s}, true
}

// deliveryHealth returns the health of the shard's dispatcher, if this
// node runs one: it leads the shard, of a topic with a push endpoint.
func (n *Node) deliveryHealth(s *shardRuntime) (DeliveryHealth, bool) {
	h, ok := n.push.Health(s.topic, s.group-uint64(s.index), s.index)
	return DeliveryHealth(h), ok
}

// pushNow delivers events of a non-persistent topic synchronously: each
// goes to the endpoint and nothing is stored. Events are sent one at a
// time, in request order.
func (n *Node) pushNow(ctx context.Context, tr *topicRuntime, events []shard.Event) ([]string, error) {
	ep, scheme, ok := n.push.Endpoint(tr.info.Name)
	if !ok {
		return nil, fmt.Errorf("%w: the push endpoint of topic %q is not open (see the server log); nothing was stored", ErrUnavailable, tr.info.Name)
	}
	if n.bootEpoch == 0 {
		return nil, fmt.Errorf("%w: this node started on a full disk and could not store its boot epoch (%s in %s), without which non-persistent event ids could repeat; free space on the disk and restart the node",
			ErrUnavailable, bootEpochFile, n.cfg.DataDir)
	}
	ids := make([]string, len(events))
	now := time.Now()
	for i, e := range events {
		s := tr.shardFor(e.Key)
		ids[i] = topic.NonPersistentEventID(tr.info.Name, s.index, n.bootEpoch, n.nonPersistentSeq.Add(1))
		m := &endpoint.Message{ID: ids[i], Topic: tr.info.Name, Shard: s.index, Key: e.Key, Time: now,
			Headers: e.HeaderMap(), Payload: e.Payload, OpaqueData: tr.info.Attributes.OpaqueData, Attempt: 1}
		if err := ep.Send(ctx, m); err != nil {
			what := ErrUnavailable
			if endpoint.IsPermanent(err) {
				what = ErrEndpointRejected
			}
			return nil, fmt.Errorf("%w: push of event %d of %d to %s failed: %v; topic %q is non-persistent, so nothing was stored (events before it were delivered)",
				what, i+1, len(events), scheme, err, tr.info.Name)
		}
	}
	return ids, nil
}

// redactURL is topic.RedactEndpoint, the one redaction of endpoint URIs,
// under the name consume.go still calls it by.
func redactURL(s string) string { return topic.RedactEndpoint(s) }
