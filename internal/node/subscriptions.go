package node

import (
	"context"
	"fmt"
	"time"

	"herald/internal/alert"
	"herald/internal/controller"
	"herald/internal/shard"
	"herald/internal/topic"
)

// Subscription is a subscription of a topic as the node's callers see it.
// The topic's default subscription is named topic.DefaultSubscriptionName
// and has id 0; its settings are the topic's attributes.
type Subscription struct {
	Topic string
	Name  string
	// ID identifies the subscription in its topic's shards; ids are never
	// reused.
	ID uint64
	// Attributes holds every attribute as a string, defaults included,
	// with secrets redacted as a topic's are.
	Attributes     map[string]string
	Disabled       bool
	DisabledReason string
	DisabledAt     time.Time // zero unless Disabled
	CreatedAt      time.Time
	UpdatedAt      time.Time
}

func subscriptionOf(s controller.Subscription) Subscription {
	out := Subscription{
		Topic:          s.Topic,
		Name:           s.Name,
		ID:             s.ID,
		Attributes:     s.Attributes.Map(),
		Disabled:       s.Disabled,
		DisabledReason: s.DisabledReason,
		CreatedAt:      time.Unix(0, s.CreatedAt),
		UpdatedAt:      time.Unix(0, s.UpdatedAt),
	}
	if s.Disabled {
		out.DisabledAt = time.Unix(0, s.DisabledAt)
	}
	return out
}

// CreateSubscription creates subscription name of topicName with attrs
// applied over the defaults. Creating the default subscription, which
// takes no attributes, attaches it again after DeleteSubscription
// detached it.
func (n *Node) CreateSubscription(ctx context.Context, topicName, name string, attrs map[string]string) (_ Subscription, err error) {
	defer classify(&err)

	if _, err := n.reg.lookup(topicName); err != nil {
		return Subscription{}, err
	}
	if err := topic.ValidateSubscriptionName(name); err != nil {
		return Subscription{}, err
	}
	cmd := controller.Command{Op: controller.OpCreateSubscription, Name: topicName, Subscription: name, Time: time.Now().UnixNano()}
	if name != topic.DefaultSubscriptionName || len(attrs) > 0 {
		a, err := topic.NewSubscriptionAttributes(attrs)
		if err != nil {
			return Subscription{}, err
		}
		// Where the endpoint points is checked here, not in the
		// controller, whose state machine does no I/O.
		if err := n.guard.Check(ctx, a.Delivery); err != nil {
			return Subscription{}, err
		}
		cmd.SubscriptionAttributes = &a
	}
	sub, err := n.proposeSubscription(ctx, cmd)
	if err != nil {
		return Subscription{}, err
	}
	// Start its cursor on every shard now, so that every event published
	// after this returns is the subscription's; a shard that cannot take
	// it now gets it from cursorSync as soon as it has a leader.
	var from uint64 = shard.FromNow
	if sub.ID != 0 && sub.Attributes["start"] == topic.StartEarliest {
		from = 0
	}
	n.toShards(ctx, topicName, shard.Command{Op: shard.OpSubscribe, Subscription: sub.ID, From: from})
	return sub, nil
}

// toShards proposes a subscription's cursor change to every shard of a
// topic, logging those that did not take it: cursorSync finishes them.
func (n *Node) toShards(ctx context.Context, topicName string, cmd shard.Command) {
	tr, err := n.reg.lookup(topicName)
	if err != nil {
		return // deleted meanwhile: nothing to do
	}
	if failed := n.proposeToShards(ctx, tr, cmd); len(failed) > 0 {
		n.log.Warn("some shards did not take the subscription change yet; it reaches them when they have a leader",
			"topic", topicName, "op", cmd.Op, "subscription", cmd.Subscription, "shards", failed)
	}
}

// SetSubscriptionAttributes changes attributes of a subscription; its
// start cannot change. The default subscription's settings are its
// topic's: SetTopicAttributes changes them.
func (n *Node) SetSubscriptionAttributes(ctx context.Context, topicName, name string, attrs map[string]string) (_ Subscription, err error) {
	defer classify(&err)

	sub, err := n.subscription(topicName, name)
	if err != nil {
		return Subscription{}, err
	}
	if len(attrs) == 0 {
		return Subscription{}, fmt.Errorf("%w: no attribute to change for subscription %q of topic %q; give at least one (herald subscription set %s %s --attr key=value)", errInvalidRequest, name, topicName, topicName, name)
	}
	if !sub.IsDefault() {
		// Validated here for a prompt error; the controller validates again.
		a, err := sub.Attributes.Update(attrs)
		if err != nil {
			return Subscription{}, err
		}
		if err := n.guard.Check(ctx, a.Delivery); err != nil {
			return Subscription{}, err
		}
	}
	return n.proposeSubscription(ctx, controller.Command{Op: controller.OpSetSubscription, Name: topicName, Subscription: name,
		Changes: attrs, Time: time.Now().UnixNano()})
}

