package testkit

import (
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
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

// freePort returns a port below the kernel's range of ephemeral ports,
// if it can find one nothing listens on. A port from that range (what
// listening on port 0 gives) can be taken, before the test listens on it,
// by any connection a process opens meanwhile, as the local port the
// kernel picks for it; a test that holds addresses while its nodes dial
// each other lost its port that way. Below the range only a listener can
// take it.
//
// It never returns a port twice in a process: a test picks the addresses
// of all its nodes before any listens, so a free port could otherwise be
// picked twice and the second node find it taken by the first.
func freePort() (int, error) {
	low := ephemeralLow()
	for range 100 {
		p := 10000 + rand.IntN(max(1, low-10000))
		if _, taken := handedOut.LoadOrStore(p, true); taken {
			continue
		}
		if l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p))); err == nil {
			l.Close()
			return p, nil
		}
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// handedOut holds the ports freePort returned in this process. Ports are
// the process's (the machine's) to share, not a test's: one set for all.
var handedOut sync.Map

// ephemeralLow returns the lowest ephemeral port of the kernel (Linux's
// ip_local_port_range), or 32768, its default, if it cannot tell.
func ephemeralLow() int {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 32768
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return 32768
	}
	low, err := strconv.Atoi(f[0])
	if err != nil || low <= 10000 {
		return 32768
	}
	return low
}
