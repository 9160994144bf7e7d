// Package topic defines what a herald topic is, independently of where it is
// stored: the rules for topic names, the topic's attributes with their
// defaults, parsing and validation, and the naming and routing of its shards
// and of the events and reservations inside them.
//
// It is also the one home of RedactEndpoint, how a push endpoint URI is
// shown: this package imports nothing else of herald's but the pure
// package filter, and every package that handles push endpoints (the
// endpoints, delivery, node, api) already imports it for the attributes. For the same reason it holds the one
// table of push endpoint schemes (Schemes): validation here needs it, and
// package delivery opens an endpoint by it.
//
// A subscription's settings (SubscriptionAttributes) are defined here too:
// they reuse the delivery attributes of a topic, with the same parsing,
// validation and redaction, and check their filter policy with package
// filter, which is pure and imports nothing of herald's either.
//
// Everything here is pure and deterministic, because the controller's
// replicated state machine runs the same validation on every replica and the
// results must agree.
//
// Every error caused by bad input wraps ErrInvalid, so callers can map it to
// an "invalid argument" status with errors.Is, and every message says both
// what was wrong and what to do about it.
package topic
