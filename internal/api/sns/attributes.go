package sns

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
)

// cephNames maps the attribute names of Ceph's topic API to herald's. Any
// other name is passed to herald as it is, so herald's own attributes
// (shards, max_queue_bytes, http_headers, signing_secret, ...) work too,
// with dashes or underscores, and a name neither knows is refused.
var cephNames = map[string]string{
	"push-endpoint":        "push_endpoint",
	"persistent":           "persistent",
	"amqp-exchange":        "amqp_exchange",
	"amqp-ack-level":       "amqp_ack_level",
	"kafka-ack-level":      "kafka_acks",
	"verify-ssl":           "tls_insecure_skip_verify",
	"ca-location":          "tls_ca_file",
	"OpaqueData":           "opaque_data",
	"time_to_live":         "time_to_live",
	"max_retries":          "max_retries",
	"retry_sleep_duration": "retry_sleep_duration",
}

// shownAs names herald's attributes the Ceph way in GetTopicAttributes,
// where the values mean the same; the others keep herald's names.
var shownAs = map[string]string{
	"push_endpoint":        "push-endpoint",
	"persistent":           "persistent",
	"amqp_exchange":        "amqp-exchange",
	"amqp_ack_level":       "amqp-ack-level",
	"tls_ca_file":          "ca-location",
	"opaque_data":          "OpaqueData",
	"time_to_live":         "time_to_live",
	"max_retries":          "max_retries",
	"retry_sleep_duration": "retry_sleep_duration",
}

// toHerald translates one attribute from Ceph's name and value to
// herald's.
func toHerald(name, value string) (string, string, error) {
	hname, ok := cephNames[name]
	if !ok {
		return name, value, nil
	}
	switch name {
	case "verify-ssl":
		// Ceph says whether to verify; herald whether to skip verifying.
		verify, err := strconv.ParseBool(value)
		if err != nil {
			return "", "", fmt.Errorf("attribute verify-ssl=%q: want true or false", value)
		}
		value = strconv.FormatBool(!verify)
	case "kafka-ack-level":
		// Ceph's levels are none and broker: broker waits for the
		// brokers' acknowledgement, which herald calls all.
		switch value {
		case "none":
		case "broker":
			value = "all"
		default:
			return "", "", fmt.Errorf("attribute kafka-ack-level=%q: want none or broker (or herald's kafka_acks: none, leader or all)", value)
		}
	}
	return hname, value, nil
}

// parseAttributes reads Attributes.entry.N.key and Attributes.entry.N.value
// pairs into herald's names and values.
func parseAttributes(form map[string][]string) (map[string]string, error) {
	type entry struct{ key, value *string }
	entries := map[int]*entry{}
	for param, values := range form {
		rest, ok := strings.CutPrefix(param, "Attributes.")
		if !ok {
			continue
		}
		n, field, err := entryField(rest)
		if err != nil {
			return nil, fmt.Errorf("parameter %s: %w", param, err)
		}
		e := entries[n]
		if e == nil {
			e = &entry{}
			entries[n] = e
		}
		v := values[0]
		if field == "key" {
			e.key = &v
		} else {
			e.value = &v
		}
	}
	attrs := make(map[string]string, len(entries))
	for _, n := range slices.Sorted(maps.Keys(entries)) {
		e := entries[n]
		switch {
		case e.key == nil || *e.key == "":
			return nil, fmt.Errorf("entry %d of Attributes has a value but no key; give Attributes.entry.%d.key", n, n)
		case e.value == nil:
			return nil, fmt.Errorf("attribute %s (Attributes.entry.%d) has no value; give Attributes.entry.%d.value", *e.key, n, n)
		}
		name, value, err := toHerald(*e.key, *e.value)
		if err != nil {
			return nil, err
		}
		if _, dup := attrs[name]; dup {
			return nil, fmt.Errorf("attribute %s is given twice", *e.key)
		}
		attrs[name] = value
	}
	return attrs, nil
}

// entryField parses "entry.N.key" or "entry.N.value".
func entryField(s string) (int, string, error) {
	parts := strings.Split(s, ".")
	if len(parts) != 3 || parts[0] != "entry" || (parts[2] != "key" && parts[2] != "value") {
		return 0, "", fmt.Errorf("want Attributes.entry.N.key or Attributes.entry.N.value")
	}
	n, err := strconv.Atoi(parts[1])
	if err != nil || n < 1 {
		return 0, "", fmt.Errorf("entry number %q is not a positive integer", parts[1])
	}
	return n, parts[2], nil
}

// shownAttributes returns a topic's attributes as GetTopicAttributes shows
// them.
func shownAttributes(attrs map[string]string) map[string]string {
	out := make(map[string]string, len(attrs))
	for name, value := range attrs {
		if ceph, ok := shownAs[name]; ok {
			name = ceph
		}
		out[name] = value
	}
	return out
}
