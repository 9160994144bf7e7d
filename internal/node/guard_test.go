package node

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"herald/internal/endpoint"
)

// flipResolver answers name with one address until flip, and with another
// after: a DNS name rebound between the check and the connection.
type flipResolver struct {
	mu      sync.Mutex
	answers map[string]string
}

func (r *flipResolver) set(name, addr string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.answers[name] = addr
}

func (r *flipResolver) LookupNetIP(_ context.Context, _, host string) ([]netip.Addr, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	a, ok := r.answers[host]
	if !ok {
		return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
	}
	return []netip.Addr{netip.MustParseAddr(a)}, nil
}

// TestPushEndpointGuardAtCreateAndSet: a push endpoint pointing at the
// metadata service, a private or loopback address, directly or through a
// name, is refused when a topic is created or changed, and nothing changes.
func TestPushEndpointGuardAtCreateAndSet(t *testing.T) {
	res := &flipResolver{answers: map[string]string{"metadata.test": "169.254.169.254", "hooks.test": "93.184.216.34", "intranet.test": "10.0.0.7"}}
	cfg := testConfig(t.TempDir())
	cfg.PushGuard = endpoint.GuardConfig{Resolver: res}
	n := openNode(t, cfg)
	ctx := context.Background()
	for _, ep := range []string{"http://169.254.169.254/latest/meta-data", "http://metadata.test/latest/meta-data", "http://intranet.test/hook", "http://127.0.0.1:9000/hook"} {
		_, err := n.CreateTopic(ctx, "hooks", map[string]string{"push_endpoint": ep})
		if !errors.Is(err, ErrInvalid) || !errors.Is(err, endpoint.ErrRefused) {
			t.Errorf("create with push_endpoint %s: %v, want ErrInvalid from the guard", ep, err)
		}
	}
	if topics := n.ListTopics(); len(topics) != 0 {
		t.Fatalf("refused creations left topics %v", topics)
	}
	mustCreate(t, n, "hooks", map[string]string{"push_endpoint": "http://hooks.test/events"})
	_, err := n.SetTopicAttributes(ctx, "hooks", map[string]string{"push_endpoint": "http://metadata.test/latest"})
	if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "cloud metadata service") {
		t.Errorf("set push_endpoint to the metadata service: %v", err)
	}
	_, err = n.SetTopicAttributes(ctx, "hooks", map[string]string{"tls_ca_file": "/etc/shadow", "push_endpoint": "https://hooks.test/events"})
	if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "--push-ca-dir") {
		t.Errorf("set tls_ca_file without a CA directory: %v", err)
	}
	if got, _ := n.GetTopic("hooks"); got.Attributes["push_endpoint"] != "http://hooks.test/events" || got.Attributes["tls_ca_file"] != "" {
		t.Errorf("refused changes changed the topic: %v", got.Attributes)
	}
}

// TestPushEndpointGuardAtConnect: a name that passed the check and then
// resolves to loopback is refused by the dispatcher's connections; the
// event stays queued, counted as a retry, and never reaches the address.
func TestPushEndpointGuardAtConnect(t *testing.T) {
	var hits atomic.Int64
	rcv := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { hits.Add(1) }))
	defer rcv.Close()
	_, port, _ := net.SplitHostPort(rcv.Listener.Addr().String())

	res := &flipResolver{answers: map[string]string{"rebind.test": "93.184.216.34"}}
	cfg := testConfig(t.TempDir())
	cfg.PushGuard = endpoint.GuardConfig{Resolver: res}
	n := openNode(t, cfg)
	mustCreate(t, n, "hooks", map[string]string{"shards": "1", "retry_sleep_duration": "0",
		"push_endpoint": fmt.Sprintf("http://rebind.test:%s/events", port)})
	res.set("rebind.test", "127.0.0.1")
	publish(t, n, "hooks", ev("k", "x"))

	deadline := time.Now().Add(30 * time.Second)
	for {
		st, err := n.TopicStats(context.Background(), "hooks")
		if err != nil {
			t.Fatal(err)
		}
		if st.Total.Stats.Retried >= 2 {
			if st.Total.Stats.Events != 1 || st.Total.Stats.Delivered != 0 {
				t.Errorf("stats %+v, want the event still queued and not delivered", st.Total.Stats)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no failed attempt recorded: %+v", st.Total.Stats)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if h := hits.Load(); h != 0 {
		t.Errorf("the loopback receiver got %d requests through the guard", h)
	}
}
