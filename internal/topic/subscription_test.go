package topic

import (
	"encoding/json"
	"errors"
	"maps"
	"slices"
	"strings"
	"testing"

	"herald/internal/filter"
)

func TestSubscriptionNames(t *testing.T) {
	names := SubscriptionNames()
	for _, topicLevel := range topicOnly {
		if slices.Contains(names, topicLevel) {
			t.Errorf("SubscriptionNames() has the topic-level attribute %s", topicLevel)
		}
	}
	for _, name := range Names() {
		if !slices.Contains(topicOnly, name) && !slices.Contains(names, name) {
			t.Errorf("SubscriptionNames() lacks the delivery attribute %s", name)
		}
	}
	for _, own := range []string{"filter_policy", "filter_policy_scope", "key_prefix", "raw_message_delivery",
		"message_format", "max_events_per_second", "max_in_flight", "disable_after", "start"} {
		if !slices.Contains(names, own) {
			t.Errorf("SubscriptionNames() lacks %s", own)
		}
	}
}

func TestSubscriptionDefaults(t *testing.T) {
	s := DefaultSubscriptionAttributes()
	if err := s.Validate(); err != nil {
		t.Fatalf("DefaultSubscriptionAttributes().Validate() = %v", err)
	}
	if s.Delivery.PushEndpoint != "" || s.FilterPolicy != "" || s.Start != StartNow ||
		s.DisableAfter != 432000 || s.FilterPolicyScope != ScopeAttributes || s.RawMessageDelivery || s.MessageFormat != FormatHerald {
		t.Errorf("DefaultSubscriptionAttributes() = %+v", s)
	}
	// Fields missing from stored JSON take their defaults.
	var got SubscriptionAttributes
	if err := json.Unmarshal([]byte(`{"key_prefix":"eu/","delivery":{"max_retries":3}}`), &got); err != nil {
		t.Fatal(err)
	}
	want := DefaultSubscriptionAttributes()
	want.KeyPrefix, want.Delivery.MaxRetries = "eu/", 3
	if got.Map()["key_prefix"] != "eu/" || got.MessageFormat != FormatHerald || got.DisableAfter != want.DisableAfter || got.Delivery.HTTPTimeout != DefaultHTTPTimeout || got.Delivery.MaxRetries != 3 {
		t.Errorf("decoded %+v, want %+v", got, want)
	}
}

func TestNewSubscriptionAttributes(t *testing.T) {
	s, err := NewSubscriptionAttributes(map[string]string{
		"push_endpoint":         "https://hooks.example.com/in?token=t0k",
		"signing_secret":        "s3cret",
		"filter_policy":         `{"type": ["order.created"], "total": [{"numeric": [">", 100]}]}`,
		"filter_policy_scope":   "MessageBody",
		"key_prefix":            "orders/",
		"raw_message_delivery":  "true",
		"message_format":        "sns",
		"max_events_per_second": "50",
		"max_in_flight":         "4",
		"disable_after":         "0",
		"start":                 "earliest",
		"max_retries":           "7",
	})
	if err != nil {
		t.Fatal(err)
	}
	if s.Delivery.MaxRetries != 7 || s.MaxEventsPerSecond != 50 || s.MaxInFlight != 4 || s.DisableAfter != 0 ||
		s.Start != StartEarliest || !s.RawMessageDelivery || s.MessageFormat != FormatSNS || s.KeyPrefix != "orders/" || s.FilterPolicyScope != ScopeBody {
		t.Errorf("got %+v", s)
	}
	p, err := s.Filter()
	if err != nil || p == nil {
		t.Fatalf("Filter() = %v, %v", p, err)
	}
	if !p.Match(filter.Event{Payload: []byte(`{"type":"order.created","total":150}`)}) {
		t.Error("the compiled filter does not match an event it should")
	}
	// Secrets are redacted as a topic's are, and the redacted forms given
	// back change nothing.
	m := s.Map()
	if m["signing_secret"] != RedactedSecret || strings.Contains(m["push_endpoint"], "t0k") {
		t.Errorf("Map() shows secrets: %q, %q", m["signing_secret"], m["push_endpoint"])
	}
	back, err := s.Update(m)
	if err != nil {
		t.Fatal(err)
	}
	if back.Delivery.SigningSecret != "s3cret" || back.Delivery.PushEndpoint != s.Delivery.PushEndpoint {
		t.Errorf("Update(Map()) changed the secrets: %+v", back.Delivery)
	}
}

