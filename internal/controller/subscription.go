package controller

import (
	"cmp"
	"fmt"
	"slices"

	"herald/internal/topic"
)

// The subscription operations. Each names topic Name and subscription
// Subscription; topic.DefaultSubscriptionName names the topic's default
// subscription.
const (
	// OpCreateSubscription creates subscription Subscription with
	// SubscriptionAttributes; for the default subscription, which has no
	// attributes of its own, it attaches it again after a delete.
	OpCreateSubscription = "create-subscription"
	// OpSetSubscription applies Changes to the subscription's attributes.
	OpSetSubscription = "set-subscription"
	// OpDeleteSubscription deletes the subscription; the default one is
	// detached, so that the topic's events go to its other subscriptions
	// only.
	OpDeleteSubscription = "delete-subscription"
	// OpEnableSubscription and OpDisableSubscription start and stop the
	// subscription's delivery; a disable records Reason.
	OpEnableSubscription  = "enable-subscription"
	OpDisableSubscription = "disable-subscription"
)

// MaxSubscriptions is how many subscriptions a topic may have besides its
// default one: each reads the whole topic, so each adds the work of
// another consumer to every shard.
const MaxSubscriptions = 100

// MaxReasonLen is the longest reason a disable may record, in bytes.
const MaxReasonLen = 1024

// A Subscription is a subscription as the controller records it, or as
// Topic.SubscriptionList derives the default one.
type Subscription struct {
	// ID identifies the subscription in the shards' commands. The default
	// subscription's is 0; the others get theirs from a counter of the
	// State that is never reused, not even after their topic is deleted,
	// so that a shard's state for a deleted subscription can never be
	// taken for a newer one's.
	ID         uint64                       `json:"id"`
	Name       string                       `json:"name"`
	Topic      string                       `json:"topic"`
	Attributes topic.SubscriptionAttributes `json:"attributes"`
	// Disabled means the subscription delivers nothing until enabled;
	// DisabledReason says why (an operator's words, or the delivery's last
	// error), DisabledAt when, in Unix nanoseconds.
	Disabled       bool   `json:"disabled,omitempty"`
	DisabledReason string `json:"disabled_reason,omitempty"`
	DisabledAt     int64  `json:"disabled_at,omitempty"`
	CreatedAt      int64  `json:"created_at"` // Unix nanoseconds, from the command
	UpdatedAt      int64  `json:"updated_at"` // Unix nanoseconds, from the command
}

// IsDefault reports whether sub is its topic's default subscription.
func (sub *Subscription) IsDefault() bool { return sub.ID == 0 }

func (sub *Subscription) clone() Subscription {
	c := *sub
	c.Attributes = sub.Attributes.Clone()
	return c
}

// DefaultSubscription is what the controller records of a topic's default
// subscription, whose settings are the topic's attributes. Its zero value
// is the subscription as a new topic has it: attached and enabled.
type DefaultSubscription struct {
	// Detached means the default subscription was deleted: the topic's
	// push_endpoint (or pull) no longer receives its events.
	Detached bool `json:"detached,omitempty"`
	// Disabled, DisabledReason and DisabledAt: see Subscription.
	Disabled       bool   `json:"disabled,omitempty"`
	DisabledReason string `json:"disabled_reason,omitempty"`
	DisabledAt     int64  `json:"disabled_at,omitempty"`
	// AttachedAt is when it was last attached again, in Unix nanoseconds;
	// 0 means it has been attached since the topic was created.
	AttachedAt int64 `json:"attached_at,omitempty"`
	// UpdatedAt is when it was last detached, attached, enabled or
	// disabled; 0 means never.
	UpdatedAt int64 `json:"updated_at,omitempty"`
}

// SubscriptionList returns the topic's subscriptions: the default one
// first, unless detached, then the others by name.
func (t *Topic) SubscriptionList() []Subscription {
	out := make([]Subscription, 0, len(t.Subscriptions)+1)
	if !t.Default.Detached {
		out = append(out, t.defaultSubscription())
	}
	for i := range t.Subscriptions {
		out = append(out, t.Subscriptions[i].clone())
	}
	return out
}

