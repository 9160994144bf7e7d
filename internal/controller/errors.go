package controller

import (
	"errors"
	"fmt"
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
