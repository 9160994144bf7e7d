package e2e

import (
	"bytes"
	"context"
	"errors"
	"os/exec"
	"strings"
	"testing"

	"herald/tests/framework"
)

// result is what a command line printed and its exit code.
type result struct {
	stdout, stderr string
	code           int
}

// runCLI runs the herald binary with args and stdin (not a terminal)
// until it exits or ctx ends, and returns what it printed and its exit
// code.
func runCLI(ctx context.Context, stdin string, args ...string) result {
	cmd := exec.CommandContext(ctx, framework.Binary(), args...)
	var out, errOut bytes.Buffer
	cmd.Stdin, cmd.Stdout, cmd.Stderr = strings.NewReader(stdin), &out, &errOut
	err := cmd.Run()
	var exit *exec.ExitError
	if err != nil && !errors.As(err, &exit) {
		return result{out.String(), errOut.String() + err.Error(), -1}
	}
	return result{out.String(), errOut.String(), cmd.ProcessState.ExitCode()}
}

// runBinary is runCLI that fails t if the binary cannot be run.
func runBinary(t *testing.T, stdin string, args ...string) result {
	t.Helper()
	r := runCLI(context.Background(), stdin, args...)
	if r.code == -1 {
		t.Fatalf("herald %v: %s", args, r.stderr)
	}
	return r
}

// cli runs args against the server at url and fails t unless they succeed.
func cli(t *testing.T, url, stdin string, args ...string) string {
	t.Helper()
	r := runBinary(t, stdin, append([]string{"--server", url}, args...)...)
	if r.code != 0 || r.stderr != "" {
		t.Fatalf("herald %s: exit %d, stderr:\n%s", strings.Join(args, " "), r.code, r.stderr)
	}
	return r.stdout
}

// cliFails runs args against the server at url and fails t unless they
// exit with code 1; it returns the standard error.
func cliFails(t *testing.T, url, stdin string, args ...string) string {
	t.Helper()
	r := runBinary(t, stdin, append([]string{"--server", url}, args...)...)
	if r.code != 1 {
		t.Fatalf("herald %s: exit %d, want 1; stdout:\n%s", strings.Join(args, " "), r.code, r.stdout)
	}
	if !strings.HasPrefix(r.stderr, "herald: ") {
		t.Errorf("herald %s: stderr %q does not start with \"herald: \"", strings.Join(args, " "), r.stderr)
	}
	return r.stderr
}
