// Package heraldproc starts "herald serve" as a child process and waits
// until it answers. It is the one home of that for the end-to-end and
// robustness suites (tests/...), the comparison benchmark (bench/compare)
// and bench shards (bench/shards): each needs a real server process, to
// kill it with SIGKILL, stop it, and start it again on the same data
// directory, and its output when it fails.
//
// It does not import package testing: benchmarks outside tests use it.
package heraldproc

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"time"

	"herald/client"
)

// Config says how to run herald serve.
type Config struct {
	Binary  string   // the herald binary
	DataDir string   // --data-dir
	Listen  string   // --listen: a loopback host:port; "" picks a free port
	Args    []string // more flags for herald serve, after --data-dir and --listen
	Env     []string // added to this process's environment
	// Output, if set, receives the server's output too (a log file, say):
	// Server.Output keeps only its last OutputTail bytes.
	Output io.Writer
	// OutputTail is how much of the output Server.Output keeps; 0 means
	// 1 MiB.
	OutputTail int
	// Client is how Start asks whether the server answers; nil means
	// plain HTTP to Listen. With a Client (one that speaks TLS, say),
	// Start does not wait for /readyz, which it asks over plain HTTP.
	Client *client.Client
	// Timeout bounds Start's wait; 0 means a minute.
	Timeout time.Duration
}

// Server is a running herald serve. Its methods may be called from any
// goroutine; the goroutine that waits for the process ends with it.
type Server struct {
	cfg     Config
	cmd     *exec.Cmd
	started time.Time
	out     *tail
	done    chan struct{} // closed when the process has exited
	err     error         // how it exited; set before done is closed
}

// Launch starts herald serve and returns without waiting for it to
// answer (bench shards measures that wait itself). The caller must end
// the server with Kill or Stop.
func Launch(cfg Config) (*Server, error) {
	if cfg.OutputTail == 0 {
		cfg.OutputTail = 1 << 20
	}
	if cfg.Listen == "" {
		addr, err := freeLoopbackAddr()
		if err != nil {
			return nil, err
		}
		cfg.Listen = addr
	}
	args := append([]string{"serve", "--data-dir", cfg.DataDir, "--listen", cfg.Listen}, cfg.Args...)
	s := &Server{cfg: cfg, cmd: exec.Command(cfg.Binary, args...), out: &tail{max: cfg.OutputTail}, done: make(chan struct{})}
	if len(cfg.Env) > 0 {
		s.cmd.Env = append(os.Environ(), cfg.Env...)
	}
	var w io.Writer = s.out
	if cfg.Output != nil {
		w = io.MultiWriter(s.out, cfg.Output)
	}
	s.cmd.Stdout, s.cmd.Stderr = w, w
	// Should the caller die, its server dies with it.
	s.cmd.SysProcAttr = dieWithParent()
	s.started = time.Now()
	if err := s.cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s serve: %w", cfg.Binary, err)
	}
	go func() {
		s.err = s.cmd.Wait() // returns once the output is all written
		close(s.done)
	}()
	return s, nil
}

// Start starts herald serve and waits until it answers and, over plain
// HTTP, until its /readyz says ready: every shard it had has opened. If
// the server exits first, or the wait ends, the server is killed and the
// error holds the end of its output.
func Start(ctx context.Context, cfg Config) (*Server, error) {
	s, err := Launch(cfg)
	if err != nil {
		return nil, err
	}
	if err := s.Wait(ctx); err != nil {
		s.Kill()
		return nil, fmt.Errorf("herald serve --listen %s: %w\n%s", cfg.Listen, err, s.Output())
	}
	return s, nil
}

// Wait waits, as Start does, until the server answers and, over plain
// HTTP, until /readyz says ready, the server exits, Config.Timeout passes
// or ctx ends. Callers that must know of the server while it starts (to
// kill it, say) Launch it and then Wait.
func (s *Server) Wait(ctx context.Context) error {
	limit := s.cfg.Timeout
	if limit == 0 {
		limit = time.Minute
	}
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	c := s.cfg.Client
	if c == nil {
		c = client.New(s.URL())
	}
	if err := s.WaitAnswers(ctx, c); err != nil {
		return err
	}
	if s.cfg.Client != nil {
		return nil
	}
	_, err := s.WaitReady(ctx)
	return err
}

// Restart kills the server if it still runs and starts it again with the
// same configuration: the same data directory and address.
func (s *Server) Restart(ctx context.Context) (*Server, error) {
	s.Kill()
	return Start(ctx, s.cfg)
}

