package testkit

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"
)

// NATS is a nats-server subprocess on loopback ports, with JetStream and
// an HTTP monitoring port.
type NATS struct {
	t       testing.TB
	port    int
	monitor int
	args    []string
	logFile string
	proc    *process
}

// natsStartTimeout bounds a nats-server's start, usually a few
// milliseconds.
const natsStartTimeout = 10 * time.Second

// StartNATS starts a nats-server with JetStream (its store in a temporary
// directory) and stops it when the test ends.
func StartNATS(t testing.TB) *NATS {
	t.Helper()
	bin := natsServerBinary(t)
	dir := t.TempDir()
	s := &NATS{t: t, port: FreePort(t), monitor: FreePort(t), logFile: filepath.Join(dir, "nats-server.log")}
	s.args = []string{bin, "-a", "127.0.0.1", "-p", strconv.Itoa(s.port), "-m", strconv.Itoa(s.monitor),
		"-js", "-sd", filepath.Join(dir, "jetstream")}
	s.Start()
	t.Cleanup(s.Stop)
	return s
}

func natsServerBinary(t testing.TB) string {
	t.Helper()
	if p, err := exec.LookPath("nats-server"); err == nil {
		return p
	}
	for _, p := range []string{"/usr/sbin/nats-server", "/usr/bin/nats-server"} {
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	t.Fatal("nats-server not found: install it with scripts/install-test-deps.sh (Debian package nats-server; make test runs the script)")
	return ""
}

// URL is the client URL, nats://127.0.0.1:<port>.
func (s *NATS) URL() string { return "nats://" + s.Addr() }

// Addr is the client address, 127.0.0.1:<port>.
func (s *NATS) Addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(s.port)) }

// MonitorURL is the base URL of the HTTP monitoring endpoints (/varz…).
func (s *NATS) MonitorURL() string { return fmt.Sprintf("http://127.0.0.1:%d", s.monitor) }

// Start runs the server (again, after Stop: same ports, same store) and
// waits until it accepts connections.
func (s *NATS) Start() {
	s.t.Helper()
	p, err := startProcess("nats-server", exec.Command(s.args[0], s.args[1:]...), s.logFile)
	if err != nil {
		s.t.Fatal(err)
	}
	s.proc = p
	err = p.waitReady(natsStartTimeout, func() error {
		c, err := net.DialTimeout("tcp", s.Addr(), time.Second)
		if err == nil {
			c.Close()
		}
		return err
	})
	if err != nil {
		s.t.Fatal(err)
	}
}

// Stop terminates the server, killing it if it does not exit within
// five seconds. Stopping a stopped server does nothing.
func (s *NATS) Stop() { s.proc.stop(5 * time.Second) }

// Log returns what the server logged.
func (s *NATS) Log() string { return fileTail(s.logFile, 1<<20) }
