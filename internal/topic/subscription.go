package topic

import (
	"encoding/json"
	"errors"
	"maps"
	"slices"
	"strings"
	"unicode/utf8"

	"herald/internal/filter"
)

// DefaultSubscriptionName names a topic's default subscription: the
// delivery that the topic's own attributes (push_endpoint and the rest)
// describe, whose id is 0.
const DefaultSubscriptionName = "default"

// Values and defaults of the subscription-only attributes.
const (
	// ScopeAttributes and ScopeBody are the values of filter_policy_scope:
	// the policy's keys name the event's headers, or the fields of its
	// JSON payload (SNS's MessageAttributes and MessageBody).
	ScopeAttributes = "MessageAttributes"
	ScopeBody       = "MessageBody"

	// StartNow and StartEarliest are the values of start: a new
	// subscription receives the events published from its creation on,
	// or every event its topic still holds.
	StartNow      = "now"
	StartEarliest = "earliest"

	// FormatHerald and FormatSNS are the values of message_format: an
	// event is delivered in herald's JSON envelope, or in the JSON
	// notification AWS SNS delivers (package envelope), which the
	// SNS-compatible API's Subscribe asks for so that receivers written
	// for SNS read it.
	FormatHerald = "herald"
	FormatSNS    = "sns"

	// DefaultDisableAfter is how long, in seconds, a subscription may
	// fail without a break before it is disabled: 5 days, long enough to
	// ride out an outage over a long weekend.
	DefaultDisableAfter = 5 * 24 * 60 * 60
)

// topicOnly are the attributes of a topic that concern its shards, not a
// delivery: a subscription has none of them, and DeliveryAttributes takes
// them from the topic.
var topicOnly = []string{"persistent", "shards", "max_queue_bytes"}

// SubscriptionAttributes are a subscription's settings. They are stored
// by the controller as JSON, so the JSON field names are part of the
// on-disk format.
//
// As with Attributes, zero values do not mean "default": use
// DefaultSubscriptionAttributes and With, and Validate before using them.
type SubscriptionAttributes struct {
	// Delivery holds the push endpoint and every setting of its delivery,
	// with the names, meaning, validation and redaction they have on a
	// topic. Its topic-level fields (persistent, shards, max_queue_bytes)
	// keep their defaults and mean nothing: DeliveryAttributes takes them
	// from the topic.
	Delivery Attributes `json:"delivery"`

	// FilterPolicy is an AWS SNS filter policy (JSON, see package filter)
	// that an event must match to be delivered; empty delivers every
	// event.
	FilterPolicy string `json:"filter_policy"`
	// FilterPolicyScope says what FilterPolicy's keys name: ScopeAttributes
	// (the event's headers) or ScopeBody (its JSON payload's fields).
	FilterPolicyScope string `json:"filter_policy_scope"`
	// KeyPrefix, when set, delivers only the events whose key starts
	// with it.
	KeyPrefix string `json:"key_prefix"`
	// RawMessageDelivery is SNS's attribute of the same name, kept for
	// subscriptions made through the SNS-style API.
	RawMessageDelivery bool `json:"raw_message_delivery"`
	// MessageFormat is how an event is delivered: FormatHerald or
	// FormatSNS. With FormatSNS and RawMessageDelivery, the payload is
	// delivered as it is, with SNS's headers.
	MessageFormat string `json:"message_format"`
	// MaxEventsPerSecond limits the rate of deliveries; 0 is unlimited.
	MaxEventsPerSecond int64 `json:"max_events_per_second"`
	// MaxInFlight limits the deliveries in flight at once, per shard; 0
	// means the server's --delivery-concurrency.
	MaxInFlight int `json:"max_in_flight"`
	// DisableAfter is how long, in seconds, deliveries may fail without a
	// success before the subscription is disabled; 0 never disables it.
	DisableAfter int64 `json:"disable_after"`
	// Start is where a new subscription starts reading its topic:
	// StartNow or StartEarliest. It is fixed when the subscription is
	// created.
	Start string `json:"start"`
}

// DefaultSubscriptionAttributes returns the attributes of a subscription
// created without any: a pull subscription, unfiltered, starting now.
func DefaultSubscriptionAttributes() SubscriptionAttributes {
	return SubscriptionAttributes{
		Delivery:          Defaults(),
		FilterPolicyScope: ScopeAttributes,
		MessageFormat:     FormatHerald,
		DisableAfter:      DefaultDisableAfter,
		Start:             StartNow,
	}
}

