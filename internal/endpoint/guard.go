package endpoint

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"herald/internal/topic"
)

// A push endpoint is an address an API caller chooses and the server
// connects to, so without a guard anyone who may create a topic can make
// herald reach what only herald can reach: the cloud metadata service, an
// admin port on loopback, a database on the private network. The Guard is
// the one place that decides what push endpoints may reach. It is asked
// twice: when an endpoint is set (Check), for a prompt error, and by every
// connection an endpoint opens (DialContext), after DNS resolution, so
// that a name that resolves to an allowed address when it is set and to a
// refused one later (DNS rebinding) cannot slip through. It also confines
// the files an API caller can make the server read (tls_ca_file) to one
// directory.

// ErrRefused marks a push endpoint, or a connection of one, that the Guard
// refuses.
var ErrRefused = errors.New("refused by the push endpoint guard")

// Resolver looks up the addresses of a host name. *net.Resolver is one;
// tests give their own, so that no test depends on real DNS.
type Resolver interface {
	LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error)
}

// GuardConfig says what push endpoints may reach beyond the public
// internet.
type GuardConfig struct {
	// Allow lists what push endpoints may reach although it is a loopback,
	// private, link-local, multicast or metadata address: CIDRs
	// (10.1.0.0/16, 127.0.0.1/32) and host names (hooks.internal), whose
	// every address is then allowed.
	Allow []string
	// CADir is the directory tls_ca_file must name a file in. Empty: no
	// topic may name a CA file.
	CADir string
	// Resolver resolves host names; nil means net.DefaultResolver.
	Resolver Resolver
}

// Guard checks push endpoints against a GuardConfig and dials their
// connections. It is safe for concurrent use.
type Guard struct {
	prefixes []netip.Prefix
	names    []string // lower case, without a trailing dot
	caDir    string
	resolver Resolver
	dialer   net.Dialer
}

// NewGuard returns the guard of cfg, or an error naming an entry of
// cfg.Allow that is neither a CIDR nor a host name.
func NewGuard(cfg GuardConfig) (*Guard, error) {
	g := &Guard{resolver: cfg.Resolver, dialer: net.Dialer{KeepAlive: 30 * time.Second}}
	if g.resolver == nil {
		g.resolver = net.DefaultResolver
	}
	for _, a := range cfg.Allow {
		a = strings.TrimSpace(a)
		if strings.Contains(a, "/") {
			p, err := netip.ParsePrefix(a)
			if err != nil {
				return nil, fmt.Errorf("push allow-list entry %q is not a CIDR: %w; write it as 10.0.0.0/8 or fd00::/8", a, err)
			}
			g.prefixes = append(g.prefixes, p.Masked())
			continue
		}
		if ip, err := netip.ParseAddr(a); err == nil {
			g.prefixes = append(g.prefixes, netip.PrefixFrom(ip.Unmap(), ip.Unmap().BitLen()))
			continue
		}
		if !isHostName(a) {
			return nil, fmt.Errorf("push allow-list entry %q is neither a CIDR (10.0.0.0/8), an address nor a host name (hooks.internal)", a)
		}
		g.names = append(g.names, canonicalName(a))
	}
	if cfg.CADir != "" {
		dir, err := filepath.Abs(cfg.CADir)
		if err != nil {
			return nil, fmt.Errorf("push CA directory %s: %w", cfg.CADir, err)
		}
		g.caDir = dir
	}
	return g, nil
}

// isHostName reports whether s looks like a DNS name: labels of letters,
// digits, hyphens and underscores separated by dots.
func isHostName(s string) bool {
	s = strings.TrimSuffix(s, ".")
	if s == "" || len(s) > 253 {
		return false
	}
	for label := range strings.SplitSeq(s, ".") {
		if label == "" || len(label) > 63 {
			return false
		}
		for _, c := range label {
			if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
				return false
			}
		}
	}
	return true
}

func canonicalName(host string) string {
	return strings.ToLower(strings.TrimSuffix(host, "."))
}

