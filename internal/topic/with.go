package topic

import (
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"
)

// RedactedSecret is what Map shows instead of a signing secret that is set.
// Passing it back to With keeps the secret unchanged, so a display
// round-trip (Map, edit one value, With) does not overwrite the secret with
// the placeholder.
const RedactedSecret = "(set)"

// errForm is returned by an attr's set when the value does not have the
// attribute's form, and there is nothing to add to the form's description.
var errForm = errors.New("value does not have the attribute's form")

// An attrOf describes one attribute of the settings A as a string: how to
// parse it into A and how to format it back. Topics (Attributes) and
// subscriptions (SubscriptionAttributes) share the table of delivery
// attributes through it.
type attrOf[A any] struct {
	name string
	form string // the accepted form, for error messages
	set  func(a *A, v string) error
	get  func(a *A) string
}

// An attr is one attribute of a topic.
type attr = attrOf[Attributes]

// attrs lists the attributes in the order Names reports them.
var attrs = []attr{
	boolAttr("persistent", func(a *Attributes) *bool { return &a.Persistent }),
	numAttr("shards", func(a *Attributes) *int { return &a.Shards }),
	{name: "push_endpoint", form: "a URI such as https://host/path, or empty for pull-only",
		set: setEndpoint, get: func(a *Attributes) string { return RedactEndpoint(a.PushEndpoint) }},
	numAttr("time_to_live", func(a *Attributes) *int64 { return &a.TimeToLive }),
	numAttr("max_retries", func(a *Attributes) *int { return &a.MaxRetries }),
	numAttr("retry_sleep_duration", func(a *Attributes) *int64 { return &a.RetrySleepDuration }),
	numAttr("max_queue_bytes", func(a *Attributes) *int64 { return &a.MaxQueueBytes }),
	numAttr("retention", func(a *Attributes) *int64 { return &a.Retention }),
	numAttr("local_retention_bytes", func(a *Attributes) *int64 { return &a.LocalRetentionBytes }),
	textAttr("opaque_data", func(a *Attributes) *string { return &a.OpaqueData }),
	textAttr("amqp_exchange", func(a *Attributes) *string { return &a.AMQPExchange }),
	textAttr("amqp_routing_key", func(a *Attributes) *string { return &a.AMQPRoutingKey }),
	textAttr("amqp_ack_level", func(a *Attributes) *string { return &a.AMQPAckLevel }),
	textAttr("kafka_topic", func(a *Attributes) *string { return &a.KafkaTopic }),
	textAttr("kafka_acks", func(a *Attributes) *string { return &a.KafkaAcks }),
	textAttr("nats_subject", func(a *Attributes) *string { return &a.NATSSubject }),
	boolAttr("nats_jetstream", func(a *Attributes) *bool { return &a.NATSJetStream }),
	{name: "http_headers", form: headersForm, set: setHeaders,
		get: func(a *Attributes) string { return formatHeaders(a.HTTPHeaders) }},
	numAttr("http_timeout", func(a *Attributes) *int64 { return &a.HTTPTimeout }),
	{name: "signing_secret", form: "any text, or empty for none (for standard-webhooks: whsec_ secrets separated by spaces)", set: setSecret, get: getSecret},
	textAttr("signature_scheme", func(a *Attributes) *string { return &a.SignatureScheme }),
	boolAttr("tls_insecure_skip_verify", func(a *Attributes) *bool { return &a.TLSInsecureSkipVerify }),
	textAttr("tls_ca_file", func(a *Attributes) *string { return &a.TLSCAFile }),
}

// Names returns the attribute names accepted by With and returned by Map.
func Names() []string { return namesOf(attrs) }

// lookup finds an attribute by name. Names are case-insensitive and may
// use '-' for '_', because SNS-style clients (the AWS CLI, Ceph's tools)
// send "push-endpoint".
func lookup[A any](table []attrOf[A], name string) (*attrOf[A], bool) {
	name = normalize(name)
	for i := range table {
		if table[i].name == name {
			return &table[i], true
		}
	}
	return nil, false
}

// namesOf returns the names in table, in its order.
func namesOf[A any](table []attrOf[A]) []string {
	names := make([]string, len(table))
	for i, at := range table {
		names[i] = at.name
	}
	return names
}

func normalize(name string) string {
	return strings.ToLower(strings.ReplaceAll(strings.TrimSpace(name), "-", "_"))
}

// With returns a copy of a with changes applied. Keys are attribute names
// (see Names); values are parsed according to each attribute's type:
// booleans are "true" or "false", numbers are non-negative decimal
// integers, http_headers is a list of "Name: value" pairs (see
// Attributes.HTTPHeaders), and everything else is taken as is.
//
// With checks only that each value parses; call Validate on the result to
// check the attributes as a whole. It reports every bad change, not just
// the first, in a deterministic order. a itself is never modified.
func (a Attributes) With(changes map[string]string) (Attributes, error) {
	a = a.Clone()
	if err := applyChanges(attrs, &a, changes); err != nil {
		return Attributes{}, err
	}
	return a, nil
}

