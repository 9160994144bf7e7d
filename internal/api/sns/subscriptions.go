package sns

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"net/url"
	"slices"
	"strconv"
	"strings"

	"herald/internal/envelope"
	"herald/internal/node"
	"herald/internal/topic"
)

// The SNS names of a subscription's attributes that herald keeps under
// other names; any other name is herald's own (or Ceph's, see cephNames).
var subscriptionNames = map[string]string{
	"FilterPolicy":       "filter_policy",
	"FilterPolicyScope":  "filter_policy_scope",
	"RawMessageDelivery": "raw_message_delivery",
}

// unsupported are SNS's subscription attributes that herald has no
// equivalent of, with what to use instead.
var unsupported = map[string]string{
	"DeliveryPolicy":      "herald's max_retries, retry_sleep_duration and time_to_live",
	"RedrivePolicy":       "herald's dead-letter queue, which every subscription has",
	"SubscriptionRoleArn": "nothing: herald has no IAM roles",
	"ReplayPolicy":        "herald's start=earliest when subscribing",
}

// subscriptionAttribute translates a subscription attribute's SNS, Ceph or
// herald name to herald's, refusing those an SNS caller may not set.
func subscriptionAttribute(name, value string) (string, string, error) {
	if hname, ok := subscriptionNames[name]; ok {
		return hname, value, nil
	}
	if instead, ok := unsupported[name]; ok {
		return "", "", fmt.Errorf("herald does not support the subscription attribute %s; use %s", name, instead)
	}
	hname, value, err := toHerald(name, value)
	if err != nil {
		return "", "", err
	}
	// As herald reads names: any case, dashes or underscores.
	hname = strings.ToLower(strings.ReplaceAll(strings.TrimSpace(hname), "-", "_"))
	if hname == "push_endpoint" {
		return "", "", fmt.Errorf("attribute %s: a subscription's endpoint is its Endpoint, and cannot change; Unsubscribe and Subscribe again", name)
	}
	return hname, value, nil
}

// subscriptionOf returns the ARN of a subscription: its topic's ARN, ':'
// and its name, so that parseSubscription needs no lookup table to find
// the subscription an ARN names.
func (f arnFormat) subscriptionOf(topicName, name string) string {
	return envelope.SubscriptionARN(f.zonegroup, topicName, name)
}

// parseSubscription returns the topic and name of a SubscriptionArn.
func (f arnFormat) parseSubscription(arn string) (topicName, name string, err error) {
	topicARN, name, ok := strings.Cut(arn, "::")
	if ok {
		var tail string
		if tail, name, ok = strings.Cut(name, ":"); ok {
			topicARN += "::" + tail
		}
	}
	if !ok || name == "" {
		return "", "", &apiError{code: codeInvalidParameter,
			msg: fmt.Sprintf("invalid subscription ARN %q; herald's are arn:aws:sns:%s::<topic>:<subscription>, as Subscribe and ListSubscriptions answer them", arn, f.zonegroup)}
	}
	if topicName, err = f.parse(topicARN); err != nil {
		return "", "", err
	}
	return topicName, name, nil
}

// subscriptionParam returns the topic and name of the request's
// SubscriptionArn.
func (h *Handler) subscriptionParam(r *request) (string, string, error) {
	arn, err := r.require("SubscriptionArn")
	if err != nil {
		return "", "", err
	}
	return h.arns.parseSubscription(arn)
}

// snsName is the name herald gives the subscription of a topic to an
// endpoint: derived from the endpoint, so that subscribing it again finds
// the same subscription, as SNS does, and within the rule of names.
func snsName(endpoint string) string {
	sum := sha256.Sum256([]byte(endpoint))
	return "sns-" + hex.EncodeToString(sum[:12])
}

