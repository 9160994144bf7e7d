package topic

import (
	"encoding/json"
	"errors"
	"maps"
	"reflect"
	"slices"
	"strings"
	"testing"
)

func TestDefaults(t *testing.T) {
	d := Defaults()
	want := Attributes{
		Persistent:         true,
		Shards:             11,
		RetrySleepDuration: 1,
		MaxQueueBytes:      256 << 20,
		AMQPAckLevel:       "broker",
		KafkaAcks:          "all",
		HTTPTimeout:        10,
		SignatureScheme:    "herald",
	}
	if !reflect.DeepEqual(d, want) {
		t.Errorf("Defaults() = %+v, want %+v", d, want)
	}
	if err := d.Validate(); err != nil {
		t.Errorf("Defaults().Validate() = %v", err)
	}
}

func TestNames(t *testing.T) {
	want := []string{"persistent", "shards", "push_endpoint", "time_to_live", "max_retries",
		"retry_sleep_duration", "max_queue_bytes", "retention", "local_retention_bytes", "opaque_data", "amqp_exchange", "amqp_routing_key",
		"amqp_ack_level", "kafka_topic", "kafka_acks", "nats_subject", "nats_jetstream", "http_headers",
		"http_timeout", "signing_secret", "signature_scheme", "tls_insecure_skip_verify", "tls_ca_file"}
	if got := Names(); !slices.Equal(got, want) {
		t.Errorf("Names() = %q, want %q", got, want)
	}
	// Every attribute has a JSON field of the same name, and vice versa.
	var fields []string
	for f := range reflect.TypeFor[Attributes]().Fields() {
		fields = append(fields, f.Tag.Get("json"))
	}
	if !slices.Equal(fields, want) {
		t.Errorf("JSON names = %q, want %q", fields, want)
	}
}

func TestWith(t *testing.T) {
	for _, tc := range []struct {
		changes map[string]string
		want    func(a *Attributes)
	}{
		{map[string]string{"persistent": "false"}, func(a *Attributes) { a.Persistent = false }},
		{map[string]string{"persistent": " TRUE "}, func(a *Attributes) { a.Persistent = true }},
		{map[string]string{"shards": "4"}, func(a *Attributes) { a.Shards = 4 }},
		{map[string]string{"shards": "0"}, func(a *Attributes) { a.Shards = 0 }}, // With does not validate
		{map[string]string{"push_endpoint": "https://h/x"}, func(a *Attributes) { a.PushEndpoint = "https://h/x" }},
		{map[string]string{"push-endpoint": "https://h/x"}, func(a *Attributes) { a.PushEndpoint = "https://h/x" }},
		{map[string]string{"Push-Endpoint": "nats://h"}, func(a *Attributes) { a.PushEndpoint = "nats://h" }},
		{map[string]string{"time_to_live": "3600"}, func(a *Attributes) { a.TimeToLive = 3600 }},
		{map[string]string{"retention": "604800"}, func(a *Attributes) { a.Retention = 604800 }},
		{map[string]string{"local_retention_bytes": "1048576"}, func(a *Attributes) { a.LocalRetentionBytes = 1 << 20 }},
		{map[string]string{"max_retries": "9223372036854775807"}, func(a *Attributes) { a.MaxRetries = 1<<63 - 1 }},
		{map[string]string{"retry_sleep_duration": "0"}, func(a *Attributes) { a.RetrySleepDuration = 0 }},
		{map[string]string{"max_queue_bytes": "007"}, func(a *Attributes) { a.MaxQueueBytes = 7 }},
		{map[string]string{"opaque_data": " spaces kept "}, func(a *Attributes) { a.OpaqueData = " spaces kept " }},
		{map[string]string{"amqp_exchange": "ex"}, func(a *Attributes) { a.AMQPExchange = "ex" }},
		{map[string]string{"amqp-routing-key": "rk"}, func(a *Attributes) { a.AMQPRoutingKey = "rk" }},
		{map[string]string{"amqp_ack_level": "none"}, func(a *Attributes) { a.AMQPAckLevel = "none" }},
		{map[string]string{"kafka_topic": "k.t"}, func(a *Attributes) { a.KafkaTopic = "k.t" }},
		{map[string]string{"kafka_acks": "leader"}, func(a *Attributes) { a.KafkaAcks = "leader" }},
		{map[string]string{"nats_subject": "a.b"}, func(a *Attributes) { a.NATSSubject = "a.b" }},
		{map[string]string{"nats_jetstream": "true"}, func(a *Attributes) { a.NATSJetStream = true }},
		{map[string]string{"http_timeout": "30"}, func(a *Attributes) { a.HTTPTimeout = 30 }},
		{map[string]string{"signing_secret": "s3"}, func(a *Attributes) { a.SigningSecret = "s3" }},
		{map[string]string{"tls_insecure_skip_verify": "true"}, func(a *Attributes) { a.TLSInsecureSkipVerify = true }},
		{map[string]string{"tls_ca_file": "/etc/ca.pem"}, func(a *Attributes) { a.TLSCAFile = "/etc/ca.pem" }},
		{map[string]string{"http_headers": "X-A: 1; X-B:2"}, func(a *Attributes) {
			a.HTTPHeaders = map[string]string{"X-A": "1", "X-B": "2"}
		}},
		{map[string]string{"http_headers": "Content-Type: text/plain; charset=utf-8\r\nX-B: a:b\n\n"}, func(a *Attributes) {
			a.HTTPHeaders = map[string]string{"Content-Type": "text/plain; charset=utf-8", "X-B": "a:b"}
		}},
		{map[string]string{"http_headers": "X-Empty:"}, func(a *Attributes) { a.HTTPHeaders = map[string]string{"X-Empty": ""} }},
		{map[string]string{"http_headers": " ; "}, func(a *Attributes) {}},
		{map[string]string{}, func(a *Attributes) {}},
		{nil, func(a *Attributes) {}},
	} {
		got, err := Defaults().With(tc.changes)
		want := Defaults()
		tc.want(&want)
		if err != nil || !reflect.DeepEqual(got, want) {
			t.Errorf("With(%q) = %+v, %v; want %+v", tc.changes, got, err, want)
		}
	}
}