// metadata are the addresses of cloud metadata services that no other
// rule refuses (169.254.169.254 is link-local, fd00:ec2::254 private).
var metadata = []netip.Prefix{
	netip.MustParsePrefix("100.100.100.200/32"), // Alibaba Cloud
	netip.MustParsePrefix("168.63.129.16/32"),   // Azure's wire server
}

// reserved are ranges no push endpoint lives in: "this network",
// carrier-grade NAT, benchmarking, IPv4's reserved block and broadcast.
var reserved = []netip.Prefix{
	netip.MustParsePrefix("0.0.0.0/8"),
	netip.MustParsePrefix("100.64.0.0/10"),
	netip.MustParsePrefix("198.18.0.0/15"),
	netip.MustParsePrefix("240.0.0.0/4"),
}

// refusal says why ip may not be reached, or "" if it may.
func refusal(ip netip.Addr) string {
	ip = ip.Unmap()
	in := func(ps []netip.Prefix) bool {
		return slices.ContainsFunc(ps, func(p netip.Prefix) bool { return p.Contains(ip) })
	}
	switch {
	case ip == netip.MustParseAddr("169.254.169.254") || in(metadata):
		return "a cloud metadata service address"
	case ip.IsLoopback():
		return "a loopback address"
	case ip.IsUnspecified():
		return "the unspecified address"
	case ip.IsPrivate():
		return "a private address"
	case ip.IsLinkLocalUnicast():
		return "a link-local address"
	case ip.IsMulticast():
		return "a multicast address"
	case in(reserved):
		return "a reserved address"
	}
	return ""
}

// checkIP returns an error if host, which resolved to ip, may not be
// reached.
func (g *Guard) checkIP(host string, ip netip.Addr) error {
	why := refusal(ip)
	if why == "" || slices.ContainsFunc(g.prefixes, func(p netip.Prefix) bool { return p.Contains(ip.Unmap()) }) {
		return nil
	}
	shown := ip.String()
	if host != ip.String() {
		shown = fmt.Sprintf("%s (%s)", host, ip)
	}
	return fmt.Errorf("%w: %s is %s; herald does not push to loopback, private, link-local, multicast or metadata addresses unless the server's push allow-list (--push-allow) names the address's CIDR or the host name",
		ErrRefused, shown, why)
}

func (g *Guard) allowedName(host string) bool {
	return slices.Contains(g.names, canonicalName(host))
}

// resolve returns the addresses of host: itself if it is an address.
func (g *Guard) resolve(ctx context.Context, network, host string) ([]netip.Addr, error) {
	if ip, err := netip.ParseAddr(strings.Trim(host, "[]")); err == nil {
		return []netip.Addr{ip}, nil
	}
	ipNet := "ip"
	switch network {
	case "tcp4", "udp4":
		ipNet = "ip4"
	case "tcp6", "udp6":
		ipNet = "ip6"
	}
	ips, err := g.resolver.LookupNetIP(ctx, ipNet, host)
	if err != nil {
		return nil, fmt.Errorf("resolve %s: %w", host, err)
	}
	if len(ips) == 0 {
		return nil, fmt.Errorf("resolve %s: no addresses", host)
	}
	return ips, nil
}

// Check checks a push endpoint URI when it is set: every host it names
// must resolve, and to addresses the guard allows. A tls_ca_file must be
// in the CA directory.
func (g *Guard) Check(ctx context.Context, a topic.Attributes) error {
	if a.TLSCAFile != "" {
		if _, err := g.caPath(a.TLSCAFile); err != nil {
			return err
		}
	}
	if a.PushEndpoint == "" {
		return nil
	}
	hosts, err := endpointHosts(a.PushEndpoint)
	if err != nil {
		return err
	}
	var errs []error
	for _, host := range hosts {
		if g.allowedName(host) {
			continue
		}
		ips, err := g.resolve(ctx, "tcp", host)
		if err != nil {
			errs = append(errs, fmt.Errorf("push_endpoint %s: %w: %w; herald checks where a push endpoint points when it is set, so use a host name that resolves", topic.RedactEndpoint(a.PushEndpoint), ErrRefused, err))
			continue
		}
		for _, ip := range ips {
			if err := g.checkIP(host, ip); err != nil {
				errs = append(errs, fmt.Errorf("push_endpoint %s: %w", topic.RedactEndpoint(a.PushEndpoint), err))
				break
			}
		}
	}
	return errors.Join(errs...)
}