// protocolOf checks Subscribe's Protocol against its Endpoint: Protocol is
// a scheme herald delivers to, and the Endpoint's scheme is the same, or
// for AMQP either of amqp and amqps. It returns the endpoint's scheme.
func protocolOf(protocol, endpoint string) (topic.Scheme, error) {
	want, ok := topic.LookupScheme(strings.ToLower(protocol))
	if !ok {
		return topic.Scheme{}, fmt.Errorf("herald does not deliver to Protocol %q; use one of %s, with an Endpoint URI of that scheme",
			protocol, strings.Join(topic.SchemeNames(false), ", "))
	}
	u, err := url.Parse(endpoint)
	if err != nil || u.Scheme == "" {
		return topic.Scheme{}, fmt.Errorf("the Endpoint of a %s subscription must be a %s:// URI, got %q", want.Name, want.Name, topic.RedactEndpoint(endpoint))
	}
	got, ok := topic.LookupScheme(strings.ToLower(u.Scheme))
	if !ok || got.Protocol != want.Protocol || (got.Protocol == topic.ProtocolWebhook && got.Name != want.Name) {
		return topic.Scheme{}, fmt.Errorf("the Endpoint %[2]s does not match Protocol %[1]s; give the Endpoint's scheme as the Protocol", protocol, topic.RedactEndpoint(endpoint))
	}
	return got, nil
}

type subscribeResult struct {
	SubscriptionArn string
}

// pendingARN is what SNS answers for the ARN of a subscription waiting for
// its confirmation, unless asked for the ARN.
const pendingARN = "pending confirmation"

// subscribe subscribes an endpoint to a topic, as a subscription named by
// snsName whose events are delivered in SNS's format. An HTTP endpoint is
// sent a SubscriptionConfirmation and receives nothing until it confirms
// (see confirm.go); a broker's is confirmed at once, as SNS confirms an
// SQS queue of the topic's own account.
func (h *Handler) subscribe(ctx context.Context, r *request) (any, error) {
	topicName, err := h.topicName(r, "TopicArn")
	if err != nil {
		return nil, err
	}
	protocol, err := r.require("Protocol")
	if err != nil {
		return nil, err
	}
	endpoint, err := r.require("Endpoint")
	if err != nil {
		return nil, err
	}
	scheme, err := protocolOf(protocol, endpoint)
	if err != nil {
		return nil, &apiError{code: codeInvalidParameter, msg: err.Error()}
	}
	attrs, err := h.subscribeAttributes(r.form, endpoint)
	if err != nil {
		return nil, err
	}
	name := snsName(endpoint)
	sub, err := h.createSubscription(ctx, r, topicName, name, attrs, scheme.Protocol == topic.ProtocolWebhook)
	if err != nil {
		return nil, err
	}
	arn := h.arns.subscriptionOf(topicName, name)
	if pending(sub) && !strings.EqualFold(r.get("ReturnSubscriptionArn"), "true") {
		arn = pendingARN
	}
	return subscribeResult{SubscriptionArn: arn}, nil
}

// subscribeAttributes reads Subscribe's Attributes as herald's, with the
// endpoint and SNS's message format.
func (h *Handler) subscribeAttributes(form map[string][]string, endpoint string) (map[string]string, error) {
	given, err := parseAttributes(form)
	if err != nil {
		return nil, &apiError{code: codeInvalidParameter, msg: err.Error()}
	}
	attrs := map[string]string{"message_format": topic.FormatSNS}
	for _, name := range slices.Sorted(maps.Keys(given)) {
		hname, value, err := subscriptionAttribute(name, given[name])
		if err != nil {
			return nil, &apiError{code: codeInvalidParameter, msg: err.Error()}
		}
		attrs[hname] = value
	}
	attrs["push_endpoint"] = endpoint
	return attrs, nil
}

// createSubscription creates the subscription, or finds the one that
// subscribing the endpoint made before. With confirm, a new subscription
// waits for its endpoint's confirmation, and so does one that was waiting
// already: it is created anew and sent a new confirmation.
func (h *Handler) createSubscription(ctx context.Context, r *request, topicName, name string, attrs map[string]string, confirm bool) (node.Subscription, error) {
	sub, err := h.node.CreateSubscription(ctx, topicName, name, attrs)
	if errors.Is(err, node.ErrExists) {
		if sub, err = h.existing(ctx, topicName, name, attrs); err != nil || !pending(sub) {
			return sub, err
		}
		// Its token was sent to an endpoint that may never have
		// received it; herald keeps only the token's digest, so it
		// starts over with a new one.
		if err := h.node.DeleteSubscription(ctx, topicName, name); err != nil {
			return node.Subscription{}, nodeError(err)
		}
		sub, err = h.node.CreateSubscription(ctx, topicName, name, attrs)
	}
	if err != nil {
		return node.Subscription{}, subscriptionError(err)
	}
	if !confirm {
		return sub, nil
	}
	return h.requestConfirmation(ctx, r, sub, attrs)
}

