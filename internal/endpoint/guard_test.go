package endpoint

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"herald/internal/topic"
)

// testResolver answers from a table, never from real DNS. A name with
// several answers gives them in turn, one lookup after another, the last
// one from then on: what a rebinding DNS server does.
type testResolver struct {
	mu      sync.Mutex
	answers map[string][]string
	lookups map[string]int
}

func newTestResolver(answers map[string][]string) *testResolver {
	return &testResolver{answers: answers, lookups: map[string]int{}}
}

func (r *testResolver) LookupNetIP(_ context.Context, _, host string) ([]netip.Addr, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	seq, ok := r.answers[host]
	if !ok {
		return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
	}
	i := min(r.lookups[host], len(seq)-1)
	r.lookups[host]++
	return []netip.Addr{netip.MustParseAddr(seq[i])}, nil
}

func newTestGuard(t *testing.T, cfg GuardConfig) *Guard {
	t.Helper()
	g, err := NewGuard(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return g
}

func attrs(endpoint string) topic.Attributes {
	a := topic.Defaults()
	a.PushEndpoint = endpoint
	return a
}

// TestGuardRefusesAtCreate: endpoints that point, directly or through a
// name, at loopback, private, link-local, multicast or metadata addresses
// are refused when set, with a message that says why and what to do.
func TestGuardRefusesAtCreate(t *testing.T) {
	res := newTestResolver(map[string][]string{
		"metadata.test": {"169.254.169.254"},
		"private.test":  {"10.1.2.3"},
		"loop.test":     {"127.0.0.1"},
		"public.test":   {"93.184.216.34"},
	})
	g := newTestGuard(t, GuardConfig{Resolver: res})
	for _, tc := range []struct{ endpoint, why string }{
		{"http://169.254.169.254/latest/meta-data", "a cloud metadata service address"},
		{"http://metadata.test/latest/meta-data", "metadata.test (169.254.169.254) is a cloud metadata service address"},
		{"http://[fd00:ec2::254]/latest", "a private address"},
		{"http://100.100.100.200/latest", "a cloud metadata service address"},
		{"https://private.test/hook", "private.test (10.1.2.3) is a private address"},
		{"http://192.168.1.1/hook", "a private address"},
		{"http://169.254.1.1/hook", "a link-local address"},
		{"http://[fe80::1]/hook", "a link-local address"},
		{"http://127.0.0.1:9000/hook", "a loopback address"},
		{"http://[::1]:9000/hook", "a loopback address"},
		{"http://[::ffff:127.0.0.1]:9000/hook", "a loopback address"},
		{"http://loop.test:9000/hook", "loop.test (127.0.0.1) is a loopback address"},
		{"http://0.0.0.0:9000/hook", "the unspecified address"},
		{"nats://224.0.0.1:4222", "a multicast address"},
		{"amqp://u:p@10.0.0.1/vhost", "a private address"},
		{"kafka://public.test:9092,172.16.0.1:9092", "172.16.0.1 is a private address"},
	} {
		err := g.Check(context.Background(), attrs(tc.endpoint))
		if !errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), tc.why) || !strings.Contains(err.Error(), "--push-allow") {
			t.Errorf("Check(%s) = %v, want ErrRefused saying %q and naming --push-allow", tc.endpoint, err, tc.why)
		}
	}
	if err := g.Check(context.Background(), attrs("http://nowhere.test/hook")); !errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), "no such host") {
		t.Errorf("a name that does not resolve: %v", err)
	}
	for _, ok := range []string{"https://public.test/hook", "kafka://public.test:9092,93.184.216.35:9092", "http://93.184.216.34/x", ""} {
		if err := g.Check(context.Background(), attrs(ok)); err != nil {
			t.Errorf("Check(%s) = %v, want it allowed", ok, err)
		}
	}
}

// TestGuardAllowList: what the allow-list names, by CIDR, address or host
// name, is allowed; nothing else is.
func TestGuardAllowList(t *testing.T) {
	res := newTestResolver(map[string][]string{"hooks.internal": {"10.9.9.9"}, "other.internal": {"10.9.9.10"}})
	g := newTestGuard(t, GuardConfig{Resolver: res, Allow: []string{"127.0.0.0/8", "169.254.169.254", "Hooks.Internal."}})
	for _, ok := range []string{"http://127.0.0.1:1/x", "http://127.9.9.9/x", "http://169.254.169.254/x", "http://hooks.internal/x"} {
		if err := g.Check(context.Background(), attrs(ok)); err != nil {
			t.Errorf("Check(%s) = %v, want it allowed by the allow-list", ok, err)
		}
	}
	for _, refused := range []string{"http://[::1]/x", "http://169.254.169.253/x", "http://other.internal/x"} {
		if err := g.Check(context.Background(), attrs(refused)); !errors.Is(err, ErrRefused) {
			t.Errorf("Check(%s) = %v, want it refused", refused, err)
		}
	}
	for _, bad := range []string{"10.0.0.0/33", "not a name", "a..b"} {
		if _, err := NewGuard(GuardConfig{Allow: []string{bad}}); err == nil || !strings.Contains(err.Error(), bad) {
			t.Errorf("NewGuard(Allow %q) = %v, want an error naming it", bad, err)
		}
	}
}

