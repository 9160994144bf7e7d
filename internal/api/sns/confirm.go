package sns

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"time"

	"herald/internal/endpoint"
	"herald/internal/endpoint/webhook"
	"herald/internal/envelope"
	"herald/internal/node"
	"herald/internal/topic"
)

// The confirmation handshake. SNS does not deliver to an HTTP endpoint
// until the endpoint has shown that it wants the topic's notifications: it
// POSTs the endpoint a SubscriptionConfirmation with a token, and the
// subscription is pending until ConfirmSubscription is called with that
// token (or the SubscribeURL visited). Otherwise whoever may subscribe
// could point a topic at any URL, and herald at a victim.
//
// herald does the same. Subscribe creates the subscription and disables
// it at once, with a reason that marks it pending and holds the SHA-256
// digest of a random token; then it POSTs the confirmation, through the
// node's push endpoint guard, and if that fails deletes the subscription
// and says why. ConfirmSubscription hashes the token it is given and
// enables the subscription if the digests match. The digest is in the
// subscription's replicated state, so any node of a cluster checks it; the
// token itself is kept nowhere but in the confirmation sent, so reading
// the subscription does not confirm it.
//
// Between the creation and the disabling, two replicated changes in a
// row, the subscription is enabled for a moment: an event published then
// may reach the endpoint before its confirmation.

// pendingReason starts the disabled reason of a subscription waiting for
// its confirmation; digestMark precedes the digest of its token, which
// ends the reason.
const (
	pendingReason = "pending confirmation: herald sent the endpoint a SubscriptionConfirmation; ConfirmSubscription with its Token, or a visit to its SubscribeURL, starts delivery"
	digestMark    = " (token digest sha256:"
)

// actionConfirm is the Action that confirms a subscription.
const actionConfirm = "ConfirmSubscription"

// pending reports whether a subscription waits for its confirmation.
func pending(sub node.Subscription) bool {
	_, ok := pendingDigest(sub)
	return ok
}

// pendingDigest returns the token digest of a subscription waiting for its
// confirmation, and whether it is one.
func pendingDigest(sub node.Subscription) (string, bool) {
	rest, ok := strings.CutPrefix(sub.DisabledReason, pendingReason+digestMark)
	if !sub.Disabled || !ok {
		return "", false
	}
	return strings.CutSuffix(rest, ")")
}

// tokenDigest returns the digest of a token, as a pending subscription's
// reason holds it.
func tokenDigest(token string) string {
	sum := sha256.Sum256([]byte(token))
	return hex.EncodeToString(sum[:])
}

// newToken returns a confirmation token for the subscription name: the
// name, so that ConfirmSubscription finds the subscription, '.', and 32
// random bytes in hex, so that no one guesses it.
func newToken(name string) string {
	var b [32]byte
	rand.Read(b[:]) // never fails
	return name + "." + hex.EncodeToString(b[:])
}

// requestConfirmation makes a new subscription pending and sends its
// endpoint the SubscriptionConfirmation. If it cannot be sent, the
// subscription is deleted: nothing could ever confirm it.
func (h *Handler) requestConfirmation(ctx context.Context, r *request, sub node.Subscription, attrs map[string]string) (node.Subscription, error) {
	token := newToken(sub.Name)
	pend, err := h.node.DisableSubscription(ctx, sub.Topic, sub.Name, pendingReason+digestMark+tokenDigest(token)+")")
	if err != nil {
		return node.Subscription{}, h.undo(sub, withContext(nodeError(err), "make the subscription pending confirmation: ", ""))
	}
	if err := h.sendConfirmation(ctx, r, sub, attrs, token); err != nil {
		return node.Subscription{}, h.undo(sub, &apiError{code: codeInvalidParameter,
			msg: fmt.Sprintf("Unreachable Endpoint: herald could not send the SubscriptionConfirmation: %v; the endpoint must accept it with a 2xx response, so nothing was subscribed", err)})
	}
	return pend, nil
}

// undo deletes a subscription that Subscribe could not make pending, and
// returns err, the reason.
func (h *Handler) undo(sub node.Subscription, err error) error {
	// The request's context may be what failed; the deletion must not.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if derr := h.node.DeleteSubscription(ctx, sub.Topic, sub.Name); derr != nil {
		return withContext(err, "", fmt.Sprintf("; and deleting the subscription failed: %v, so Unsubscribe %s", derr, h.arns.subscriptionOf(sub.Topic, sub.Name)))
	}
	return err
}