// existing returns the subscription that an earlier Subscribe of the same
// endpoint made; as in SNS, subscribing again with other attributes is an
// error.
func (h *Handler) existing(ctx context.Context, topicName, name string, attrs map[string]string) (node.Subscription, error) {
	sub, err := h.node.GetSubscription(ctx, topicName, name)
	if err != nil {
		return node.Subscription{}, nodeError(err)
	}
	want, err := topic.NewSubscriptionAttributes(attrs)
	if err != nil {
		return node.Subscription{}, subscriptionError(err)
	}
	for hname, value := range want.Map() {
		if hname != "push_endpoint" && sub.Attributes[hname] != value {
			return node.Subscription{}, &apiError{code: codeInvalidParameter,
				msg: fmt.Sprintf("Attributes: the endpoint is subscribed to the topic already, as %s, with %s=%q rather than %q; change it with SetSubscriptionAttributes",
					h.arns.subscriptionOf(topicName, name), hname, sub.Attributes[hname], value)}
		}
	}
	return sub, nil
}

// subscriptionError is nodeError with SNS's code for a topic that has as
// many subscriptions as it may.
func subscriptionError(err error) error {
	if errors.Is(err, node.ErrSubscriptionLimit) {
		return &apiError{code: codeSubscriptionLimit, msg: err.Error()}
	}
	return attributeError(err)
}

// unsubscribe deletes a subscription. Unlike DeleteTopic's, its subject
// must exist, as in SNS.
func (h *Handler) unsubscribe(ctx context.Context, r *request) (any, error) {
	topicName, name, err := h.subscriptionParam(r)
	if err != nil {
		return nil, err
	}
	if err := h.node.DeleteSubscription(ctx, topicName, name); err != nil {
		return nil, nodeError(err)
	}
	return nil, nil
}

// A subscriptionMember is a subscription as ListSubscriptions and
// ListSubscriptionsByTopic list it.
type subscriptionMember struct {
	SubscriptionArn string
	Owner           string
	Protocol        string
	Endpoint        string
	TopicArn        string
}

type listSubscriptionsResult struct {
	Subscriptions struct {
		Members []subscriptionMember `xml:"member"`
	}
	NextToken string `xml:",omitempty"`
}

// listSubscriptions lists the subscriptions of every topic, by topic and
// name, perPage at a time.
func (h *Handler) listSubscriptions(ctx context.Context, r *request) (any, error) {
	var subs []node.Subscription
	for _, t := range h.node.ListTopics() {
		ts, err := h.node.ListSubscriptions(ctx, t.Name)
		if errors.Is(err, node.ErrNotFound) {
			continue // deleted since ListTopics
		}
		if err != nil {
			return nil, nodeError(err)
		}
		subs = append(subs, ts...)
	}
	return h.subscriptionPage(subs, r)
}

// listSubscriptionsByTopic lists a topic's subscriptions by name, perPage
// at a time.
func (h *Handler) listSubscriptionsByTopic(ctx context.Context, r *request) (any, error) {
	topicName, err := h.topicName(r, "TopicArn")
	if err != nil {
		return nil, err
	}
	subs, err := h.node.ListSubscriptions(ctx, topicName)
	if err != nil {
		return nil, nodeError(err)
	}
	return h.subscriptionPage(subs, r)
}