// TestGuardRefusesAtConnect: a name that resolved to a public address when
// the endpoint was set and resolves to loopback when herald connects (DNS
// rebinding) is refused at the connection, and nothing reaches the
// server; with loopback allowed, the same name is delivered to.
func TestGuardRefusesAtConnect(t *testing.T) {
	var hits int
	var mu sync.Mutex
	srv := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {
		mu.Lock()
		hits++
		mu.Unlock()
	}))
	defer srv.Close()
	_, port, _ := net.SplitHostPort(srv.Listener.Addr().String())
	hook := fmt.Sprintf("http://rebind.test:%s/hook", port)

	res := newTestResolver(map[string][]string{"rebind.test": {"93.184.216.34", "127.0.0.1"}})
	g := newTestGuard(t, GuardConfig{Resolver: res})
	if err := g.Check(context.Background(), attrs(hook)); err != nil {
		t.Fatalf("Check while the name resolves to a public address: %v", err)
	}
	client := &http.Client{Transport: &http.Transport{DialContext: g.DialContext}}
	resp, err := client.Post(hook, "application/json", strings.NewReader("{}"))
	if err == nil {
		resp.Body.Close()
		t.Fatal("the rebound name was connected to")
	}
	if !errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), "rebind.test (127.0.0.1) is a loopback address") {
		t.Errorf("POST through the guard: %v, want ErrRefused naming the name and address", err)
	}
	// Literal addresses are checked at connect time too.
	if _, err := g.DialContext(context.Background(), "tcp", srv.Listener.Addr().String()); !errors.Is(err, ErrRefused) {
		t.Errorf("dial %s: %v, want ErrRefused", srv.Listener.Addr(), err)
	}
	mu.Lock()
	if hits != 0 {
		t.Errorf("the server got %d requests through a refusing guard", hits)
	}
	mu.Unlock()

	allowing := newTestGuard(t, GuardConfig{Resolver: res, Allow: []string{"127.0.0.0/8"}})
	client = &http.Client{Transport: &http.Transport{DialContext: allowing.DialContext}}
	resp, err = client.Post(hook, "application/json", strings.NewReader("{}"))
	if err != nil {
		t.Fatalf("POST with loopback allowed: %v", err)
	}
	resp.Body.Close()
	mu.Lock()
	if hits != 1 {
		t.Errorf("the server got %d requests, want 1", hits)
	}
	mu.Unlock()
}

// TestGuardConfinesCAFiles: tls_ca_file must be in the CA directory, and
// no ".." or symbolic link leads out of it.
func TestGuardConfinesCAFiles(t *testing.T) {
	dir := t.TempDir()
	caDir := filepath.Join(dir, "ca")
	if err := os.Mkdir(caDir, 0o755); err != nil {
		t.Fatal(err)
	}
	outside := filepath.Join(dir, "secret.pem")
	if err := os.WriteFile(outside, []byte("not for API callers"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, filepath.Join(caDir, "link.pem")); err != nil {
		t.Fatal(err)
	}
	g := newTestGuard(t, GuardConfig{CADir: caDir})
	for _, name := range []string{outside, caDir + "/../secret.pem", "/etc/passwd"} {
		a := attrs("")
		a.TLSCAFile = name
		if err := g.Check(context.Background(), a); !errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), "outside the server's CA directory") {
			t.Errorf("Check(tls_ca_file %s) = %v, want it refused as outside the CA directory", name, err)
		}
		if _, err := g.TLSConfig(name, false); !errors.Is(err, ErrRefused) {
			t.Errorf("TLSConfig(%s) = %v, want ErrRefused", name, err)
		}
	}
	link := filepath.Join(caDir, "link.pem")
	if _, err := g.TLSConfig(link, false); err == nil || strings.Contains(err.Error(), "holds no PEM") {
		t.Errorf("TLSConfig through a symbolic link out of the CA directory = %v, want it unreadable", err)
	}
	none := newTestGuard(t, GuardConfig{})
	a := attrs("")
	a.TLSCAFile = link
	if err := none.Check(context.Background(), a); !errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), "--push-ca-dir") {
		t.Errorf("without a CA directory: %v, want a refusal naming --push-ca-dir", err)
	}
}
