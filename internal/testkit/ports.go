package testkit

import (
	"fmt"
	"net"
	"strconv"
	"testing"
)

// FreePort returns a loopback TCP port that nothing listened on a moment
// ago. Another process may take it before the caller binds it; tests
// accept that small risk to be able to pass a port to a subprocess.
func FreePort(t testing.TB) int {
	t.Helper()
	p, err := freePort()
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// FreeAddr returns 127.0.0.1:<FreePort>: an address to listen on, or one
// that refuses connections.
func FreeAddr(t testing.TB) string {
	t.Helper()
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(FreePort(t)))
}

// FreeLoopbackAddr is FreeAddr for code outside a test (the benchmark
// harness, which starts servers of its own).
func FreeLoopbackAddr() (string, error) {
	p, err := freePort()
	if err != nil {
		return "", fmt.Errorf("find a free loopback port: %w", err)
	}
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(p)), nil
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}