// subscriptionPage answers the page of subs the request asks for. A
// topic's default subscription is listed when it pushes: one without an
// endpoint is the topic's own queue, read by pulling, which SNS has no
// term for.
func (h *Handler) subscriptionPage(subs []node.Subscription, r *request) (any, error) {
	subs = slices.DeleteFunc(subs, func(s node.Subscription) bool {
		return s.Name == topic.DefaultSubscriptionName && s.Attributes["push_endpoint"] == ""
	})
	key := func(s node.Subscription) string { return s.Topic + "\x00" + s.Name } // sorts as (topic, name)
	slices.SortFunc(subs, func(a, b node.Subscription) int { return cmp.Compare(key(a), key(b)) })
	subs, next, err := page(subs, key, r)
	if err != nil {
		return nil, err
	}
	res := listSubscriptionsResult{NextToken: next}
	for _, s := range subs {
		m := subscriptionMember{
			SubscriptionArn: h.arns.subscriptionOf(s.Topic, s.Name),
			Protocol:        protocolName(s.Attributes["push_endpoint"]),
			Endpoint:        s.Attributes["push_endpoint"],
			TopicArn:        h.arns.of(s.Topic),
		}
		if pending(s) {
			m.SubscriptionArn = "PendingConfirmation" // as SNS lists them
		}
		res.Subscriptions.Members = append(res.Subscriptions.Members, m)
	}
	return res, nil
}

// protocolName is the Protocol of a subscription pushing to endpoint: its
// scheme, or herald's "pull" for one without an endpoint.
func protocolName(endpoint string) string {
	if endpoint == "" {
		return "pull"
	}
	scheme, _, _ := strings.Cut(endpoint, ":")
	return strings.ToLower(scheme)
}

// getSubscriptionAttributes answers SNS's attributes of a subscription,
// then herald's own under their names.
func (h *Handler) getSubscriptionAttributes(ctx context.Context, r *request) (any, error) {
	topicName, name, err := h.subscriptionParam(r)
	if err != nil {
		return nil, err
	}
	sub, err := h.node.GetSubscription(ctx, topicName, name)
	if err != nil {
		return nil, nodeError(err)
	}
	return struct{ Attributes attributeMap }{attributeMapOf(h.snsAttributes(sub))}, nil
}

// snsAttributes returns a subscription's attributes as
// GetSubscriptionAttributes answers them.
func (h *Handler) snsAttributes(sub node.Subscription) map[string]string {
	attrs := maps.Clone(sub.Attributes)
	endpoint := attrs["push_endpoint"]
	for _, hname := range subscriptionNames {
		delete(attrs, hname)
	}
	delete(attrs, "push_endpoint")
	attrs["disabled"] = strconv.FormatBool(sub.Disabled && !pending(sub))
	if sub.Disabled && !pending(sub) {
		attrs["disabled_reason"] = sub.DisabledReason
	}
	maps.Copy(attrs, map[string]string{
		"SubscriptionArn": h.arns.subscriptionOf(sub.Topic, sub.Name),
		"TopicArn":        h.arns.of(sub.Topic),
		"Protocol":        protocolName(endpoint),
		"Endpoint":        endpoint,
		// herald's subscriptions belong to no account.
		"Owner": "",
		// Unsubscribe always needs herald's admin scope when herald
		// checks tokens, as AuthenticateOnUnsubscribe asks SNS to.
		"ConfirmationWasAuthenticated": strconv.FormatBool(!pending(sub)),
		"PendingConfirmation":          strconv.FormatBool(pending(sub)),
		"RawMessageDelivery":           sub.Attributes["raw_message_delivery"],
	})
	if policy := sub.Attributes["filter_policy"]; policy != "" {
		attrs["FilterPolicy"] = policy
		attrs["FilterPolicyScope"] = sub.Attributes["filter_policy_scope"]
	}
	return attrs
}

// setSubscriptionAttributes sets one attribute of a subscription: SNS's
// FilterPolicy, FilterPolicyScope or RawMessageDelivery, or one of
// herald's, but not its endpoint.
func (h *Handler) setSubscriptionAttributes(ctx context.Context, r *request) (any, error) {
	topicName, name, err := h.subscriptionParam(r)
	if err != nil {
		return nil, err
	}
	attr, err := r.require("AttributeName")
	if err != nil {
		return nil, err
	}
	hname, value, err := subscriptionAttribute(attr, r.get("AttributeValue"))
	if err != nil {
		return nil, &apiError{code: codeInvalidParameter, msg: err.Error()}
	}
	if _, err := h.node.SetSubscriptionAttributes(ctx, topicName, name, map[string]string{hname: value}); err != nil {
		return nil, attributeError(err)
	}
	return nil, nil
}