// withContext returns err, an SNS error (see nodeError), its message
// between prefix and suffix.
func withContext(err error, prefix, suffix string) error {
	ae, ok := err.(*apiError)
	if !ok {
		ae = &apiError{code: codeInternal, msg: err.Error()}
	}
	e := *ae
	e.msg = prefix + e.msg + suffix
	return &e
}

// sendConfirmation POSTs the SubscriptionConfirmation to the endpoint, as
// a delivery to it would be sent: with its headers, TLS settings and
// signature, through the node's guard.
func (h *Handler) sendConfirmation(ctx context.Context, r *request, sub node.Subscription, attrs map[string]string, token string) error {
	a, err := topic.NewSubscriptionAttributes(attrs) // sub's are redacted
	if err != nil {
		return err
	}
	ep, err := webhook.New(sub.Topic, a.Delivery, h.node.PushGuard())
	if err != nil {
		return err
	}
	defer ep.Close()
	topicARN := h.arns.of(sub.Topic)
	id := newRequestID()
	now := time.Now()
	return ep.Send(ctx, &endpoint.Message{
		ID: id, Topic: sub.Topic, Time: now, Attempt: 1,
		Encoded: envelope.SNSConfirmation(envelope.Confirmation{
			MessageID: id, TopicARN: topicARN, Token: token, Time: now,
			SubscribeURL: r.base + "?" + url.Values{"Action": {actionConfirm}, "TopicArn": {topicARN}, "Token": {token}}.Encode(),
		}),
	})
}

type confirmResult struct {
	SubscriptionArn string
}

// confirmSubscription confirms a pending subscription with the token its
// confirmation carried. Confirming a confirmed one again changes nothing.
func (h *Handler) confirmSubscription(ctx context.Context, r *request) (any, error) {
	topicName, err := h.topicName(r, "TopicArn")
	if err != nil {
		return nil, err
	}
	token, err := r.require("Token")
	if err != nil {
		return nil, err
	}
	name, _, ok := strings.Cut(token, ".")
	if !ok || topic.ValidateSubscriptionName(name) != nil {
		return nil, invalidToken()
	}
	if _, err := h.node.GetTopic(topicName); err != nil {
		return nil, nodeError(err)
	}
	sub, err := h.node.GetSubscription(ctx, topicName, name)
	if errors.Is(err, node.ErrNotFound) {
		return nil, invalidToken() // a token herald did not give, or one of a subscription since deleted
	}
	if err != nil {
		return nil, nodeError(err)
	}
	arn := h.arns.subscriptionOf(topicName, name)
	switch {
	case !sub.Disabled && unseenPending(sub):
		return nil, &apiError{code: codeServiceUnavailable, retryAfter: true,
			msg: fmt.Sprintf("this node has not yet learnt that subscription %s waits for its confirmation; retry in a second", arn)}
	case !sub.Disabled:
		return confirmResult{SubscriptionArn: arn}, nil
	case !pending(sub):
		return nil, &apiError{code: codeInvalidParameter,
			msg: fmt.Sprintf("subscription %s is confirmed, but disabled: %s; enable it with herald subscription enable %s %s", arn, sub.DisabledReason, topicName, name)}
	}
	digest, _ := pendingDigest(sub)
	if subtle.ConstantTimeCompare([]byte(digest), []byte(tokenDigest(token))) != 1 {
		return nil, invalidToken()
	}
	if _, err := h.node.EnableSubscription(ctx, topicName, name); err != nil {
		return nil, nodeError(err)
	}
	return confirmResult{SubscriptionArn: arn}, nil
}

// unseenPending reports whether an enabled subscription may be one that
// waits for its confirmation on a node that has not yet applied the
// change that made it wait: an HTTP subscription made by Subscribe and
// changed in no way since its creation. Answering that it is confirmed
// would leave it pending once the change arrives.
func unseenPending(sub node.Subscription) bool {
	scheme, _ := topic.LookupScheme(protocolName(sub.Attributes["push_endpoint"]))
	return sub.Attributes["message_format"] == topic.FormatSNS && scheme.Protocol == topic.ProtocolWebhook &&
		sub.UpdatedAt.Equal(sub.CreatedAt)
}

func invalidToken() error {
	return &apiError{code: codeInvalidParameter,
		msg: "Invalid token: it is not the Token of the SubscriptionConfirmation herald sent last for a subscription of this topic; Subscribe again to have a new one sent"}
}