func TestWithReplacesHeaders(t *testing.T) {
	a, err := Defaults().With(map[string]string{"http_headers": "X-A: 1"})
	if err != nil {
		t.Fatal(err)
	}
	b, err := a.With(map[string]string{"http_headers": "X-B: 2"})
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(b.HTTPHeaders, map[string]string{"X-B": "2"}) {
		t.Errorf("headers = %v, want only X-B", b.HTTPHeaders)
	}
	if !reflect.DeepEqual(a.HTTPHeaders, map[string]string{"X-A": "1"}) {
		t.Errorf("With modified its receiver's headers: %v", a.HTTPHeaders)
	}
	c, err := b.With(map[string]string{"http_headers": ""})
	if err != nil || c.HTTPHeaders != nil {
		t.Errorf("clearing headers gave %v, %v; want nil map", c.HTTPHeaders, err)
	}
}

func TestWithDoesNotShareMaps(t *testing.T) {
	a := Defaults()
	a.HTTPHeaders = map[string]string{"X-A": "1"}
	b, err := a.With(map[string]string{"shards": "2"})
	if err != nil {
		t.Fatal(err)
	}
	b.HTTPHeaders["X-A"] = "changed"
	if a.HTTPHeaders["X-A"] != "1" {
		t.Error("the result of With shares its headers map with the receiver")
	}
}

