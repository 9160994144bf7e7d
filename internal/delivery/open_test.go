package delivery

import (
	"strings"
	"testing"

	"herald/internal/endpoint/endpointtest"
	"herald/internal/topic"
)

// TestOpenEndpointErrorsHideSecrets: url.Parse's error repeats the URI;
// OpenEndpoint's must show it redacted, without its password or token.
func TestOpenEndpointErrorsHideSecrets(t *testing.T) {
	for _, tc := range []struct{ uri, want string }{
		{"https://u:hunter2@h:8o/x?token=hunter3", `push endpoint https://u:xxxxx@h:8o/x?token=xxxxx of topic "t": invalid port after host`},
		{"ftp://u:hunter2@h/x?token=hunter3", `unsupported scheme "ftp"`},
	} {
		a := topic.Defaults()
		a.PushEndpoint = tc.uri
		ep, err := OpenEndpoint("t", a, endpointtest.Guard(t))
		if err == nil {
			ep.Close()
			t.Fatalf("OpenEndpoint(%s) succeeded", tc.uri)
		}
		if !strings.Contains(err.Error(), tc.want) {
			t.Errorf("OpenEndpoint(%s) = %v, want an error saying %q", tc.uri, err, tc.want)
		}
		if strings.Contains(err.Error(), "hunter") {
			t.Errorf("error %q shows a secret", err)
		}
	}
}

// TestOpenEndpointOpensEveryScheme: every scheme topic validation accepts
// has an endpoint behind it.
func TestOpenEndpointOpensEveryScheme(t *testing.T) {
	for _, s := range topic.Schemes() {
		a := topic.Defaults()
		a.PushEndpoint = s.Name + "://127.0.0.1:1"
		a.AMQPExchange = "x"
		if err := a.Validate(); err != nil {
			t.Fatalf("%s: %v", a.PushEndpoint, err)
		}
		ep, err := OpenEndpoint("t", a, endpointtest.Guard(t))
		if err != nil {
			t.Errorf("OpenEndpoint(%s): %v", a.PushEndpoint, err)
			continue
		}
		ep.Close()
	}
}