// Subscription returns the topic's subscription called name; the default
// one unless detached.
func (t *Topic) Subscription(name string) (Subscription, bool) {
	if name == topic.DefaultSubscriptionName {
		return t.defaultSubscription(), !t.Default.Detached
	}
	if i, ok := t.findSubscription(name); ok {
		return t.Subscriptions[i].clone(), true
	}
	return Subscription{}, false
}

// SubscriptionByID returns the topic's subscription with the given id;
// id 0 is the default one, unless detached.
func (t *Topic) SubscriptionByID(id uint64) (Subscription, bool) {
	if id == 0 {
		return t.defaultSubscription(), !t.Default.Detached
	}
	for i := range t.Subscriptions {
		if t.Subscriptions[i].ID == id {
			return t.Subscriptions[i].clone(), true
		}
	}
	return Subscription{}, false
}

// defaultSubscription derives the default subscription from the topic.
func (t *Topic) defaultSubscription() Subscription {
	d := &t.Default
	sub := Subscription{
		Name:           topic.DefaultSubscriptionName,
		Topic:          t.Name,
		Attributes:     t.Attributes.DefaultSubscription(),
		Disabled:       d.Disabled,
		DisabledReason: d.DisabledReason,
		DisabledAt:     d.DisabledAt,
		CreatedAt:      t.CreatedAt,
		UpdatedAt:      max(t.UpdatedAt, d.UpdatedAt),
	}
	if d.AttachedAt != 0 {
		sub.CreatedAt = d.AttachedAt
	}
	return sub
}

// findSubscription returns the index in t.Subscriptions, sorted by name,
// where name is or would be.
func (t *Topic) findSubscription(name string) (int, bool) {
	return slices.BinarySearchFunc(t.Subscriptions, name, func(s Subscription, name string) int {
		return cmp.Compare(s.Name, name)
	})
}

// LastSubscription returns the id the last created subscription got, of
// any topic, or 0 if none was ever created. A subscription with an id up
// to it that the state does not hold was deleted: ids are never reused.
func (s *State) LastSubscription() uint64 { return s.lastSubscription }

// Subscriptions returns the subscriptions of the named topic, as
// Topic.SubscriptionList does.
func (s *State) Subscriptions(topicName string) ([]Subscription, error) {
	t, ok := s.topics[topicName]
	if !ok {
		return nil, NotFoundError(topicName)
	}
	return t.SubscriptionList(), nil
}

// Subscription returns the named subscription of the named topic.
func (s *State) Subscription(topicName, name string) (Subscription, error) {
	t, ok := s.topics[topicName]
	if !ok {
		return Subscription{}, NotFoundError(topicName)
	}
	sub, ok := t.Subscription(name)
	if !ok {
		return Subscription{}, SubscriptionNotFoundError(topicName, name)
	}
	return sub, nil
}

// SubscriptionByID returns the subscription of the named topic with the
// given id.
func (s *State) SubscriptionByID(topicName string, id uint64) (Subscription, error) {
	t, ok := s.topics[topicName]
	if !ok {
		return Subscription{}, NotFoundError(topicName)
	}
	sub, ok := t.SubscriptionByID(id)
	if !ok {
		return Subscription{}, subscriptionIDNotFound(topicName, id)
	}
	return sub, nil
}

// applySubscription applies a subscription op to topic c.Name, whose
// names Apply has checked.
func (s *State) applySubscription(c *Command) Result {
	t, ok := s.topics[c.Name]
	if !ok {
		return Result{Err: NotFoundError(c.Name)}
	}
	if c.Subscription == topic.DefaultSubscriptionName {
		return s.applyDefault(t, c)
	}
	if c.Op == OpCreateSubscription {
		return s.createSubscription(t, c)
	}
	i, ok := t.findSubscription(c.Subscription)
	if !ok {
		return Result{Err: SubscriptionNotFoundError(t.Name, c.Subscription)}
	}
	sub := &t.Subscriptions[i]
	switch c.Op {
	case OpSetSubscription:
		attrs, err := sub.Attributes.Update(c.Changes)
		if err != nil {
			return Result{Err: err}
		}
		sub.Attributes = attrs
	case OpDeleteSubscription:
		gone := *sub // no longer referenced by s once deleted
		t.Subscriptions = slices.Delete(t.Subscriptions, i, i+1)
		return Result{Topic: t.clone(), Subscription: gone}
	default: // OpEnableSubscription, OpDisableSubscription
		sub.Disabled, sub.DisabledReason, sub.DisabledAt = disable(c, sub.Disabled, sub.DisabledReason, sub.DisabledAt)
	}
	sub.UpdatedAt = c.Time
	return Result{Topic: t.clone(), Subscription: sub.clone()}
}

