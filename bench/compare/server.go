package compare

import (
	"context"
	"fmt"
	"os"
	"strings"
	"time"

	"herald/internal/testkit/heraldproc"
)

// stopGrace is how long a server has to stop after SIGTERM before it is
// killed.
const stopGrace = 30 * time.Second

// startServer starts "bin serve" on a free loopback port with a data
// directory under dir, env added to its environment, and waits until it
// answers.
func startServer(ctx context.Context, bin, dir string, env []string, extra ...string) (*heraldproc.Server, error) {
	data, err := os.MkdirTemp(dir, "data-")
	if err != nil {
		return nil, fmt.Errorf("make a data directory: %w", err)
	}
	// The push comparison's receiver listens on loopback, which push
	// endpoints may reach only when allowed.
	args := append([]string{"--log-level", "warn", "--push-allow", "127.0.0.0/8"}, extra...)
	return heraldproc.Start(ctx, heraldproc.Config{
		Binary:     bin,
		DataDir:    data,
		Args:       args,
		Env:        env,
		OutputTail: 16 << 10,
	})
}

// logTail returns the end of s's log as a suffix for an error.
func logTail(s *heraldproc.Server) string {
	t := strings.TrimSpace(s.Output())
	if t == "" {
		return ""
	}
	return "\nserver log:\n" + t
}
