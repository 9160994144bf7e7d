package topic

import (
	"errors"
	"net/url"
	"strings"
	"testing"
)

func TestRedactEndpoint(t *testing.T) {
	for _, tc := range []struct{ uri, want string }{
		// Nothing to hide.
		{"", ""},
		{"https://hooks.example/orders", "https://hooks.example/orders"},
		{"kafka://127.0.0.1:9092,127.0.0.2:9092", "kafka://127.0.0.1:9092,127.0.0.2:9092"},
		{"nats://127.0.0.1:4222", "nats://127.0.0.1:4222"},
		{"https://h/p#section", "https://h/p#section"},
		{"not a uri", "not a uri"},

		// Passwords.
		{"https://user:hunter2@h/p", "https://user:xxxxx@h/p"},
		{"amqp://user:pa%40ss@rabbit:5672/vh", "amqp://user:xxxxx@rabbit:5672/vh"},
		{"amqps://user:p:w@rabbit/vh", "amqps://user:xxxxx@rabbit/vh"},
		{"kafka://u:hunter2@127.0.0.1:9092", "kafka://u:xxxxx@127.0.0.1:9092"},
		{"nats://u:hunter2@127.0.0.1:4222", "nats://u:xxxxx@127.0.0.1:4222"},
		{"//u:hunter2@h/p", "//u:xxxxx@h/p"},
		// A user name alone may be a token.
		{"nats://s3cr3t-token@127.0.0.1:4222", "nats://xxxxx@127.0.0.1:4222"},
		{"https://ghp_token@h/p", "https://xxxxx@h/p"},
		{"amqp://guest:@h/vh", "amqp://xxxxx@h/vh"},

		// Query values, keys kept.
		{"https://h/hook?token=abc", "https://h/hook?token=xxxxx"},
		{"https://h/hook?token=abc&sig=def&v=1", "https://h/hook?token=xxxxx&sig=xxxxx&v=xxxxx"},
		{"https://h/hook?bare-token", "https://h/hook?xxxxx"},
		{"https://h/hook?a=&&b=1", "https://h/hook?a=&&b=xxxxx"},
		{"https://h/hook?", "https://h/hook?"},
		{"amqps://u:p@h/vh?heartbeat=10", "amqps://u:xxxxx@h/vh?heartbeat=xxxxx"},
		{"http://h/x?a=1;b=2", "http://h/x?a=xxxxx"},

		// Both.
		{"https://user:hunter2@h:8443/p?token=abc#frag", "https://user:xxxxx@h:8443/p?token=xxxxx#frag"},
		{"https://u:p@h/p@q?x=y@z", "https://u:xxxxx@h/p@q?x=xxxxx"},

		// Not valid URIs: redacted more widely.
		{"http://u:hunter2@a b/", "http://u:xxxxx@a b/"},
		{"http://u:hunter2@h:8o/", "http://u:xxxxx@h:8o/"},
		{"amqp://u:se/cret@h:5672/vh", "amqp://u:xxxxx@h:5672/vh"},
		{"amqp://u:p?ss#w@h", "amqp://u:xxxxx@h"},
		{"http://u:pw@[::1/x?token=abc", "http://u:xxxxx@[::1/x?token=xxxxx"},
		{"http://bad host/?token=abc#x", "http://bad host/?token=xxxxx"},
		{"http://h:port?token=a@b", "http://h:xxxxx@b"},
		{"%zz://h/?token=abc", "%zz://h/?token=xxxxx"},
		{"user:hunter2@host", "user:xxxxx@host"}, // no //: not an authority to url.Parse
	} {
		got := RedactEndpoint(tc.uri)
		if got != tc.want {
			t.Errorf("RedactEndpoint(%q) = %q, want %q", tc.uri, got, tc.want)
		}
		if again := RedactEndpoint(got); again != got {
			t.Errorf("RedactEndpoint(%q) = %q, redacted again %q: not stable", tc.uri, got, again)
		}
	}
}

