package topic

import (
	"errors"
	"maps"
	"path"
	"slices"
	"strings"
	"unicode/utf8"
)

// Validate checks the attributes as a whole: every value in range, and
// the values consistent with each other and with the push endpoint. It
// reports every problem it finds, not just the first, and does not modify
// a.
func (a *Attributes) Validate() error {
	var errs []error
	add := func(err error) {
		if err != nil {
			errs = append(errs, err)
		}
	}
	if a.Shards < 1 || a.Shards > MaxShards {
		add(invalidf("shards must be between 1 and %d, got %d", MaxShards, a.Shards))
	}
	add(checkSeconds("time_to_live", a.TimeToLive, "0 (forever) or more"))
	add(checkSeconds("retry_sleep_duration", a.RetrySleepDuration, "0 (no pause) or more"))
	add(checkSeconds("retention", a.Retention, "0 (none) or more"))
	if a.MaxRetries < 0 {
		add(invalidf("max_retries must be 0 (forever) or more, got %d", a.MaxRetries))
	}
	if a.MaxQueueBytes < 0 {
		add(invalidf("max_queue_bytes must be 0 (unlimited) or more, got %d", a.MaxQueueBytes))
	}
	if a.LocalRetentionBytes < 0 {
		add(invalidf("local_retention_bytes must be 0 (the node's default) or more, got %d", a.LocalRetentionBytes))
	}
	if a.HTTPTimeout < 1 || a.HTTPTimeout > MaxSeconds {
		add(invalidf("http_timeout must be between 1 and %d seconds, got %d", int64(MaxSeconds), a.HTTPTimeout))
	}
	add(a.validateEndpoint())
	add(checkOneOf("amqp_ack_level", a.AMQPAckLevel, "none", "broker"))
	add(checkOneOf("kafka_acks", a.KafkaAcks, "none", "leader", "all"))
	add(checkOneOf("signature_scheme", a.SignatureScheme, SignatureHerald, SignatureStandardWebhooks))
	if a.SignatureScheme == SignatureStandardWebhooks && a.SigningSecret != "" {
		_, err := StandardWebhooksKeys(a.SigningSecret)
		add(err)
	}
	add(checkMaxLen("amqp_exchange", a.AMQPExchange, 255))
	add(checkMaxLen("amqp_routing_key", a.AMQPRoutingKey, 255))
	add(checkKafkaTopic(a.KafkaTopic))
	add(checkNATSSubject(a.NATSSubject))
	add(validateHeaders(a.HTTPHeaders))
	add(a.checkUTF8())
	return errors.Join(errs...)
}

// checkSeconds checks an attribute measured in seconds. The upper bound
// keeps its conversion to a time.Duration from overflowing.
func checkSeconds(name string, v int64, low string) error {
	switch {
	case v < 0:
		return invalidf("%s must be %s seconds, got %d", name, low, v)
	case v > MaxSeconds:
		return invalidf("%s must be at most %d seconds (about 292 years), got %d", name, int64(MaxSeconds), v)
	}
	return nil
}

func checkOneOf(name, v string, allowed ...string) error {
	for _, ok := range allowed {
		if v == ok {
			return nil
		}
	}
	return invalidf("%s must be one of %s, got %s", name, strings.Join(allowed, ", "), quoteShort(v))
}

func checkMaxLen(name, v string, max int) error {
	if len(v) > max {
		return invalidf("%s is %d bytes long; AMQP allows at most %d, so shorten it", name, len(v), max)
	}
	return nil
}

