package heraldproc

import (
	"context"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"herald/client"
)

func TestTailKeepsTheEnd(t *testing.T) {
	tl := &tail{max: 8}
	for _, s := range []string{"0123", "4567", "89ab", "cdef", "ghij"} {
		tl.Write([]byte(s))
	}
	if got := tl.String(); got != "…cdefghij" {
		t.Errorf("tail of 20 bytes, keeping 8 = %q, want %q", got, "…cdefghij")
	}
	short := &tail{max: 8}
	short.Write([]byte("abc"))
	if got := short.String(); got != "abc" {
		t.Errorf("tail of 3 bytes = %q", got)
	}
}

// TestStartKillRestartStop drives a real herald serve through what the
// suites and benchmarks do with it.
func TestStartKillRestartStop(t *testing.T) {
	bin := buildHerald(t)
	ctx := context.Background()
	s, err := Start(ctx, Config{Binary: bin, DataDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Kill()
	if !strings.HasPrefix(s.Addr(), "127.0.0.1:") {
		t.Errorf("a server on %s, want a loopback port", s.Addr())
	}
	if _, err := client.New(s.URL()).CreateTopic(ctx, "kept", nil); err != nil {
		t.Fatal(err)
	}

	// Killed and started again: the same directory, the same address.
	if s, err = s.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	defer s.Kill()
	topics, err := client.New(s.URL()).ListTopics(ctx)
	if err != nil || len(topics) != 1 || topics[0].Name != "kept" {
		t.Fatalf("after the restart: topics %v, %v; want the one created before", topics, err)
	}

	if err := s.Stop(time.Minute); err != nil {
		t.Fatal(err)
	}
	if err := s.Err(); err != nil {
		t.Errorf("herald serve exited with %v after SIGTERM:\n%s", err, s.Output())
	}
	if !strings.Contains(s.Output(), "stopped") {
		t.Errorf("no clean stop in the output:\n%s", s.Output())
	}
	s.Kill() // after the exit: nothing to do
}

func TestStartFailsWithTheOutput(t *testing.T) {
	bin := buildHerald(t)
	_, err := Start(context.Background(), Config{Binary: bin, DataDir: t.TempDir(), Args: []string{"--segment-size", "100"}})
	if err == nil || !strings.Contains(err.Error(), "exited") || !strings.Contains(err.Error(), "--segment-size") {
		t.Fatalf("start with a bad flag: %v; want an error saying it exited, with its output", err)
	}
}

// buildHerald builds the herald command for a test, which it skips under
// -short: it runs a herald serve process.
func buildHerald(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("builds and runs herald serve")
	}
	bin := filepath.Join(t.TempDir(), "herald")
	if out, err := exec.Command("go", "build", "-o", bin, "herald/cmd/herald").CombinedOutput(); err != nil {
		t.Fatalf("go build herald: %v\n%s", err, out)
	}
	return bin
}
