package main

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"

	"herald/internal/auth"
	"herald/internal/endpoint"
	"herald/internal/tlsconfig"
)

// security is what serve protects its port with: the tokens callers
// present and the TLS certificate, both reloaded on SIGHUP, and, in a
// cluster, the CA that signs the nodes' certificates.
type security struct {
	tokensFile string
	tokens     *auth.Store // nil: no tokens, open on loopback only
	cert       *tlsconfig.Reloader
	tls        *tls.Config // nil: plain HTTP
	// peerTLS is what the node dials its peers with (its certificate,
	// verified against the peer CA): nil without --peer-ca-file, when the
	// node-to-node traffic is unauthenticated.
	peerTLS *tls.Config
	log     *slog.Logger
}

// newSecurity loads the tokens and the certificate cfg names, and refuses
// to run open anywhere but on a loopback address: without tokens, anyone
// who reaches the port could create, delete and read every topic.
func newSecurity(cfg serveConfig, addr net.Addr, log *slog.Logger) (*security, error) {
	s := &security{tokensFile: cfg.TokensFile, log: log}
	if cfg.TokensFile != "" {
		tokens, err := auth.ReadFile(cfg.TokensFile)
		if err != nil {
			return nil, fmt.Errorf("%w; create tokens with herald token create --tokens-file %s", err, cfg.TokensFile)
		}
		s.tokens = auth.NewStore(tokens)
	}
	if s.tokens == nil && !isLoopback(addr) {
		if !cfg.InsecureNoAuth {
			return nil, fmt.Errorf("refusing to listen on %s without tokens: anyone who reaches it could create, delete and read every topic; "+
				"configure tokens (herald token create --tokens-file FILE, then --tokens-file FILE), or listen on a loopback address (--listen 127.0.0.1:7600), "+
				"or pass --insecure-no-auth to run open on purpose", addr)
		}
		log.Warn("serving WITHOUT authentication on a non-loopback address (--insecure-no-auth): anyone who reaches it can administer every topic", "listen", addr.String())
	}
	if cfg.PeerCAFile != "" && cfg.TLSCertFile == "" && cfg.TLSKeyFile == "" {
		return nil, errors.New("--peer-ca-file needs --tls-cert-file and --tls-key-file: the node's certificate, signed by that CA, is the one it serves and presents to its peers")
	}
	if cfg.TLSCertFile != "" || cfg.TLSKeyFile != "" {
		r, err := tlsconfig.NewReloader(cfg.TLSCertFile, cfg.TLSKeyFile, log)
		if err != nil {
			return nil, err
		}
		if err := s.useCertificate(r, cfg.PeerCAFile); err != nil {
			return nil, err
		}
	}
	return s, nil
}

// useCertificate serves r's certificate and, with peerCAFile, presents it
// to the peers, verifying theirs against that CA. API clients share the
// port and have no certificate, so the server verifies a client's only if
// given; the transport refuses peers' requests that gave none.
func (s *security) useCertificate(r *tlsconfig.Reloader, peerCAFile string) error {
	var err error
	s.cert = r
	if peerCAFile == "" {
		s.tls, err = tlsconfig.Server(r, "")
		return err
	}
	if s.tls, err = tlsconfig.SharedServer(r, peerCAFile); err != nil {
		return fmt.Errorf("--peer-ca-file: %w", err)
	}
	if s.peerTLS, err = tlsconfig.Client(r, peerCAFile); err != nil {
		return fmt.Errorf("--peer-ca-file: %w", err)
	}
	return nil
}

// peerScheme is the scheme of the peers' base URLs: a node with TLS
// serves only TLS, so its peers must dial it so.
func (s *security) peerScheme() string {
	if s.tls != nil {
		return "https"
	}
	return "http"
}

// checkCluster refuses to run a cluster node whose node-to-node traffic
// anyone who reaches addr could join: without mutual TLS between the
// nodes, it must listen on loopback or be told the network is trusted.
// A node with TLS but no peer CA could not be dialed by its peers at all.
func (s *security) checkCluster(addr net.Addr, insecureNoAuth bool) error {
	if s.tls != nil && s.peerTLS == nil {
		return errors.New("a cluster node with TLS needs --peer-ca-file, the CA that signs the nodes' certificates: its peers dial it over TLS and must prove they are nodes with a certificate that CA signed")
	}
	if s.peerTLS == nil && !isLoopback(addr) && !insecureNoAuth {
		return fmt.Errorf("a cluster node listening on %s, not a loopback address: without mutual TLS the node-to-node traffic is not authenticated (tokens do not cover it), "+
			"so anyone who reaches the port could speak for a node; give every node --tls-cert-file, --tls-key-file and --peer-ca-file (see docs/cluster.md), "+
			"or run the cluster on loopback, or on a trusted network with --insecure-no-auth to say so", addr)
	}
	return nil
}

// isLoopback reports whether addr is a loopback address (not, say,
// 0.0.0.0, which is every address).
func isLoopback(addr net.Addr) bool {
	tcp, ok := addr.(*net.TCPAddr)
	return ok && tcp.IP.IsLoopback()
}

// reload loads the tokens file and the certificate again. What cannot be
// loaded stays as it was, and is logged.
func (s *security) reload() {
	if s.tokens != nil {
		if tokens, err := auth.ReadFile(s.tokensFile); err != nil {
			s.log.Error("SIGHUP: the tokens file cannot be loaded; the previous tokens stay in force", "err", err)
		} else {
			s.tokens.Replace(tokens)
			s.log.Info("SIGHUP: tokens reloaded", "tokens", len(tokens))
		}
	}
	if s.cert != nil {
		if err := s.cert.Reload(); err != nil {
			s.log.Error("SIGHUP: the TLS certificate cannot be loaded; the previous one stays in use", "err", err)
		} else {
			s.log.Info("SIGHUP: TLS certificate reloaded")
		}
	}
}

// reloadOnHangup reloads s at every SIGHUP until the returned stop is
// called, which waits for the goroutine to end.
func (s *security) reloadOnHangup() (stop func()) {
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			select {
			case <-ctx.Done():
				return
			case <-hup:
				s.reload()
			}
		}
	})
	return func() {
		signal.Stop(hup)
		cancel()
		wg.Wait()
	}
}

// pushGuard is the node's push endpoint guard configuration from cfg.
func pushGuard(cfg serveConfig) endpoint.GuardConfig {
	var allow []string
	for a := range strings.SplitSeq(cfg.PushAllow, ",") {
		if a = strings.TrimSpace(a); a != "" {
			allow = append(allow, a)
		}
	}
	return endpoint.GuardConfig{Allow: allow, CADir: cfg.PushCADir}
}

// runUntilStopped runs run in a goroutine until the returned stop is
// called; stop waits for it to return, and may be called more than once.
func runUntilStopped(run func(context.Context)) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { run(ctx) })
	return sync.OnceFunc(func() {
		cancel()
		wg.Wait()
	})
}