// DeleteSubscription deletes a subscription. Deleting the default one
// detaches it: its topic keeps its attributes, and CreateSubscription
// attaches it again.
func (n *Node) DeleteSubscription(ctx context.Context, topicName, name string) (err error) {
	defer classify(&err)

	sub, err := n.subscription(topicName, name)
	if err != nil {
		return err
	}
	if _, err = n.proposeSubscription(ctx, controller.Command{Op: controller.OpDeleteSubscription, Name: topicName, Subscription: name, Time: time.Now().UnixNano()}); err != nil {
		return err
	}
	// Free at once what only it held on the shards.
	n.toShards(ctx, topicName, shard.Command{Op: shard.OpUnsubscribe, Subscription: sub.ID})
	return nil
}

// EnableSubscription lets a disabled subscription deliver again. Enabling
// an enabled one changes nothing.
func (n *Node) EnableSubscription(ctx context.Context, topicName, name string) (_ Subscription, err error) {
	defer classify(&err)

	was, err := n.subscription(topicName, name)
	if err != nil {
		return Subscription{}, err
	}
	sub, err := n.proposeSubscription(ctx, controller.Command{Op: controller.OpEnableSubscription, Name: topicName, Subscription: name, Time: time.Now().UnixNano()})
	if err == nil && was.Disabled {
		n.alert(alert.SubscriptionEnabled, topicName, name, "enabled again: its backlog is delivered in order")
	}
	return sub, err
}

// DisableSubscription stops a subscription's delivery until it is
// enabled, recording why. Disabling a disabled one keeps the first reason
// and time.
func (n *Node) DisableSubscription(ctx context.Context, topicName, name, reason string) (_ Subscription, err error) {
	defer classify(&err)

	if _, err := n.subscription(topicName, name); err != nil {
		return Subscription{}, err
	}
	return n.proposeSubscription(ctx, controller.Command{Op: controller.OpDisableSubscription, Name: topicName, Subscription: name,
		Reason: reason, Time: time.Now().UnixNano()})
}

// GetSubscription returns a subscription of a topic.
func (n *Node) GetSubscription(ctx context.Context, topicName, name string) (_ Subscription, err error) {
	defer classify(&err)

	sub, err := n.subscription(topicName, name)
	if err != nil {
		return Subscription{}, err
	}
	return subscriptionOf(sub), nil
}

// ListSubscriptions returns a topic's subscriptions: the default one
// first, unless it is detached, then the others by name.
func (n *Node) ListSubscriptions(ctx context.Context, topicName string) (_ []Subscription, err error) {
	defer classify(&err)

	tr, err := n.reg.lookup(topicName)
	if err != nil {
		return nil, err
	}
	subs := tr.info.SubscriptionList()
	out := make([]Subscription, len(subs))
	for i, s := range subs {
		out[i] = subscriptionOf(s)
	}
	return out, nil
}

// subscription looks a subscription up in the topics the node knows.
func (n *Node) subscription(topicName, name string) (controller.Subscription, error) {
	tr, err := n.reg.lookup(topicName)
	if err != nil {
		return controller.Subscription{}, err
	}
	return subscriptionOfTopic(tr, name)
}

// subscriptionOfTopic looks a subscription of tr up by name.
func subscriptionOfTopic(tr *topicRuntime, name string) (controller.Subscription, error) {
	if err := topic.ValidateSubscriptionName(name); err != nil {
		return controller.Subscription{}, err
	}
	sub, ok := tr.info.Subscription(name)
	if !ok {
		return controller.Subscription{}, controller.SubscriptionNotFoundError(tr.info.Name, name)
	}
	return sub, nil
}

// proposeSubscription replicates a subscription op, as proposeController
// does a topic op, and returns the subscription as the op left it.
func (n *Node) proposeSubscription(ctx context.Context, cmd controller.Command) (Subscription, error) {
	res, err := n.proposeControllerResult(ctx, cmd)
	if err != nil {
		return Subscription{}, err
	}
	return subscriptionOf(res.Subscription), nil
}