// applyChanges parses changes into *a by table, as With describes, and
// reports every bad change.
func applyChanges[A any](table []attrOf[A], a *A, changes map[string]string) error {
	keys := slices.Sorted(maps.Keys(changes)) // for a deterministic error order
	var errs []error
	seen := make(map[string]string, len(keys))
	for _, k := range keys {
		at, ok := lookup(table, k)
		if !ok {
			errs = append(errs, invalidf("unknown attribute %s: use one of %s", quoteShort(k), strings.Join(namesOf(table), ", ")))
			continue
		}
		if prev, dup := seen[at.name]; dup {
			// Applying both would make the result depend on map order.
			errs = append(errs, invalidf("attribute %s is given twice, as %q and %q: give it once", at.name, prev, k))
			continue
		}
		seen[at.name] = k
		switch err := at.set(a, changes[k]); {
		case err == errForm:
			errs = append(errs, invalidf("invalid value %s for attribute %s: use %s", quoteShort(changes[k]), at.name, at.form))
		case err != nil:
			errs = append(errs, invalidf("invalid value %s for attribute %s: %v; use %s", quoteShort(changes[k]), at.name, err, at.form))
		}
	}
	return errors.Join(errs...)
}

// Map returns every attribute as a string, keyed by name, in the form With
// accepts. It is meant for display: the signing secret shows as
// RedactedSecret and the push endpoint as RedactEndpoint shows it, with
// "xxxxx" for its password and query values. Passing those placeholders
// back to With leaves the values unchanged, so a.With(a.Map()) equals a.
func (a Attributes) Map() map[string]string { return mapOf(attrs, &a) }

// mapOf formats every attribute of table in *a, keyed by name.
func mapOf[A any](table []attrOf[A], a *A) map[string]string {
	m := make(map[string]string, len(table))
	for _, at := range table {
		m[at.name] = at.get(a)
	}
	return m
}

func boolAttr[A any](name string, field func(*A) *bool) attrOf[A] {
	return attrOf[A]{
		name: name,
		form: "true or false",
		set: func(a *A, v string) error {
			switch strings.ToLower(strings.TrimSpace(v)) {
			case "true":
				*field(a) = true
			case "false":
				*field(a) = false
			default:
				return errForm
			}
			return nil
		},
		get: func(a *A) string { return strconv.FormatBool(*field(a)) },
	}
}

func numAttr[T int | int64](name string, field func(*Attributes) *T) attr {
	return numAttrOf(name, &defaults, field)
}

// numAttrOf is a number attribute of A, whose example in error messages
// is its value in def, the defaults.
func numAttrOf[A any, T int | int64](name string, def *A, field func(*A) *T) attrOf[A] {
	return attrOf[A]{
		name: name,
		form: numForm(name, int64(*field(def))),
		set: func(a *A, v string) error {
			n, err := parseNumber(v)
			if err != nil {
				return err
			}
			if int64(T(n)) != n {
				return errors.New("too large")
			}
			*field(a) = T(n)
			return nil
		},
		get: func(a *A) string { return strconv.FormatInt(int64(*field(a)), 10) },
	}
}

var defaults = Defaults()

func numForm(name string, example int64) string {
	return fmt.Sprintf("a non-negative integer, e.g. %s=%d", name, example)
}

// parseNumber parses a non-negative decimal integer. Signs are refused
// rather than accepted, so "-1" cannot be mistaken for a meaningful value.
func parseNumber(v string) (int64, error) {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0, errForm
	}
	for i := 0; i < len(v); i++ {
		if v[i] < '0' || v[i] > '9' {
			return 0, errForm
		}
	}
	n, err := strconv.ParseUint(v, 10, 64)
	if err != nil || n > math.MaxInt64 {
		return 0, errors.New("too large")
	}
	return int64(n), nil
}

func textAttr[A any](name string, field func(*A) *string) attrOf[A] {
	return attrOf[A]{
		name: name,
		form: "any text",
		set:  func(a *A, v string) error { *field(a) = v; return nil },
		get:  func(a *A) string { return *field(a) },
	}
}

// setEndpoint sets the push endpoint, except that the redacted form Map
// shows of the current endpoint keeps it, password and query included.
func setEndpoint(a *Attributes, v string) error {
	if v != a.PushEndpoint && v == RedactEndpoint(a.PushEndpoint) {
		return nil
	}
	a.PushEndpoint = v
	return nil
}

func setSecret(a *Attributes, v string) error {
	if v == RedactedSecret {
		if a.SigningSecret == "" {
			return fmt.Errorf("%q is the placeholder shown for a secret that is set, and no secret is set", RedactedSecret)
		}
		return nil
	}
	a.SigningSecret = v
	return nil
}

func getSecret(a *Attributes) string {
	if a.SigningSecret == "" {
		return ""
	}
	return RedactedSecret
}
