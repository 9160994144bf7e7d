package framework

import (
	"context"
	"testing"
	"time"

	"herald/client"
	"herald/internal/testkit/heraldproc"
)

// StartServer starts herald serve on dataDir and addr with extra flags,
// waits until it answers and is ready, and fails t if it does not. The
// server is killed when the test ends.
func StartServer(t *testing.T, dataDir, addr string, extra ...string) *heraldproc.Server {
	t.Helper()
	s, err := TryStartServer(t, dataDir, addr, extra...)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TryStartServer is StartServer for a start that may fail: if the server
// exits first, or does not come up within a minute, the error holds its
// output.
func TryStartServer(t *testing.T, dataDir, addr string, extra ...string) (*heraldproc.Server, error) {
	t.Helper()
	return TryStartServerWith(t, nil, dataDir, addr, extra...)
}

// TryStartServerWith is TryStartServer for a server that c reaches (over
// TLS, say); it waits until c's requests are answered. A nil c is
// TryStartServer.
func TryStartServerWith(t *testing.T, c *client.Client, dataDir, addr string, extra ...string) (*heraldproc.Server, error) {
	t.Helper()
	// The tests' push receivers listen on loopback, which push endpoints
	// may reach only when allowed.
	args := append([]string{"--push-allow", "127.0.0.0/8,::1"}, extra...)
	s, err := heraldproc.Start(context.Background(), heraldproc.Config{
		Binary:  Binary(),
		DataDir: dataDir,
		Listen:  addr,
		Args:    args,
		Client:  c,
		Timeout: time.Minute,
	})
	if err != nil {
		return nil, err
	}
	t.Cleanup(s.Kill)
	return s, nil
}
