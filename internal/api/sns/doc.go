// Package sns serves herald's topics through the SNS-compatible topic API
// that Ceph's RADOS Gateway offers, so that the unmodified aws CLI and
// boto3 can administer topics and publish:
//
//	aws --endpoint-url http://127.0.0.1:7600 sns create-topic --name=fishtopic \
//	  --attributes='{"push-endpoint": "kafka://localhost", "persistent": "true"}'
//
// Requests are form-encoded POSTs whose Action parameter names the
// operation: CreateTopic, GetTopicAttributes, SetTopicAttributes,
// ListTopics, DeleteTopic, GetTopic, Publish and PublishBatch for topics;
// Subscribe, ConfirmSubscription, Unsubscribe, ListSubscriptions,
// ListSubscriptionsByTopic, GetSubscriptionAttributes and
// SetSubscriptionAttributes for their subscriptions. Responses are XML in
// the SNS namespace with a RequestId; errors are SNS error documents
// (InvalidParameter, NotFound, ...) with a matching HTTP status. Topics
// are named by ARNs of the form arn:aws:sns:<zonegroup>::<topic>, the
// zonegroup being configured (Config.Zonegroup), and subscriptions by
// their topic's ARN, ':' and their name.
//
// Subscribe makes a herald subscription whose events are delivered in
// SNS's format (message_format sns, see package envelope). An HTTP
// endpoint must confirm it first, as SNS's must: see confirm.go.
//
// Scopes, for the token check that wraps the handler: CreateTopic,
// SetTopicAttributes, DeleteTopic, Subscribe, SetSubscriptionAttributes
// and Unsubscribe administer (admin scope); Publish and PublishBatch
// publish (publish scope); the List and Get actions only read; and
// ConfirmSubscription needs no token, its confirmation token being its
// credential. So that an endpoint's receiver can confirm by visiting the
// SubscribeURL, the handler also serves GET requests with
// Action=ConfirmSubscription (IsConfirmation), from any address.
//
// Credentials: the aws CLI and boto3 sign every request with AWS
// Signature Version 4. herald keeps no AWS secret keys, so this handler
// verifies no signature. With herald's tokens the access key id is the
// token, and the token check in front of this handler (package api)
// decides; without tokens (Config.AllowRemote false) any signature is
// accepted, but only from a loopback address.
package sns