func TestWithErrors(t *testing.T) {
	for _, tc := range []struct {
		changes map[string]string
		want    []string
	}{
		{map[string]string{"colour": "red"}, []string{`unknown attribute "colour"`, "use one of persistent, shards, push_endpoint,", "tls_ca_file"}},
		{map[string]string{"": "x"}, []string{`unknown attribute ""`, "use one of"}},
		{map[string]string{"persistent": "yes"}, []string{`invalid value "yes" for attribute persistent`, "use true or false"}},
		{map[string]string{"nats-jetstream": "1"}, []string{"attribute nats_jetstream", "use true or false"}},
		{map[string]string{"shards": "-1"}, []string{`invalid value "-1" for attribute shards`, "use a non-negative integer, e.g. shards=11"}},
		{map[string]string{"shards": "+1"}, []string{"attribute shards", "non-negative integer"}},
		{map[string]string{"shards": "1.5"}, []string{"attribute shards", "non-negative integer"}},
		{map[string]string{"shards": ""}, []string{`invalid value "" for attribute shards`}},
		{map[string]string{"max_queue_bytes": "1e9"}, []string{"attribute max_queue_bytes", "e.g. max_queue_bytes=268435456"}},
		{map[string]string{"time_to_live": "9223372036854775808"}, []string{"attribute time_to_live", "too large", "non-negative integer"}},
		{map[string]string{"http_timeout": "ten"}, []string{"attribute http_timeout", "e.g. http_timeout=10"}},
		{map[string]string{"http_headers": "X-A 1"}, []string{"attribute http_headers", `"X-A 1" is not a "Name: value" pair`, "separated by ';' or by newlines"}},
		{map[string]string{"http_headers": ": v"}, []string{"attribute http_headers", "not a \"Name: value\" pair"}},
		{map[string]string{"http_headers": "X-A: 1; x-a: 2"}, []string{"header x-a is given twice"}},
		{map[string]string{"signing_secret": RedactedSecret}, []string{"attribute signing_secret", "placeholder", "no secret is set"}},
		{map[string]string{"push_endpoint": "a", "push-endpoint": "b"}, []string{"push_endpoint is given twice", `"push-endpoint"`, `"push_endpoint"`, "give it once"}},
	} {
		_, err := Defaults().With(tc.changes)
		wantInvalid(t, err, tc.want...)
	}
}

func TestWithReportsEveryError(t *testing.T) {
	changes := map[string]string{"shards": "x", "colour": "red", "persistent": "maybe", "kafka_acks": "all"}
	var first string
	for i := range 20 {
		_, err := Defaults().With(changes)
		wantInvalid(t, err, "attribute shards", `unknown attribute "colour"`, "attribute persistent")
		if i == 0 {
			first = err.Error()
		} else if err.Error() != first {
			t.Fatalf("With's error changed between calls:\n%s\nthen\n%s", first, err)
		}
	}
	// Sorted by the key as given.
	if i, j := strings.Index(first, "colour"), strings.Index(first, "attribute shards"); i > j {
		t.Errorf("errors not in key order:\n%s", first)
	}
}