func (s *State) createSubscription(t *Topic, c *Command) Result {
	i, ok := t.findSubscription(c.Subscription)
	if ok {
		return Result{Err: subscriptionExists(t.Name, c.Subscription)}
	}
	if len(t.Subscriptions) >= MaxSubscriptions {
		return Result{Err: tooManySubscriptions(t.Name)}
	}
	attrs := c.SubscriptionAttributes.Clone()
	if err := attrs.Validate(); err != nil {
		return Result{Err: err}
	}
	s.lastSubscription++
	sub := Subscription{
		ID:         s.lastSubscription,
		Name:       c.Subscription,
		Topic:      t.Name,
		Attributes: attrs,
		CreatedAt:  c.Time,
		UpdatedAt:  c.Time,
	}
	t.Subscriptions = slices.Insert(t.Subscriptions, i, sub)
	return Result{Topic: t.clone(), Subscription: sub.clone()}
}

// applyDefault applies a subscription op to t's default subscription.
func (s *State) applyDefault(t *Topic, c *Command) Result {
	d := &t.Default
	switch {
	case c.Op == OpCreateSubscription && !d.Detached:
		return Result{Err: subscriptionExists(t.Name, c.Subscription)}
	case c.Op == OpCreateSubscription:
		t.Default = DefaultSubscription{AttachedAt: c.Time} // attached afresh, enabled
	case d.Detached:
		return Result{Err: SubscriptionNotFoundError(t.Name, c.Subscription)}
	case c.Op == OpSetSubscription:
		return Result{Err: defaultHasTopicAttributes(t.Name)}
	case c.Op == OpDeleteSubscription:
		gone := t.defaultSubscription()
		t.Default = DefaultSubscription{Detached: true, UpdatedAt: c.Time}
		return Result{Topic: t.clone(), Subscription: gone}
	default: // OpEnableSubscription, OpDisableSubscription
		d.Disabled, d.DisabledReason, d.DisabledAt = disable(c, d.Disabled, d.DisabledReason, d.DisabledAt)
	}
	t.Default.UpdatedAt = c.Time
	return Result{Topic: t.clone(), Subscription: t.defaultSubscription()}
}

// disable returns a subscription's disabled state after c, an enable or a
// disable. Disabling a disabled subscription keeps when and why it was
// first disabled: that is when its delivery stopped.
func disable(c *Command, disabled bool, reason string, at int64) (bool, string, int64) {
	switch {
	case c.Op == OpEnableSubscription:
		return false, "", 0
	case disabled:
		return disabled, reason, at
	}
	return true, c.Reason, c.Time
}

// checkSubscriptions verifies what applySubscription maintains: each
// topic's subscriptions sorted by name and named validly, none named as the
// default one, and ids unique, from 1 up to LastSubscription.
func (snap *snapshot) checkSubscriptions() error {
	ids := make(map[uint64]bool)
	for _, t := range snap.Topics {
		for i, sub := range t.Subscriptions {
			if err := topic.ValidateSubscriptionName(sub.Name); err != nil {
				return fmt.Errorf("topic %q: %w", t.Name, err)
			}
			if sub.Name == topic.DefaultSubscriptionName || sub.Topic != t.Name {
				return fmt.Errorf("topic %q records subscription %q of topic %q", t.Name, sub.Name, sub.Topic)
			}
			if i > 0 && t.Subscriptions[i-1].Name >= sub.Name {
				return fmt.Errorf("subscriptions %q and %q of topic %q are not sorted and unique", t.Subscriptions[i-1].Name, sub.Name, t.Name)
			}
			if sub.ID == 0 || sub.ID > snap.LastSubscription || ids[sub.ID] {
				return fmt.Errorf("subscription %q of topic %q has id %d, which is 0, taken or after the last id given, %d", sub.Name, t.Name, sub.ID, snap.LastSubscription)
			}
			ids[sub.ID] = true
		}
	}
	return nil
}