// TestParseEndpointErrorHidesTheURI: url.Parse's errors quote the URI,
// whole or in part; ParseEndpoint's say what is wrong without it.
func TestParseEndpointErrorHidesTheURI(t *testing.T) {
	for _, tc := range []struct{ uri, want string }{
		{"amqp://guest:se/cret@h", "invalid port after host"},
		{"http://u:hunter2@a b/?token=secret", "invalid character in host name"},
		{"http://u:p%zzsecret@h/?token=secret", "invalid URL escape"},
	} {
		if _, err := url.Parse(tc.uri); err == nil {
			t.Fatalf("url.Parse(%q) succeeded; the case tests nothing", tc.uri)
		}
		_, err := ParseEndpoint(tc.uri)
		if err == nil || err.Error() != tc.want || !errors.Is(err, ErrInvalid) {
			t.Errorf("ParseEndpoint(%q) error = %v, want %q wrapping ErrInvalid", tc.uri, err, tc.want)
		}
	}
	if u, err := ParseEndpoint("https://u:p@h/x?y=1"); err != nil || u.Host != "h" || u.RawQuery != "y=1" {
		t.Errorf("ParseEndpoint of a valid URI = %v, %v", u, err)
	}
}

// TestSetRedactedEndpointKeepsIt: Map shows the endpoint with its secrets
// redacted, and giving that form back to With keeps the real endpoint,
// whatever was redacted; any other value replaces it.
func TestSetRedactedEndpointKeepsIt(t *testing.T) {
	for _, ep := range []string{
		"https://h/hook?token=abc",
		"https://user:pw@h/hook?token=abc&sig=def",
		"amqp://user:pw@h/vh",
		"nats://token@127.0.0.1:4222",
	} {
		a := Defaults()
		a.PushEndpoint = ep
		shown := a.Map()["push_endpoint"]
		if shown == ep || strings.Contains(shown, "abc") || strings.Contains(shown, "pw") || strings.Contains(shown, "token@") {
			t.Errorf("Map shows push_endpoint %q as %q", ep, shown)
		}
		if got, err := a.With(a.Map()); err != nil || got.PushEndpoint != ep {
			t.Errorf("With(Map()) of %q: push_endpoint %q, %v; want it unchanged", ep, got.PushEndpoint, err)
		}
		got, err := a.With(map[string]string{"push_endpoint": shown})
		if err != nil || got.PushEndpoint != ep {
			t.Errorf("setting %q, the redacted form of %q: got %q, %v; want it unchanged", shown, ep, got.PushEndpoint, err)
		}
		changed := strings.Replace(ep, "h", "other", 1)
		if got, err := a.With(map[string]string{"push_endpoint": changed}); err != nil || got.PushEndpoint != changed {
			t.Errorf("setting %q over %q: got %q, %v", changed, ep, got.PushEndpoint, err)
		}
	}
}

// FuzzRedactEndpoint checks that redacting is stable, and that what it
// leaves of a valid URI is a valid URI without a password or query value.
func FuzzRedactEndpoint(f *testing.F) {
	for _, s := range []string{"https://u:p@h/x?t=1#f", "amqp://u:se/cret@h", "nats://tok@h:1", "http://h/?a&b=", "u:p@h", "0//0@", "?0#=%", "?://\x7f@"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, uri string) {
		got := RedactEndpoint(uri)
		if again := RedactEndpoint(got); again != got {
			t.Fatalf("RedactEndpoint(%q) = %q, then %q", uri, got, again)
		}
		orig, err := url.Parse(uri)
		if err != nil || orig.Opaque != "" {
			return
		}
		u, err := url.Parse(got)
		if err != nil {
			t.Fatalf("RedactEndpoint(%q) = %q, which does not parse: %v", uri, got, err)
		}
		if p, ok := u.User.Password(); ok && p != redacted {
			t.Fatalf("RedactEndpoint(%q) = %q shows password %q", uri, got, p)
		}
		for part := range strings.SplitSeq(u.RawQuery, "&") {
			if _, v, ok := strings.Cut(part, "="); ok && v != "" && v != redacted || !ok && part != "" && part != redacted {
				t.Fatalf("RedactEndpoint(%q) = %q shows query part %q", uri, got, part)
			}
		}
		if u.Host != orig.Host || u.Path != orig.Path || u.Fragment != orig.Fragment {
			t.Fatalf("RedactEndpoint(%q) = %q changed more than the secrets", uri, got)
		}
	})
}