func TestValidate(t *testing.T) {
	valid := []map[string]string{
		{"push_endpoint": "https://hooks.example.com/herald?x=1", "http_headers": "X-A: 1", "tls_ca_file": "/etc/ca.pem", "tls_insecure_skip_verify": "true"},
		{"push_endpoint": "HTTP://host:8080"},
		{"push_endpoint": "amqp://user:pw@rabbit/vhost", "amqp_exchange": "ex", "amqp_ack_level": "none"},
		{"push_endpoint": "amqps://rabbit", "amqp_exchange": "ex", "tls_ca_file": "/ca.pem"},
		{"push_endpoint": "kafka://broker:9092", "kafka_topic": "my.topic_1", "kafka_acks": "leader"},
		{"push_endpoint": "nats://n:4222", "nats_subject": "a.b.c", "nats_jetstream": "true"},
		{"persistent": "false", "push_endpoint": "http://[::1]:80/"},
		{"shards": "1"}, {"shards": "1024"},
		{"time_to_live": "9223372035", "retry_sleep_duration": "0", "max_retries": "0", "max_queue_bytes": "0"},
		{"http_timeout": "1"},
		{"http_headers": "Content-Type: text/plain; charset=utf-8\nX-Tab: a\tb"},
		{"opaque_data": "αβγ", "signing_secret": "s"},
	}
	for _, changes := range valid {
		a, err := Defaults().With(changes)
		if err != nil {
			t.Fatalf("With(%q): %v", changes, err)
		}
		if err := a.Validate(); err != nil {
			t.Errorf("Validate(%q) = %v, want nil", changes, err)
		}
	}

	for _, tc := range []struct {
		a    func(a *Attributes)
		want []string
	}{
		{func(a *Attributes) { a.Shards = 0 }, []string{"shards must be between 1 and 1024, got 0"}},
		{func(a *Attributes) { a.Shards = 1025 }, []string{"shards must be between 1 and 1024, got 1025"}},
		{func(a *Attributes) { a.Shards = -3 }, []string{"got -3"}},
		{func(a *Attributes) { a.TimeToLive = -1 }, []string{"time_to_live must be 0 (forever) or more seconds, got -1"}},
		{func(a *Attributes) { a.TimeToLive = MaxSeconds + 1 }, []string{"time_to_live must be at most 9223372035 seconds"}},
		{func(a *Attributes) { a.Retention = -1 }, []string{"retention must be 0 (none) or more seconds, got -1"}},
		{func(a *Attributes) { a.Retention = MaxSeconds + 1 }, []string{"retention must be at most 9223372035 seconds"}},
		{func(a *Attributes) { a.RetrySleepDuration = -1 }, []string{"retry_sleep_duration must be 0 (no pause) or more"}},
		{func(a *Attributes) { a.MaxRetries = -1 }, []string{"max_retries must be 0 (forever) or more, got -1"}},
		{func(a *Attributes) { a.MaxQueueBytes = -1 }, []string{"max_queue_bytes must be 0 (unlimited) or more"}},
		{func(a *Attributes) { a.LocalRetentionBytes = -1 }, []string{"local_retention_bytes must be 0 (the node's default) or more"}},
		{func(a *Attributes) { a.HTTPTimeout = 0 }, []string{"http_timeout must be between 1 and", "got 0"}},
		{func(a *Attributes) { a.PushEndpoint = "ftp://h/x" }, []string{`invalid push_endpoint "ftp://h/x"`, `unsupported scheme "ftp"`, "use one of http, https, amqp, amqps, kafka, nats"}},
		{func(a *Attributes) { a.PushEndpoint = "hooks.example.com/x" }, []string{`unsupported scheme ""`, "use one of http"}},
		{func(a *Attributes) { a.PushEndpoint = "http:///x" }, []string{"it has no host", "use http://host[:port]/..."}},
		{func(a *Attributes) { a.PushEndpoint = "http:x" }, []string{"it has no host"}},
		{func(a *Attributes) { a.PushEndpoint = "http://:80" }, []string{"it has no host"}},
		{func(a *Attributes) { a.PushEndpoint = "http://a b/" }, []string{"invalid push_endpoint", "invalid character", "use a URI such as"}},
		{func(a *Attributes) { a.PushEndpoint = "amqp://rabbit" }, []string{"is AMQP, which needs an exchange", "set the amqp_exchange attribute"}},
		{func(a *Attributes) { a.PushEndpoint = "amqps://rabbit" }, []string{"set the amqp_exchange attribute"}},
		{func(a *Attributes) { a.Persistent = false }, []string{"non-persistent topic needs a push_endpoint", "set push_endpoint, or persistent=true"}},
		{func(a *Attributes) { a.AMQPAckLevel = "all" }, []string{"amqp_ack_level must be one of none, broker", `got "all"`}},
		{func(a *Attributes) { a.AMQPAckLevel = "" }, []string{"amqp_ack_level must be one of none, broker", `got ""`}},
		{func(a *Attributes) { a.KafkaAcks = "broker" }, []string{"kafka_acks must be one of none, leader, all", `got "broker"`}},
		{func(a *Attributes) { a.AMQPExchange = strings.Repeat("e", 256) }, []string{"amqp_exchange is 256 bytes long", "at most 255"}},
		{func(a *Attributes) { a.AMQPRoutingKey = strings.Repeat("k", 256) }, []string{"amqp_routing_key is 256 bytes long"}},
		{func(a *Attributes) { a.KafkaTopic = "a b" }, []string{`invalid kafka_topic "a b"`, "1-249 characters", "leave it empty"}},
		{func(a *Attributes) { a.KafkaTopic = ".." }, []string{"invalid kafka_topic"}},
		{func(a *Attributes) { a.KafkaTopic = strings.Repeat("k", 250) }, []string{"invalid kafka_topic"}},
		{func(a *Attributes) { a.NATSSubject = "a..b" }, []string{`invalid nats_subject "a..b"`, "tokens separated by dots"}},
		{func(a *Attributes) { a.NATSSubject = "a.*" }, []string{"invalid nats_subject", "wildcards"}},
		{func(a *Attributes) { a.NATSSubject = "a.>" }, []string{"invalid nats_subject"}},
		{func(a *Attributes) { a.NATSSubject = "a b" }, []string{"invalid nats_subject", "without spaces"}},
		{func(a *Attributes) { a.HTTPHeaders = map[string]string{"X A": "1"} }, []string{`invalid http_headers name "X A"`, "e.g. X-Api-Key"}},
		{func(a *Attributes) { a.HTTPHeaders = map[string]string{"": "1"} }, []string{`invalid http_headers name ""`}},
		{func(a *Attributes) { a.HTTPHeaders = map[string]string{"X:A": "1"} }, []string{`invalid http_headers name "X:A"`}},
		{func(a *Attributes) { a.HTTPHeaders = map[string]string{"X-A": "1\r\nX-Evil: 2"} }, []string{`invalid http_headers value for "X-A"`, `control character '\r'`, "remove it"}},
		{func(a *Attributes) { a.HTTPHeaders = map[string]string{"X-A": "\xff"} }, []string{`http_headers value for "X-A" is not valid UTF-8`}},
		{func(a *Attributes) { a.OpaqueData = "\xff" }, []string{"opaque_data is not valid UTF-8", "base64"}},
		{func(a *Attributes) { a.TLSCAFile = "/ca.pem" }, []string{"tls_ca_file applies only to https and amqps push endpoints", "unset tls_ca_file"}},
		{func(a *Attributes) { a.TLSCAFile = "/ca.pem"; a.PushEndpoint = "http://h" }, []string{"tls_ca_file applies only to https and amqps"}},
		{func(a *Attributes) { a.TLSInsecureSkipVerify = true; a.PushEndpoint = "kafka://b" }, []string{"tls_insecure_skip_verify applies only to https and amqps"}},
		{func(a *Attributes) { a.TLSCAFile = "ca.pem"; a.PushEndpoint = "https://h" }, []string{`tls_ca_file "ca.pem" is not an absolute path`, "full path"}},
	} {
		a := Defaults()
		tc.a(&a)
		wantInvalid(t, a.Validate(), tc.want...)
	}
}

