package faultproxy

import (
	"bufio"
	"errors"
	"net"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// echoServer echoes every line back and counts the bytes it received.
type echoServer struct {
	ln       net.Listener
	received atomic.Int64
	wg       sync.WaitGroup
}

func newEchoServer(t *testing.T) *echoServer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	e := &echoServer{ln: ln}
	var mu sync.Mutex
	var conns []net.Conn
	e.wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			e.wg.Go(func() {
				defer c.Close()
				r := bufio.NewReader(c)
				for {
					line, err := r.ReadString('\n')
					e.received.Add(int64(len(line)))
					if err != nil {
						return
					}
					if _, err := c.Write([]byte(line)); err != nil {
						return
					}
				}
			})
		}
	})
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
		e.wg.Wait()
	})
	return e
}

func newProxy(t *testing.T, target string) *Proxy {
	t.Helper()
	p, err := Listen("127.0.0.1:0", target)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

// roundTrip sends line through c and returns what came back, or the
// error, within a second.
func roundTrip(c net.Conn, r *bufio.Reader, line string) (string, error) {
	c.SetDeadline(time.Now().Add(time.Second))
	if _, err := c.Write([]byte(line + "\n")); err != nil {
		return "", err
	}
	got, err := r.ReadString('\n')
	return strings.TrimSuffix(got, "\n"), err
}

func dial(t *testing.T, p *Proxy) (net.Conn, *bufio.Reader) {
	t.Helper()
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c, bufio.NewReader(c)
}

func TestProxyForwardsBothWays(t *testing.T) {
	e := newEchoServer(t)
	p := newProxy(t, e.ln.Addr().String())
	c, r := dial(t, p)
	for _, line := range []string{"one", "two", strings.Repeat("x", 100<<10)} {
		if got, err := roundTrip(c, r, line); err != nil || got != line {
			t.Fatalf("round trip of %d bytes: got %d bytes, %v", len(line), len(got), err)
		}
	}
	if p.Target() != e.ln.Addr().String() {
		t.Errorf("Target() = %q, want %q", p.Target(), e.ln.Addr())
	}
}

func TestCutClosesAndRefusesUntilHeal(t *testing.T) {
	e := newEchoServer(t)
	p := newProxy(t, e.ln.Addr().String())
	open, r := dial(t, p)
	if _, err := roundTrip(open, r, "before"); err != nil {
		t.Fatal(err)
	}

	p.Cut()
	if got, err := roundTrip(open, r, "during"); err == nil {
		t.Errorf("an open connection carried %q after Cut", got)
	} else if errors.Is(err, os.ErrDeadlineExceeded) {
		t.Errorf("an open connection hung after Cut instead of closing: %v", err)
	}
	// The proxy resets a new connection at once: the reset may reach the
	// dialer before the handshake completes (the dial fails) or after
	// (the first round trip fails). Either way it is refused.
	if fresh, err := net.Dial("tcp", p.Addr()); err == nil {
		defer fresh.Close()
		if got, err := roundTrip(fresh, bufio.NewReader(fresh), "new"); err == nil {
			t.Errorf("a new connection carried %q while cut", got)
		} else if errors.Is(err, os.ErrDeadlineExceeded) {
			t.Errorf("a new connection hung while cut instead of being refused: %v", err)
		}
	}

	p.Heal()
	healed, hr := dial(t, p)
	if got, err := roundTrip(healed, hr, "after"); err != nil || got != "after" {
		t.Errorf("after Heal: got %q, %v", got, err)
	}
}

func TestBlackholeDropsSilentlyAndHealClosesTheBrokenConnections(t *testing.T) {
	e := newEchoServer(t)
	p := newProxy(t, e.ln.Addr().String())
	open, r := dial(t, p)
	if _, err := roundTrip(open, r, "before"); err != nil {
		t.Fatal(err)
	}
	before := e.received.Load()

	p.Blackhole()
	// Nothing comes back, and the connection is not closed either: the
	// read runs into its deadline.
	if got, err := roundTrip(open, r, "lost"); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Errorf("during a blackhole an open connection returned %q, %v; want a timeout", got, err)
	}
	late, lr := dial(t, p)
	if got, err := roundTrip(late, lr, "lost too"); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Errorf("during a blackhole a new connection returned %q, %v; want a timeout", got, err)
	}
	if got := e.received.Load(); got != before {
		t.Errorf("the target received %d bytes during the blackhole", got-before)
	}

	p.Heal()
	for name, c := range map[string]net.Conn{"open": open, "accepted during the blackhole": late} {
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		if _, err := c.Read(make([]byte, 1)); err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
			t.Errorf("the %s connection, which lost bytes, is not closed by Heal: %v", name, err)
		}
	}
	healed, hr := dial(t, p)
	if got, err := roundTrip(healed, hr, "after"); err != nil || got != "after" {
		t.Errorf("after Heal: got %q, %v", got, err)
	}
}

func TestListenRefusesBadAddresses(t *testing.T) {
	for _, tc := range []struct{ addr, target, want string }{
		{"0.0.0.0:0", "127.0.0.1:1", "not a loopback IP"},
		{"localhost:0", "127.0.0.1:1", "not a loopback IP"},
		{"127.0.0.1", "127.0.0.1:1", "not host:port"},
		{"127.0.0.1:0", "127.0.0.1", "target"},
	} {
		p, err := Listen(tc.addr, tc.target)
		if err == nil {
			p.Close()
			t.Errorf("Listen(%q, %q) succeeded", tc.addr, tc.target)
			continue
		}
		if !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Listen(%q, %q): %v, want it to say %q", tc.addr, tc.target, err, tc.want)
		}
	}
}

func TestCloseEndsConnectionsAndListening(t *testing.T) {
	e := newEchoServer(t)
	p, err := Listen("127.0.0.1:0", e.ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	c, r := dial(t, p)
	if _, err := roundTrip(c, r, "hello"); err != nil {
		t.Fatal(err)
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := roundTrip(c, r, "after close"); err == nil {
		t.Error("a connection carried data after Close")
	}
	if c2, err := net.DialTimeout("tcp", p.Addr(), time.Second); err == nil {
		c2.Close()
		t.Error("the proxy still accepts connections after Close")
	}
}