// WaitAnswers polls c's ListTopics until it succeeds, the server exits
// or ctx ends.
func (s *Server) WaitAnswers(ctx context.Context, c *client.Client) error {
	for {
		cctx, cancel := context.WithTimeout(ctx, time.Second)
		_, err := c.ListTopics(cctx)
		cancel()
		if err == nil {
			return nil
		}
		if perr := s.pause(ctx, 50*time.Millisecond); perr != nil {
			return fmt.Errorf("%w; it does not answer: %v", perr, err)
		}
	}
}

// Readiness is when the server said what over /readyz, counted from its
// exec.
type Readiness struct {
	Serving time.Duration // its first answer from the node itself, ready or not
	Ready   time.Duration // its first answer that it is ready
	// Unavailable is the shards it could not open (name → why), which
	// leave it ready but serving only the others.
	Unavailable map[string]string
}

// WaitReady polls /readyz over plain HTTP until it says ready, the server
// exits or ctx ends. Before the node itself answers, the server says
// that it is starting (not JSON, or with a message).
func (s *Server) WaitReady(ctx context.Context) (Readiness, error) {
	hc := &http.Client{Timeout: time.Second}
	var r Readiness
	for {
		status, body, err := getReadyz(ctx, hc, s.cfg.Listen)
		now := time.Since(s.started)
		if err == nil && json.Valid(body) {
			if r.Serving == 0 {
				r.Serving = now
			}
			var answer struct {
				Ready       bool              `json:"ready"`
				Unavailable map[string]string `json:"unavailable_shards"`
			}
			if json.Unmarshal(body, &answer) == nil && answer.Ready && status == http.StatusOK {
				r.Ready, r.Unavailable = now, answer.Unavailable
				return r, nil
			}
		}
		if err == nil {
			err = fmt.Errorf("/readyz answered %d: %s", status, bytes.TrimSpace(body))
		}
		if perr := s.pause(ctx, 20*time.Millisecond); perr != nil {
			return r, fmt.Errorf("%w; /readyz does not say ready: %v", perr, err)
		}
	}
}

// pause waits d, and fails if the server exits or ctx ends first.
func (s *Server) pause(ctx context.Context, d time.Duration) error {
	select {
	case <-s.done:
		return fmt.Errorf("herald serve exited: %v", s.err)
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(d):
		return nil
	}
}

func getReadyz(ctx context.Context, hc *http.Client, addr string) (int, []byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/readyz", nil)
	if err != nil {
		return 0, nil, err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	return resp.StatusCode, body, err
}

// Addr is the address the server listens on.
func (s *Server) Addr() string { return s.cfg.Listen }

// URL is the server's plain-HTTP URL.
func (s *Server) URL() string { return "http://" + s.cfg.Listen }

// DataDir is the server's data directory.
func (s *Server) DataDir() string { return s.cfg.DataDir }

// Pid is the server's process id.
func (s *Server) Pid() int { return s.cmd.Process.Pid }

// Output returns the end of what the server printed.
func (s *Server) Output() string { return s.out.String() }

// Done is closed once the server has exited.
func (s *Server) Done() <-chan struct{} { return s.done }

// Err is how the server exited; call it after Done is closed.
func (s *Server) Err() error { return s.err }

// Signal sends sig to the server.
func (s *Server) Signal(sig os.Signal) error { return s.cmd.Process.Signal(sig) }

// Kill SIGKILLs the server and waits for it to exit. Killing a server
// that has exited does nothing.
func (s *Server) Kill() {
	select {
	case <-s.done:
		return
	default:
	}
	_ = s.cmd.Process.Signal(syscall.SIGKILL)
	<-s.done
}

// Stop sends SIGTERM and waits up to grace for the server to exit; then
// it kills it and says so. Stopping a server that has exited does
// nothing.
func (s *Server) Stop(grace time.Duration) error {
	select {
	case <-s.done:
		return nil
	default:
	}
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.done:
		return nil
	case <-time.After(grace):
	}
	s.Kill()
	return fmt.Errorf("herald serve at %s did not stop within %s of SIGTERM and was killed", s.cfg.Listen, grace)
}

// freeLoopbackAddr returns a loopback address with a port free a moment
// ago. Another process may take it first; callers accept that small risk
// to be able to pass the address to a child process.
func freeLoopbackAddr() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", fmt.Errorf("find a free loopback port: %w", err)
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}

// tail keeps about the last max bytes written to it.
type tail struct {
	mu  sync.Mutex
	max int
	buf []byte
	cut bool // bytes were dropped from the front
}

func (t *tail) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf = append(t.buf, p...)
	if len(t.buf) > 2*t.max {
		t.buf = append([]byte(nil), t.buf[len(t.buf)-t.max:]...)
		t.cut = true
	}
	return len(p), nil
}

func (t *tail) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.cut || len(t.buf) > t.max {
		return "…" + string(t.buf[max(len(t.buf)-t.max, 0):])
	}
	return string(t.buf)
}