// DefaultSubscription returns the attributes of the default subscription
// of a topic with attributes a: its delivery settings are the topic's, and
// the subscription-only attributes their defaults.
func (a Attributes) DefaultSubscription() SubscriptionAttributes {
	s := DefaultSubscriptionAttributes()
	s.Delivery = a.Clone()
	return s
}

// DeliveryAttributes returns the attributes a dispatcher of the
// subscription takes, for a topic with attributes t: the subscription's
// delivery settings, with the topic-level ones (see topicOnly) from t. The
// delivery code keeps taking Attributes, whoever they come from.
func (s SubscriptionAttributes) DeliveryAttributes(t Attributes) Attributes {
	d := s.Delivery.Clone()
	d.Persistent, d.Shards, d.MaxQueueBytes = t.Persistent, t.Shards, t.MaxQueueBytes
	return d
}

// Clone returns a deep copy of s, one that shares no map with it.
func (s SubscriptionAttributes) Clone() SubscriptionAttributes {
	s.Delivery = s.Delivery.Clone()
	return s
}

// UnmarshalJSON decodes attributes, taking fields missing from data from
// DefaultSubscriptionAttributes, as Attributes.UnmarshalJSON does.
func (s *SubscriptionAttributes) UnmarshalJSON(data []byte) error {
	type plain SubscriptionAttributes // without methods, so this does not recurse
	p := plain(DefaultSubscriptionAttributes())
	if err := json.Unmarshal(data, &p); err != nil {
		return err
	}
	*s = SubscriptionAttributes(p)
	return nil
}

// subscriptionDefaults gives the examples of the number attributes' forms.
var subscriptionDefaults = DefaultSubscriptionAttributes()

// subAttrs lists the attributes of a subscription in the order
// SubscriptionNames reports them: a topic's delivery attributes, then the
// subscription's own.
var subAttrs = subscriptionTable()

func subscriptionTable() []attrOf[SubscriptionAttributes] {
	var table []attrOf[SubscriptionAttributes]
	for _, at := range attrs {
		if !slices.Contains(topicOnly, at.name) {
			table = append(table, deliveryAttr(at))
		}
	}
	type sa = SubscriptionAttributes
	return append(table,
		attrOf[sa]{name: "filter_policy", form: `an AWS SNS filter policy in JSON, e.g. {"type": ["order.created"]}, or empty for none`,
			set: func(s *sa, v string) error { s.FilterPolicy = v; return nil },
			get: func(s *sa) string { return s.FilterPolicy }},
		textAttr("filter_policy_scope", func(s *sa) *string { return &s.FilterPolicyScope }),
		textAttr("key_prefix", func(s *sa) *string { return &s.KeyPrefix }),
		boolAttr("raw_message_delivery", func(s *sa) *bool { return &s.RawMessageDelivery }),
		textAttr("message_format", func(s *sa) *string { return &s.MessageFormat }),
		numAttrOf("max_events_per_second", &subscriptionDefaults, func(s *sa) *int64 { return &s.MaxEventsPerSecond }),
		numAttrOf("max_in_flight", &subscriptionDefaults, func(s *sa) *int { return &s.MaxInFlight }),
		numAttrOf("disable_after", &subscriptionDefaults, func(s *sa) *int64 { return &s.DisableAfter }),
		textAttr("start", func(s *sa) *string { return &s.Start }),
	)
}

// deliveryAttr is the topic attribute at as an attribute of a
// subscription's Delivery: parsed, formatted and redacted alike.
func deliveryAttr(at attr) attrOf[SubscriptionAttributes] {
	return attrOf[SubscriptionAttributes]{
		name: at.name,
		form: at.form,
		set:  func(s *SubscriptionAttributes, v string) error { return at.set(&s.Delivery, v) },
		get:  func(s *SubscriptionAttributes) string { return at.get(&s.Delivery) },
	}
}

// SubscriptionNames returns the attribute names accepted by
// SubscriptionAttributes.With and returned by its Map.
func SubscriptionNames() []string { return namesOf(subAttrs) }