func TestValidateReportsEveryProblem(t *testing.T) {
	a := Defaults()
	a.Shards = 0
	a.KafkaAcks = "x"
	a.PushEndpoint = "amqp://h"
	err := a.Validate()
	wantInvalid(t, err, "shards must be", "kafka_acks must be", "amqp_exchange")
}

// TestErrorsHidePasswords checks that a password in the push endpoint does
// not leak into error messages, which end up in logs.
func TestErrorsHidePasswords(t *testing.T) {
	for _, ep := range []string{"ftp://u:hunter2@h/x", "amqp://u:hunter2@h", "http://u:hunter2@a b/", "http://u:hunter2@h:8o/"} {
		a := Defaults()
		a.PushEndpoint = ep
		err := a.Validate()
		wantInvalid(t, err, "u:xxxxx@")
		if strings.Contains(err.Error(), "hunter2") {
			t.Errorf("error for %q shows the password: %v", ep, err)
		}
	}
}

func TestMap(t *testing.T) {
	a := Defaults()
	a.PushEndpoint = "amqps://user:pw@rabbit:5671/vh"
	a.SigningSecret = "hunter2"
	a.HTTPHeaders = map[string]string{"X-B": "2", "X-A": "1"}
	m := a.Map()
	if got := slices.Sorted(maps.Keys(m)); !slices.Equal(got, slices.Sorted(slices.Values(Names()))) {
		t.Errorf("Map keys = %q, want Names()", got)
	}
	for k, want := range map[string]string{
		"persistent":     "true",
		"shards":         "11",
		"push_endpoint":  "amqps://user:xxxxx@rabbit:5671/vh",
		"signing_secret": RedactedSecret,
		"http_headers":   "X-A: 1; X-B: 2",
		"http_timeout":   "10",
		"kafka_topic":    "",
	} {
		if m[k] != want {
			t.Errorf("Map()[%q] = %q, want %q", k, m[k], want)
		}
	}
	for k, v := range m {
		if strings.Contains(v, "hunter2") || strings.Contains(v, ":pw@") {
			t.Errorf("Map()[%q] = %q shows a secret", k, v)
		}
	}
	if s := Defaults().Map()["signing_secret"]; s != "" {
		t.Errorf("an unset secret shows as %q, want empty", s)
	}
}