func TestSubscriptionAttributesErrors(t *testing.T) {
	for _, tc := range []struct {
		name    string
		changes map[string]string
		want    []string // substrings of the error
	}{
		{"bad filter", map[string]string{"filter_policy": `{"price": [{"numeric": ["~", 3]}]}`}, []string{"filter_policy", `key "price"`}},
		{"filter not JSON", map[string]string{"filter_policy": `{"a": [`}, []string{"filter_policy"}},
		{"body literal in attributes scope", map[string]string{"filter_policy": `{"a": [true]}`}, []string{`key "a"`}},
		{"unknown attribute", map[string]string{"colour": "blue"}, []string{`unknown attribute "colour"`, "filter_policy"}},
		{"topic-level attribute", map[string]string{"Shards": "3", "max_retries": "x"}, []string{"shards is an attribute of the topic", "herald topic set", "max_retries"}},
		{"bad scope", map[string]string{"filter_policy_scope": "Headers"}, []string{"filter_policy_scope must be one of MessageAttributes, MessageBody"}},
		{"negative rate", map[string]string{"max_events_per_second": "-1"}, []string{"max_events_per_second", "non-negative integer"}},
		{"negative in flight", map[string]string{"max_in_flight": "-2"}, []string{"max_in_flight"}},
		{"bad message format", map[string]string{"message_format": "SNS"}, []string{"message_format must be one of herald, sns"}},
		{"bad start", map[string]string{"start": "yesterday"}, []string{"start must be one of now, earliest"}},
		{"bad endpoint", map[string]string{"push_endpoint": "ftp://h/x"}, []string{"unsupported scheme"}},
		{"amqp without exchange", map[string]string{"push_endpoint": "amqp://h"}, []string{"amqp_exchange"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			given := maps.Clone(tc.changes)
			_, err := NewSubscriptionAttributes(tc.changes)
			if !maps.Equal(given, tc.changes) {
				t.Errorf("the changes given were modified: %v, then %v", given, tc.changes)
			}
			if err == nil {
				t.Fatal("no error")
			}
			if !errors.Is(err, ErrInvalid) {
				t.Errorf("error %v does not wrap ErrInvalid", err)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not say %q", err, w)
				}
			}
		})
	}
	// The filter's own error stays in the chain, naming the key.
	_, err := NewSubscriptionAttributes(map[string]string{"filter_policy": `{"price": [{"numeric": ["~", 3]}]}`})
	var fe *filter.Error
	if !errors.As(err, &fe) || fe.Key != "price" {
		t.Errorf("error %v does not carry a *filter.Error naming key price", err)
	}
}

func TestSubscriptionUpdateKeepsStart(t *testing.T) {
	s, err := NewSubscriptionAttributes(map[string]string{"start": "earliest"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Update(map[string]string{"start": "now"}); err == nil || !strings.Contains(err.Error(), "only when a subscription is created") {
		t.Errorf("Update(start=now) = %v, want the start refused", err)
	}
	if _, err := s.Update(map[string]string{"start": "earliest", "key_prefix": "a"}); err != nil {
		t.Errorf("Update with start unchanged = %v", err)
	}
}

func TestDeliveryAttributes(t *testing.T) {
	topicAttrs, err := Defaults().With(map[string]string{"shards": "3", "max_queue_bytes": "1000", "push_endpoint": "https://topic/x", "persistent": "true"})
	if err != nil {
		t.Fatal(err)
	}
	s, err := NewSubscriptionAttributes(map[string]string{"push_endpoint": "nats://sub", "max_retries": "2"})
	if err != nil {
		t.Fatal(err)
	}
	d := s.DeliveryAttributes(topicAttrs)
	if d.Shards != 3 || d.MaxQueueBytes != 1000 || !d.Persistent {
		t.Errorf("topic-level fields not from the topic: %+v", d)
	}
	if d.PushEndpoint != "nats://sub" || d.MaxRetries != 2 {
		t.Errorf("delivery fields not from the subscription: %+v", d)
	}
	if err := d.Validate(); err != nil {
		t.Errorf("DeliveryAttributes().Validate() = %v", err)
	}
	// The default subscription delivers as the topic does.
	if got := topicAttrs.DefaultSubscription().DeliveryAttributes(topicAttrs); got.PushEndpoint != topicAttrs.PushEndpoint || got.Shards != 3 {
		t.Errorf("the default subscription's delivery = %+v", got)
	}
}

func TestValidateSubscriptionName(t *testing.T) {
	for _, ok := range []string{"default", "billing", "a-b_C9"} {
		if err := ValidateSubscriptionName(ok); err != nil {
			t.Errorf("ValidateSubscriptionName(%q) = %v", ok, err)
		}
	}
	for _, bad := range []string{"", "a.b", "a/b", strings.Repeat("x", MaxNameLen+1)} {
		err := ValidateSubscriptionName(bad)
		if err == nil || !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "subscription name") {
			t.Errorf("ValidateSubscriptionName(%q) = %v", bad, err)
		}
	}
}
