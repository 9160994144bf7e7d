package compare

import (
	"context"
	"fmt"

	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"herald/client"
	"herald/internal/testkit"
)

// server is a "herald serve" subprocess. Its stop ends it and joins the
// goroutine that waits for it.
type server struct {
	cmd  *exec.Cmd
	url  string
	log  *tailWriter
	done chan struct{} // closed when the process has exited
	err  error         // how it exited; set before done is closed
	once sync.Once
}

// startServer starts "bin serve" on a free loopback port with a data
// directory under dir, env added to its environment, and waits until it
// answers.
func startServer(ctx context.Context, bin, dir string, env []string, extra ...string) (*server, error) {
	addr, err := testkit.FreeLoopbackAddr()
	if err != nil {
		return nil, err
	}
	data, err := os.MkdirTemp(dir, "data-")
	if err != nil {
		return nil, fmt.Errorf("make a data directory: %w", err)
	}
	// The push comparison's receiver listens on loopback, which push
	// endpoints may reach only when allowed.
	args := append([]string{"serve", "--data-dir", data, "--listen", addr, "--log-level", "warn", "--push-allow", "127.0.0.0/8"}, extra...)
	s := &server{cmd: exec.Command(bin, args...), url: "http://" + addr, log: &tailWriter{max: 16 << 10}, done: make(chan struct{})}
	s.cmd.Env = append(os.Environ(), env...)
	s.cmd.Stdout, s.cmd.Stderr = s.log, s.log
	if err := s.cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s serve: %w", bin, err)
	}
	go func() {
		s.err = s.cmd.Wait()
		close(s.done)
	}()
	if err := s.waitReady(ctx, time.Minute); err != nil {
		s.stop()
		return nil, fmt.Errorf("herald serve %s: %w%s", strings.Join(args[1:], " "), err, s.logTail())
	}
	return s, nil
}

// waitReady polls the server until it answers, exits, or limit passes.
func (s *server) waitReady(ctx context.Context, limit time.Duration) error {
	c := client.New(s.url)
	deadline := time.Now().Add(limit)
	for {
		cctx, cancel := context.WithTimeout(ctx, time.Second)
		_, err := c.ListTopics(cctx)
		cancel()
		if err == nil {
			return nil
		}
		select {
		case <-s.done:
			return fmt.Errorf("exited: %v", s.err)
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("did not answer within %v: %w", limit, err)
		}
	}
}

// stop ends the server with SIGTERM, or SIGKILL if it takes over 30s, and
// waits for it to exit. Stopping twice is fine.
func (s *server) stop() error {
	var err error
	s.once.Do(func() {
		select {
		case <-s.done:
			return
		default:
		}
		s.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-s.done:
		case <-time.After(30 * time.Second):
			s.cmd.Process.Kill()
			<-s.done
			err = fmt.Errorf("herald serve at %s did not stop within 30s of SIGTERM and was killed", s.url)
		}
	})
	return err
}

// logTail returns the end of the server's log as a suffix for an error.
func (s *server) logTail() string {
	t := strings.TrimSpace(s.log.String())
	if t == "" {
		return ""
	}
	return "\nserver log:\n" + t
}

// tailWriter keeps about the last max bytes written to it.
type tailWriter struct {
	mu  sync.Mutex
	max int
	buf []byte
}

func (t *tailWriter) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf = append(t.buf, p...)
	if len(t.buf) > 2*t.max {
		t.buf = slices.Clone(t.buf[len(t.buf)-t.max:])
	}
	return len(p), nil
}

func (t *tailWriter) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(t.buf) > t.max {
		return "…" + string(t.buf[len(t.buf)-t.max:])
	}
	return string(t.buf)
}
