// Package faultproxy is a TCP proxy that tests put in front of a server
// to break the network between it and its clients on demand: Cut refuses
// connections, as a crashed host or a closed port would; Blackhole
// swallows traffic without a word, as a partition does; Heal forwards
// again. The fault suite of herald's cluster puts one proxy on each
// ordered pair of nodes, so that it can cut exactly the links it wants.
//
// A Proxy listens on loopback only: test traffic never leaves the
// machine.
package faultproxy

import (
	"fmt"
	"net"
	"sync"
	"time"
)

// state is what a Proxy does with traffic.
type state int

const (
	forwarding state = iota
	cut              // refuse: close connections at once
	blackholed       // accept and read, forward nothing, answer nothing
)

// Proxy forwards the TCP connections it accepts to a target address.
// Its methods are safe for concurrent use.
type Proxy struct {
	ln     net.Listener
	target string

	mu     sync.Mutex
	state  state
	conns  map[*link]struct{}
	closed bool

	wg sync.WaitGroup // the accept loop and every link's copiers
}

// link is one proxied connection: the client's side and the target's.
type link struct {
	client, server net.Conn
	// lostBytes is set, under Proxy.mu, on a link that dropped bytes or
	// has no target, having been accepted during a blackhole: Heal closes
	// it rather than let it carry a broken stream on.
	lostBytes bool
}

// Listen starts a proxy on addr, which must be a loopback address
// ("127.0.0.1:0" picks a free port), forwarding to target.
func Listen(addr, target string) (*Proxy, error) {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, fmt.Errorf("faultproxy: listen address %q is not host:port: %w", addr, err)
	}
	if ip := net.ParseIP(host); ip == nil || !ip.IsLoopback() {
		return nil, fmt.Errorf("faultproxy: listen address %q is not a loopback IP; use 127.0.0.1:0", addr)
	}
	if _, _, err := net.SplitHostPort(target); err != nil {
		return nil, fmt.Errorf("faultproxy: target %q is not host:port: %w", target, err)
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("faultproxy: %w", err)
	}
	p := &Proxy{ln: ln, target: target, conns: make(map[*link]struct{})}
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// Addr is the address the proxy listens on.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Target is the address the proxy forwards to.
func (p *Proxy) Target() string { return p.target }

// Cut closes every open connection and refuses new ones (they are
// accepted and closed at once with a reset) until Heal.
func (p *Proxy) Cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.state = cut
	for l := range p.conns {
		l.close()
	}
}

// Blackhole keeps every connection open but forwards nothing from now
// on, in either direction, and answers nothing: bytes sent are read and
// dropped, as by a network that lost them. New connections are accepted
// and treated alike. Heal closes the connections that lost bytes.
func (p *Proxy) Blackhole() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.state = blackholed
}

// Heal forwards again. Connections that lost bytes to a blackhole are
// closed (their streams are broken); the peers reconnect.
func (p *Proxy) Heal() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.state = forwarding
	for l := range p.conns {
		if l.lostBytes {
			l.close()
		}
	}
}

// Close stops the proxy: it stops listening, closes every connection and
// waits for its goroutines.
func (p *Proxy) Close() error {
	p.mu.Lock()
	p.closed = true
	for l := range p.conns {
		l.close()
	}
	p.mu.Unlock()
	err := p.ln.Close()
	p.wg.Wait()
	return err
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return // closed
		}
		p.mu.Lock()
		st, closed := p.state, p.closed
		p.mu.Unlock()
		if closed || st == cut {
			reset(c)
			continue
		}
		p.wg.Add(1)
		go p.serve(c)
	}
}

// serve connects c to the target and copies both ways until either side
// closes.
func (p *Proxy) serve(c net.Conn) {
	defer p.wg.Done()
	l := &link{client: c}
	if !p.track(l) {
		return
	}
	defer p.untrack(l)
	if p.currentState(l) == forwarding {
		s, err := net.DialTimeout("tcp", p.target, 5*time.Second)
		if err != nil {
			return // the target is down: the client sees its connection close
		}
		p.mu.Lock()
		l.server = s
		if p.closed || p.state == cut {
			reset(s) // cut while dialling
		}
		p.mu.Unlock()
	}
	if l.server == nil { // accepted during a blackhole: swallow what comes
		p.copy(l, nil, l.client)
		return
	}
	var copiers sync.WaitGroup
	copiers.Go(func() { p.copy(l, l.server, l.client) })
	p.copy(l, l.client, l.server)
	copiers.Wait()
}

// copy forwards from src to dst while the proxy forwards, and drops what
// it reads while not. dst is nil for a connection accepted during a
// blackhole, which has no target. When src ends, copy closes the whole
// link, which ends the other direction's copy too.
func (p *Proxy) copy(l *link, dst, src net.Conn) {
	defer p.closeLink(l)
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 && p.currentState(l) == forwarding && dst != nil {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// currentState returns the proxy's state and marks l as having lost bytes
// when they are not forwarded.
func (p *Proxy) currentState(l *link) state {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.state != forwarding {
		l.lostBytes = true
	}
	return p.state
}

func (p *Proxy) track(l *link) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed || p.state == cut {
		reset(l.client)
		return false
	}
	p.conns[l] = struct{}{}
	return true
}

func (p *Proxy) untrack(l *link) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.conns, l)
	l.close()
}

func (p *Proxy) closeLink(l *link) {
	p.mu.Lock()
	defer p.mu.Unlock()
	l.close()
}

// close closes both sides of l. The caller holds Proxy.mu.
func (l *link) close() {
	reset(l.client)
	if l.server != nil {
		reset(l.server)
	}
}

// reset closes c with a TCP reset rather than an orderly close, as a
// refused or torn connection looks to its peer.
func reset(c net.Conn) {
	if tc, ok := c.(*net.TCPConn); ok {
		tc.SetLinger(0)
	}
	c.Close()
}
