package nats

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"
)

// server is a nats-server subprocess on a loopback port, the Debian
// package's binary (scripts/install-test-deps.sh installs it).
type server struct {
	t       *testing.T
	port    int
	args    []string
	logFile string
	cmd     *exec.Cmd
	exited  chan struct{}
}

// startServer starts a nats-server, with JetStream if jetStream is set,
// and stops it when the test ends.
func startServer(t *testing.T, jetStream bool) *server {
	t.Helper()
	bin := natsServerBinary(t)
	dir := t.TempDir()
	s := &server{t: t, port: freePort(t), logFile: filepath.Join(dir, "nats-server.log")}
	s.args = []string{bin, "-a", "127.0.0.1", "-p", strconv.Itoa(s.port), "-l", s.logFile}
	if jetStream {
		s.args = append(s.args, "-js", "-sd", filepath.Join(dir, "jetstream"))
	}
	s.start()
	t.Cleanup(s.stop)
	return s
}

func natsServerBinary(t *testing.T) string {
	if p, err := exec.LookPath("nats-server"); err == nil {
		return p
	}
	for _, p := range []string{"/usr/sbin/nats-server", "/usr/bin/nats-server"} {
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	t.Fatal("nats-server not found: install it with scripts/install-test-deps.sh (Debian package nats-server)")
	return ""
}

// freePort returns a loopback TCP port that nothing listens on.
func freePort(t *testing.T) int {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

func (s *server) url() string { return fmt.Sprintf("nats://127.0.0.1:%d", s.port) }

// start runs the server and waits until it accepts connections.
func (s *server) start() {
	s.t.Helper()
	s.cmd = exec.Command(s.args[0], s.args[1:]...)
	if err := s.cmd.Start(); err != nil {
		s.t.Fatalf("start nats-server: %v", err)
	}
	s.exited = make(chan struct{})
	go func() {
		_ = s.cmd.Wait()
		close(s.exited)
	}()
	deadline := time.Now().Add(10 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(s.port)), time.Second)
		if err == nil {
			c.Close()
			return
		}
		select {
		case <-s.exited:
			s.t.Fatalf("nats-server exited at startup (%v); log:\n%s", s.cmd.ProcessState, s.log())
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("nats-server does not accept connections on port %d after 10s; log:\n%s", s.port, s.log())
		}
	}
}

// stop terminates the server, killing it if it does not exit promptly.
func (s *server) stop() {
	select {
	case <-s.exited:
		return
	default:
	}
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.exited:
	case <-time.After(5 * time.Second):
		_ = s.cmd.Process.Kill()
		<-s.exited
	}
}

func (s *server) log() string {
	b, err := os.ReadFile(s.logFile)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return err.Error()
	}
	return string(b)
}
