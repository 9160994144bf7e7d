package node

import "herald/internal/endpoint"

// PushGuard returns the guard that every connection to a push endpoint
// goes through, for callers that reach an endpoint themselves: the
// SNS-compatible API sends an HTTP endpoint its SubscriptionConfirmation,
// and must reach no more than deliveries may.
func (n *Node) PushGuard() *endpoint.Guard { return n.guard }