// endpointHosts returns the hosts a push endpoint URI names: one, or for
// kafka://, one per broker.
func endpointHosts(uri string) ([]string, error) {
	u, err := topic.ParseEndpoint(uri)
	if err != nil {
		return nil, fmt.Errorf("push_endpoint %s: %w", topic.RedactEndpoint(uri), err)
	}
	if s, _ := topic.LookupScheme(u.Scheme); s.Protocol != topic.ProtocolKafka {
		return []string{u.Hostname()}, nil
	}
	var hosts []string
	for b := range strings.SplitSeq(u.Host, ",") {
		host, _, err := net.SplitHostPort(b)
		if err != nil {
			host = b
		}
		hosts = append(hosts, strings.Trim(host, "[]"))
	}
	return hosts, nil
}

// DialContext connects to addr (host:port) as net.Dialer.DialContext
// does, but only to addresses the guard allows: it resolves the host
// itself and dials the allowed addresses it found, so the address checked
// is the address connected to.
func (g *Guard) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, err
	}
	if g.allowedName(host) {
		return g.dialer.DialContext(ctx, network, addr)
	}
	ips, err := g.resolve(ctx, network, host)
	if err != nil {
		return nil, err
	}
	var errs []error
	for _, ip := range ips {
		if err := g.checkIP(host, ip); err != nil {
			errs = append(errs, err)
			continue
		}
		conn, err := g.dialer.DialContext(ctx, network, net.JoinHostPort(ip.String(), port))
		if err == nil {
			return conn, nil
		}
		errs = append(errs, err)
	}
	return nil, errors.Join(errs...)
}

// Dialer returns g as a dialer without a context, for client libraries
// that take one (NATS), each connection limited to timeout.
func (g *Guard) Dialer(timeout time.Duration) interface {
	Dial(network, addr string) (net.Conn, error)
} {
	return timeoutDialer{g, timeout}
}

type timeoutDialer struct {
	g       *Guard
	timeout time.Duration
}

func (d timeoutDialer) Dial(network, addr string) (net.Conn, error) {
	ctx, cancel := context.WithTimeout(context.Background(), d.timeout)
	defer cancel()
	return d.g.DialContext(ctx, network, addr)
}

// caPath returns where tls_ca_file name is relative to the CA directory,
// or an error if it is outside it.
func (g *Guard) caPath(name string) (string, error) {
	if g.caDir == "" {
		return "", fmt.Errorf("%w: tls_ca_file %s: this server has no CA directory, so no topic may name a CA file; ask its operator to set --push-ca-dir and to put the CA file there", ErrRefused, name)
	}
	rel, err := filepath.Rel(g.caDir, filepath.Clean(name))
	if err != nil || !filepath.IsLocal(rel) {
		return "", fmt.Errorf("%w: tls_ca_file %s is outside the server's CA directory %s; name a file in that directory", ErrRefused, name, g.caDir)
	}
	return rel, nil
}

// readCAFile reads a tls_ca_file through the CA directory, so that no
// symbolic link or ".." leads out of it.
func (g *Guard) readCAFile(name string) ([]byte, error) {
	rel, err := g.caPath(name)
	if err != nil {
		return nil, err
	}
	root, err := os.OpenRoot(g.caDir)
	if err != nil {
		return nil, fmt.Errorf("tls_ca_file %s: the CA directory cannot be opened: %w", name, err)
	}
	defer root.Close()
	return root.ReadFile(rel)
}
