package controller

import (
	"errors"
	"fmt"

	"herald/internal/topic"
)

// Errors reported in Result.Err, wrapped with the topic's name and advice.
// Test for them with errors.Is. Malformed commands and attributes are
// reported with errors wrapping topic.ErrInvalid instead.
var (
	ErrTopicExists   = errors.New("topic already exists")
	ErrTopicNotFound = errors.New("topic does not exist")
	ErrShardsFixed   = errors.New("the shard count of a topic is fixed at creation")
	ErrNodeNotFound  = errors.New("node is not a member of the cluster")
	ErrNodeExists    = errors.New("node is already a member of the cluster")
	// ErrMembership means a membership change is valid but the cluster
	// cannot make it now (it would leave a shard without enough nodes,
	// or a node still holds replicas).
	ErrMembership = errors.New("the membership change cannot be made now")

	ErrSubscriptionExists   = errors.New("subscription already exists")
	ErrSubscriptionNotFound = errors.New("subscription does not exist")
	// ErrSubscriptionLimit means the topic has MaxSubscriptions
	// subscriptions already.
	ErrSubscriptionLimit = errors.New("the topic has as many subscriptions as it may")
	// ErrDefaultSubscription means an op the default subscription does
	// not take: its settings are its topic's attributes.
	ErrDefaultSubscription = errors.New("the default subscription's settings are its topic's")

	// ErrTierObjectConflict means an object is recorded in the tiering
	// manifest already, with other runs than a new record gives it.
	ErrTierObjectConflict = errors.New("tiered object is recorded with other runs")

	// ErrInvalidSnapshot is returned by Restore for data that is not a
	// snapshot written by Snapshot.
	ErrInvalidSnapshot = errors.New("invalid controller snapshot")
)

// detailError gives a sentinel error a complete message of its own,
// rather than the sentinel's text with detail appended.
type detailError struct {
	sentinel error
	msg      string
}

func (e *detailError) Error() string { return e.msg }
func (e *detailError) Unwrap() error { return e.sentinel }

func topicExists(name string) error {
	return &detailError{ErrTopicExists, fmt.Sprintf("topic %q already exists; change its attributes with herald topic set (SetTopicAttributes), or delete it first", name)}
}

// NotFoundError is ErrTopicNotFound for the named topic, with advice.
func NotFoundError(name string) error {
	return &detailError{ErrTopicNotFound, fmt.Sprintf("topic %q does not exist; create it first (herald topic create %s)", name, name)}
}

func shardsFixed(name string, shards int) error {
	return &detailError{ErrShardsFixed, fmt.Sprintf("the shard count of topic %q is fixed at creation (%d); delete and recreate the topic to change it", name, shards)}
}

func nodeNotFound(id uint64) error {
	return &detailError{ErrNodeNotFound, fmt.Sprintf("node %d is not a member of the cluster; herald cluster status lists the members", id)}
}

func nodeExists(m Member) error {
	state := "at " + m.Address
	if m.Address == "" {
		state = "since the cluster started"
	}
	if m.Draining {
		state += ", and is being drained"
	}
	return &detailError{ErrNodeExists, fmt.Sprintf("node %d is already a member (%s); a node id is used once: give the new node another id", m.ID, state)}
}

func subscriptionExists(topicName, name string) error {
	if name == topic.DefaultSubscriptionName {
		return &detailError{ErrSubscriptionExists, fmt.Sprintf("the default subscription of topic %q is attached already; change its settings with herald topic set %s", topicName, topicName)}
	}
	return &detailError{ErrSubscriptionExists, fmt.Sprintf("subscription %q of topic %q already exists; change its attributes with herald subscription set (SetSubscriptionAttributes), or delete it first", name, topicName)}
}

// SubscriptionNotFoundError is ErrSubscriptionNotFound for the named
// subscription of the named topic, with advice.
func SubscriptionNotFoundError(topicName, name string) error {
	if name == topic.DefaultSubscriptionName {
		return &detailError{ErrSubscriptionNotFound, fmt.Sprintf("the default subscription of topic %q is detached; attach it again with herald subscription create %s %s", topicName, topicName, name)}
	}
	return &detailError{ErrSubscriptionNotFound, fmt.Sprintf("subscription %q of topic %q does not exist; herald subscription list %s lists them, and herald subscription create %s %s creates it", name, topicName, topicName, topicName, name)}
}

func subscriptionIDNotFound(topicName string, id uint64) error {
	return &detailError{ErrSubscriptionNotFound, fmt.Sprintf("topic %q has no subscription with id %d; herald subscription list %s lists them", topicName, id, topicName)}
}

func tooManySubscriptions(topicName string) error {
	return &detailError{ErrSubscriptionLimit, fmt.Sprintf("topic %q has %d subscriptions besides its default one, the most a topic may have; delete one first (herald subscription delete %s NAME)", topicName, MaxSubscriptions, topicName)}
}

func defaultHasTopicAttributes(topicName string) error {
	return &detailError{ErrDefaultSubscription, fmt.Sprintf("the default subscription of topic %q delivers with the topic's own attributes; change them with herald topic set %s (SetTopicAttributes), or detach it and create a named subscription", topicName, topicName)}
}

func tierObjectConflict(name string) error {
	return &detailError{ErrTierObjectConflict, fmt.Sprintf("object %s is recorded in the tiering manifest already, with other runs; an object name is used once: upload the entries under a new name", quoteObject(name))}
}