// With returns a copy of s with changes applied, as Attributes.With does
// for a topic: names as SubscriptionNames lists them, values parsed by
// type, every bad change reported. It checks only that each value parses;
// call Validate on the result.
func (s SubscriptionAttributes) With(changes map[string]string) (SubscriptionAttributes, error) {
	s = s.Clone()
	// A topic's own attributes are named as such, rather than unknown:
	// whoever sets them on a subscription has the topic in mind.
	var errs []error
	rest := maps.Clone(changes) // changes itself is the caller's
	for _, k := range slices.Sorted(maps.Keys(changes)) {
		if name := normalize(k); slices.Contains(topicOnly, name) {
			errs = append(errs, invalidf("%s is an attribute of the topic, shared by its subscriptions; set it on the topic (herald topic set TOPIC --attr %s=...)", name, name))
			delete(rest, k)
		}
	}
	if err := errors.Join(append(errs, applyChanges(subAttrs, &s, rest))...); err != nil {
		return SubscriptionAttributes{}, err
	}
	return s, nil
}

// Map returns every attribute as a string, keyed by name, in the form
// With accepts, with secrets redacted as Attributes.Map redacts them.
func (s SubscriptionAttributes) Map() map[string]string { return mapOf(subAttrs, &s) }

// NewSubscriptionAttributes returns the attributes of a new subscription:
// changes applied over DefaultSubscriptionAttributes, validated.
func NewSubscriptionAttributes(changes map[string]string) (SubscriptionAttributes, error) {
	s, err := DefaultSubscriptionAttributes().With(changes)
	if err != nil {
		return SubscriptionAttributes{}, err
	}
	if err := s.Validate(); err != nil {
		return SubscriptionAttributes{}, err
	}
	return s, nil
}

// Update returns s with changes applied and validated, for a subscription
// that exists: its start is where it started, so changes may not move it.
func (s SubscriptionAttributes) Update(changes map[string]string) (SubscriptionAttributes, error) {
	u, err := s.With(changes)
	if err != nil {
		return SubscriptionAttributes{}, err
	}
	if u.Start != s.Start {
		return SubscriptionAttributes{}, invalidf("start applies only when a subscription is created, and this one started %s; to start elsewhere, delete the subscription and create it again with start=%s",
			quoteShort(s.Start), quoteShort(u.Start))
	}
	if err := u.Validate(); err != nil {
		return SubscriptionAttributes{}, err
	}
	return u, nil
}

// Validate checks the attributes as a whole: the delivery settings as
// Attributes.Validate checks a topic's, then the subscription's own. It
// reports every problem it finds and does not modify s.
func (s *SubscriptionAttributes) Validate() error {
	var errs []error
	add := func(err error) {
		if err != nil {
			errs = append(errs, err)
		}
	}
	add(s.Delivery.Validate())
	if err := checkOneOf("filter_policy_scope", s.FilterPolicyScope, ScopeAttributes, ScopeBody); err != nil {
		add(err) // the policy cannot be read without its scope
	} else if _, err := s.Filter(); err != nil {
		add(err)
	}
	add(checkOneOf("message_format", s.MessageFormat, FormatHerald, FormatSNS))
	if !utf8.ValidString(s.KeyPrefix) {
		add(invalidf("key_prefix is not valid UTF-8; event keys are UTF-8 text"))
	}
	if s.MaxEventsPerSecond < 0 {
		add(invalidf("max_events_per_second must be 0 (unlimited) or more, got %d", s.MaxEventsPerSecond))
	}
	if s.MaxInFlight < 0 {
		add(invalidf("max_in_flight must be 0 (the server's --delivery-concurrency) or more, got %d", s.MaxInFlight))
	}
	add(checkSeconds("disable_after", s.DisableAfter, "0 (never) or more"))
	add(checkOneOf("start", s.Start, StartNow, StartEarliest))
	return errors.Join(errs...)
}

// Filter compiles the subscription's filter policy for filter.Policy's
// Match; it returns nil without a policy. Its error wraps ErrInvalid and
// the *filter.Error that names the part of the policy at fault.
func (s *SubscriptionAttributes) Filter() (*filter.Policy, error) {
	if s.FilterPolicy == "" {
		return nil, nil
	}
	scope := filter.Attributes
	switch s.FilterPolicyScope {
	case ScopeAttributes:
	case ScopeBody:
		scope = filter.Body
	default:
		return nil, checkOneOf("filter_policy_scope", s.FilterPolicyScope, ScopeAttributes, ScopeBody)
	}
	p, err := filter.Parse([]byte(s.FilterPolicy), scope)
	if err != nil {
		// The error starts "filter policy: ", which the attribute's name
		// says better.
		detail := strings.TrimPrefix(err.Error(), "filter policy: ")
		return nil, invalidCause(err, "invalid filter_policy: %s; write an AWS SNS filter policy, e.g. {\"type\": [\"order.created\"]}", detail)
	}
	return p, nil
}