// validateEndpoint checks the push endpoint and the attributes that only
// make sense with some endpoints.
func (a *Attributes) validateEndpoint() error {
	if a.PushEndpoint == "" {
		var errs []error
		if !a.Persistent {
			errs = append(errs, invalidf("a non-persistent topic needs a push_endpoint: it stores nothing, so its events would go nowhere; set push_endpoint, or persistent=true for a pull topic"))
		}
		return errors.Join(append(errs, a.checkTLS(Scheme{}))...)
	}
	shown := quoteShort(RedactEndpoint(a.PushEndpoint))
	u, err := ParseEndpoint(a.PushEndpoint)
	if err != nil {
		return invalidf("invalid push_endpoint %s: %v; use a URI such as https://host/path", shown, err)
	}
	scheme, ok := LookupScheme(u.Scheme)
	if !ok {
		return invalidf("invalid push_endpoint %s: unsupported scheme %q; use one of %s", shown, u.Scheme, strings.Join(SchemeNames(false), ", "))
	}
	if u.Hostname() == "" {
		return invalidf("invalid push_endpoint %s: it has no host; use %s://host[:port]/...", shown, u.Scheme)
	}
	var errs []error
	if scheme.Protocol == ProtocolAMQP && a.AMQPExchange == "" {
		errs = append(errs, invalidf("push_endpoint %s is AMQP, which needs an exchange: set the amqp_exchange attribute", shown))
	}
	return errors.Join(append(errs, a.checkTLS(scheme))...)
}

// checkTLS rejects TLS options with an endpoint that does not use TLS
// (scheme is the zero Scheme without an endpoint): they would be silently
// ignored, and whoever set them expects an effect.
func (a *Attributes) checkTLS(scheme Scheme) error {
	var errs []error
	if a.TLSCAFile != "" && !path.IsAbs(a.TLSCAFile) {
		errs = append(errs, invalidf("tls_ca_file %s is not an absolute path; give the full path of the PEM file, present on every herald node", quoteShort(a.TLSCAFile)))
	}
	if scheme.TLS {
		return errors.Join(errs...)
	}
	for _, opt := range []struct {
		name string
		set  bool
	}{{"tls_ca_file", a.TLSCAFile != ""}, {"tls_insecure_skip_verify", a.TLSInsecureSkipVerify}} {
		if opt.set {
			errs = append(errs, invalidf("%s applies only to %s push endpoints; use one of those schemes or unset %s", opt.name, strings.Join(SchemeNames(true), " and "), opt.name))
		}
	}
	return errors.Join(errs...)
}

// checkKafkaTopic applies Kafka's own rule for topic names, so that a bad
// name fails at configuration time rather than at every delivery.
func checkKafkaTopic(t string) error {
	if t == "" {
		return nil // the herald topic name, which is always valid
	}
	ok := len(t) <= 249 && t != "." && t != ".."
	for i := 0; ok && i < len(t); i++ {
		ok = isNameByte(t[i]) || t[i] == '.'
	}
	if !ok {
		return invalidf("invalid kafka_topic %s: Kafka topic names are 1-249 characters from A-Z a-z 0-9 . _ -; rename it, or leave it empty to use the herald topic name", quoteShort(t))
	}
	return nil
}

// checkNATSSubject requires a subject events can be published on: tokens
// separated by dots, without wildcards or whitespace.
func checkNATSSubject(s string) error {
	if s == "" {
		return nil // the herald topic name, which is always valid
	}
	for tok := range strings.SplitSeq(s, ".") {
		if tok == "" || tok == "*" || tok == ">" || strings.ContainsAny(tok, " \t\r\n") {
			return invalidf("invalid nats_subject %s: use tokens separated by dots, without spaces or the wildcards * and >, e.g. herald.orders", quoteShort(s))
		}
	}
	return nil
}

// checkUTF8 rejects text attributes that are not UTF-8: they are stored
// and delivered as JSON, which would silently replace the bad bytes.
func (a *Attributes) checkUTF8() error {
	var errs []error
	for _, f := range []struct{ name, v string }{
		{"push_endpoint", a.PushEndpoint},
		{"opaque_data", a.OpaqueData},
		{"amqp_exchange", a.AMQPExchange},
		{"amqp_routing_key", a.AMQPRoutingKey},
		{"signing_secret", a.SigningSecret},
		{"tls_ca_file", a.TLSCAFile},
	} {
		if !utf8.ValidString(f.v) {
			errs = append(errs, invalidf("%s is not valid UTF-8; use UTF-8 text (encode binary data, e.g. as base64)", f.name))
		}
	}
	for _, name := range slices.Sorted(maps.Keys(a.HTTPHeaders)) {
		if !utf8.ValidString(a.HTTPHeaders[name]) {
			errs = append(errs, invalidf("http_headers value for %s is not valid UTF-8; use UTF-8 text", quoteShort(name)))
		}
	}
	return errors.Join(errs...)
}