func TestWithMapRoundTrip(t *testing.T) {
	full := Attributes{
		Persistent: false, Shards: 1024, PushEndpoint: "amqps://u:p@h:1/v", TimeToLive: 5, MaxRetries: 6,
		RetrySleepDuration: 7, MaxQueueBytes: 8, OpaqueData: "op; a: b\nc", AMQPExchange: "ex",
		AMQPRoutingKey: "rk", AMQPAckLevel: "none", KafkaTopic: "kt", KafkaAcks: "leader", NATSSubject: "ns",
		NATSJetStream: true, HTTPHeaders: map[string]string{"A": "1", "b": "x: y"}, HTTPTimeout: 99,
		SigningSecret: "sec", TLSInsecureSkipVerify: true, TLSCAFile: "/ca",
	}
	public := full.Clone()
	public.SigningSecret, public.PushEndpoint = "", "amqps://h:1/v" // a lone user name may be a token: hidden too
	cases := []Attributes{Defaults(), full, public}
	for _, headers := range []map[string]string{
		{"Content-Type": "text/plain; charset=utf-8"},
		{"Content-Type": "text/plain; charset=utf-8", "X-A": ""},
		{"X-Only": "v"},
	} {
		a := Defaults()
		a.HTTPHeaders = headers
		cases = append(cases, a)
	}
	for _, a := range cases {
		if got, err := a.With(a.Map()); err != nil || !reflect.DeepEqual(got, a) {
			t.Errorf("a.With(a.Map()):\n got %+v, %v\nwant %+v", got, err, a)
		}
		if a.SigningSecret != "" {
			continue // Map hides it, so it cannot be copied elsewhere
		}
		// Onto attributes that differ in every field.
		for _, base := range []Attributes{Defaults(), public} {
			if got, err := base.With(a.Map()); err != nil || !reflect.DeepEqual(got, a) {
				t.Errorf("With(Map()) from %+v:\n got %+v, %v\nwant %+v", base, got, err, a)
			}
		}
	}
}

func TestRedactedSecretKeepsSecret(t *testing.T) {
	a := Defaults()
	a.SigningSecret = "hunter2"
	a.PushEndpoint = "amqp://u:pw@h"
	b, err := a.With(map[string]string{"signing_secret": RedactedSecret, "push_endpoint": "amqp://u:xxxxx@h"})
	if err != nil || b.SigningSecret != "hunter2" || b.PushEndpoint != "amqp://u:pw@h" {
		t.Errorf("placeholders changed the secrets: %q, %q, %v", b.SigningSecret, b.PushEndpoint, err)
	}
	c, err := a.With(map[string]string{"push_endpoint": "amqp://u:new@h"})
	if err != nil || c.PushEndpoint != "amqp://u:new@h" {
		t.Errorf("a new password was not taken: %q, %v", c.PushEndpoint, err)
	}
}

func TestJSON(t *testing.T) {
	a, err := Defaults().With(map[string]string{"push_endpoint": "https://h", "http_headers": "X-A: 1", "shards": "3"})
	if err != nil {
		t.Fatal(err)
	}
	data, err := json.Marshal(a)
	if err != nil {
		t.Fatal(err)
	}
	var b Attributes
	if err := json.Unmarshal(data, &b); err != nil || !reflect.DeepEqual(a, b) {
		t.Errorf("JSON round trip: got %+v, %v; want %+v", b, err, a)
	}
	if !strings.Contains(string(data), `"push_endpoint":"https://h"`) {
		t.Errorf("JSON %s does not use the attribute names", data)
	}

	// Fields missing from stored JSON take their defaults.
	var c Attributes
	if err := json.Unmarshal([]byte(`{"shards":2,"persistent":false}`), &c); err != nil {
		t.Fatal(err)
	}
	want := Defaults()
	want.Shards, want.Persistent = 2, false
	if !reflect.DeepEqual(c, want) {
		t.Errorf("partial JSON decoded to %+v, want %+v", c, want)
	}
	if err := json.Unmarshal([]byte(`{"shards":"two"}`), &c); err == nil {
		t.Error("decoding a string into shards succeeded")
	}
}

func TestErrInvalidIsNotTheMessage(t *testing.T) {
	err := ValidateName("")
	if strings.HasPrefix(err.Error(), ErrInvalid.Error()) {
		t.Errorf("message %q starts with the sentinel's text", err)
	}
	if !errors.Is(err, ErrInvalid) {
		t.Error("not ErrInvalid")
	}
}

// FuzzWith checks that no value makes With or Validate panic or fail
// without ErrInvalid, and that whatever With accepts survives Map.
func FuzzWith(f *testing.F) {
	for _, name := range Names() {
		f.Add(name, Defaults().Map()[name])
	}
	f.Add("http_headers", "A: 1; B: 2;\nC: ;")
	f.Add("push_endpoint", "amqp://u:p@h")
	f.Fuzz(func(t *testing.T, name, value string) {
		a, err := Defaults().With(map[string]string{name: value})
		if err != nil {
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("With error %v is not ErrInvalid", err)
			}
			return
		}
		if err := a.Validate(); err != nil && !errors.Is(err, ErrInvalid) {
			t.Fatalf("Validate error %v is not ErrInvalid", err)
		}
		if a.SigningSecret != "" || RedactEndpoint(a.PushEndpoint) != a.PushEndpoint {
			return // Map hides secrets, so they cannot be copied elsewhere
		}
		b, err := Defaults().With(a.Map())
		if err != nil || !reflect.DeepEqual(a, b) {
			t.Fatalf("With(Map()) of %+v = %+v, %v", a, b, err)
		}
	})
}

func TestStandardWebhooksSecrets(t *testing.T) {
	key32 := "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw" // 24 bytes
	key64 := "whsec_" + strings.Repeat("QUFB", 16)    // 48 bytes of "AAA"
	a, err := Defaults().With(map[string]string{"signature_scheme": "standard-webhooks", "signing_secret": key32 + " " + key64})
	if err != nil || a.Validate() != nil {
		t.Fatalf("two whsec_ secrets: %v, %v", err, a.Validate())
	}
	keys, err := StandardWebhooksKeys(a.SigningSecret)
	if err != nil || len(keys) != 2 || len(keys[0]) != 24 || string(keys[1]) != strings.Repeat("A", 48) {
		t.Fatalf("keys %q, %v", keys, err)
	}
	for secret, says := range map[string]string{
		"s3cret":                  "does not start with whsec_",
		"whsec_***":               "not whsec_ and standard base64",
		"whsec_QUFB":              "holds 3 bytes",
		key32 + " whsec_QUFBQUFB": "secret 2 holds 6 bytes",
		"   ":                     "blank",
	} {
		a, err := Defaults().With(map[string]string{"signature_scheme": "standard-webhooks", "signing_secret": secret})
		if err == nil {
			err = a.Validate()
		}
		if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), says) {
			t.Errorf("secret %q: %v, want ErrInvalid saying %q", secret, err, says)
		}
	}
	// The herald scheme takes any secret; an unknown scheme is refused.
	if a, err := Defaults().With(map[string]string{"signing_secret": "s3cret"}); err != nil || a.Validate() != nil {
		t.Errorf("herald scheme with a plain secret: %v %v", err, a.Validate())
	}
	a, _ = Defaults().With(map[string]string{"signature_scheme": "hmac"})
	if err := a.Validate(); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "signature_scheme") {
		t.Errorf("unknown scheme: %v", err)
	}
}
