package main

import (
	"context"
	"errors"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/spf13/cobra"

	"herald/internal/testkit/fakeherald"
	heraldv1 "herald/proto/herald/v1"
	"herald/tests/framework"
)

// eventTime is the fake server's clock, stamped on the topics and events
// it makes. Only printed, never compared with the wall clock.
var eventTime = time.Date(2025, 3, 1, 10, 0, 0, 0, time.UTC)

// result is what a command line printed and its exit code.
type result struct {
	stdout, stderr string
	code           int
}

// runCLI runs the herald command line args in-process with stdin as its
// standard input.
func runCLI(ctx context.Context, stdin string, args ...string) result {
	var out, errOut framework.SyncBuffer
	code := run(ctx, args, strings.NewReader(stdin), &out, &errOut)
	return result{out.String(), errOut.String(), code}
}

// cli runs args against the server at url and fails t unless they succeed.
func cli(t *testing.T, url, stdin string, args ...string) string {
	t.Helper()
	r := runCLI(context.Background(), stdin, append([]string{"--server", url}, args...)...)
	if r.code != 0 || r.stderr != "" {
		t.Fatalf("herald %s: exit %d, stderr:\n%s", strings.Join(args, " "), r.code, r.stderr)
	}
	return r.stdout
}

// cliFails runs args against the server at url and fails t unless they
// exit with code 1; it returns the standard error.
func cliFails(t *testing.T, url, stdin string, args ...string) string {
	t.Helper()
	r := runCLI(context.Background(), stdin, append([]string{"--server", url}, args...)...)
	if r.code != 1 {
		t.Fatalf("herald %s: exit %d, want 1; stdout:\n%s", strings.Join(args, " "), r.code, r.stdout)
	}
	if !strings.HasPrefix(r.stderr, "herald: ") {
		t.Errorf("herald %s: stderr %q does not start with \"herald: \"", strings.Join(args, " "), r.stderr)
	}
	return r.stderr
}

func TestServerErrorIsPrinted(t *testing.T) {
	f := fakeherald.New(eventTime)
	url := f.Start(t)
	stderr := cliFails(t, url, "", "topic", "get", "nope")
	want := "herald: topic \"nope\" does not exist; create it with \"herald topic create nope\"\n"
	if stderr != want {
		t.Errorf("stderr = %q, want %q", stderr, want)
	}

	f.SetFail(connect.NewError(connect.CodeResourceExhausted,
		errors.New("shard orders.3 is full; retry later or raise max_queue_bytes")))
	stderr = cliFails(t, url, "", "publish", "orders", "x")
	if want := "herald: shard orders.3 is full; retry later or raise max_queue_bytes\n"; stderr != want {
		t.Errorf("stderr = %q, want %q", stderr, want)
	}
}

func TestUnreachableServer(t *testing.T) {
	srv := httptest.NewServer(nil)
	url := srv.URL
	srv.Close()
	stderr := cliFails(t, url, "", "topic", "list")
	for _, want := range []string{"cannot reach the herald server at " + url, "herald serve", "--server"} {
		if !strings.Contains(stderr, want) {
			t.Errorf("stderr %q does not mention %q", stderr, want)
		}
	}
}

func TestServerFromEnvironment(t *testing.T) {
	f := fakeherald.New(eventTime)
	f.AddTopic("orders", nil)
	t.Setenv(serverEnv, f.Start(t))
	r := runCLI(context.Background(), "", "topic", "list")
	if r.code != 0 || !strings.Contains(r.stdout, "orders") {
		t.Errorf("topic list with $%s: exit %d, stdout %q, stderr %q", serverEnv, r.code, r.stdout, r.stderr)
	}
}

func TestUsageErrors(t *testing.T) {
	f := fakeherald.New(eventTime)
	url := f.Start(t)
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"topic", "create"}, "usage: herald topic create NAME"},
		{[]string{"topic", "create", "x", "--bogus"}, `run "herald topic create --help"`},
		{[]string{"-o", "yaml", "topic", "list"}, `--output "yaml": want human or json`},
		{[]string{"topic", "create", "x", "--shards", "2", "--attr", "shards=3"}, "set by both --shards and --attr"},
		{[]string{"topic", "create", "x", "--attr", "novalue"}, `--attr "novalue": want name=value`},
		{[]string{"topic", "set", "x"}, "nothing to set"},
		{[]string{"publish", "orders", "--batch", "0", "x"}, "--batch 0"},
		{[]string{"publish", "orders", "--file", "f", "x"}, "not both"},
		{[]string{"publish", "orders", "--file", "/does/not/exist"}, "/does/not/exist"},
		{[]string{"reserve", "orders", "--key", "k"}, `"bytes" not set`},
		{[]string{"consume", "orders", "--batch", "0"}, "--batch 0"},
	}
	for _, tt := range tests {
		stderr := cliFails(t, url, "", tt.args...)
		if !strings.Contains(stderr, tt.want) {
			t.Errorf("herald %s: stderr %q does not mention %q", strings.Join(tt.args, " "), stderr, tt.want)
		}
	}
	if n := len(fakeherald.Received[*heraldv1.CreateTopicRequest](f)); n != 0 {
		t.Errorf("bad command lines sent %d requests", n)
	}
}

func TestHelpOfEveryCommand(t *testing.T) {
	var walk func(cmd *cobra.Command)
	walk = func(cmd *cobra.Command) {
		for _, sub := range cmd.Commands() {
			walk(sub)
		}
		path := strings.Fields(cmd.CommandPath())[1:]
		r := runCLI(context.Background(), "", append(path, "--help")...)
		if r.code != 0 {
			t.Errorf("%s --help: exit %d, stderr %q", cmd.CommandPath(), r.code, r.stderr)
		}
		if !strings.Contains(r.stdout, "Usage:\n  "+cmd.UseLine()) {
			t.Errorf("%s --help does not show the usage %q:\n%s", cmd.CommandPath(), cmd.UseLine(), r.stdout)
		}
		if ours(cmd) && (cmd.Short == "" || cmd.Long == "" || !strings.Contains(r.stdout, "Examples:")) {
			t.Errorf("%s lacks a short or long description or examples:\n%s", cmd.CommandPath(), r.stdout)
		}
	}
	walk(newRootCommand())
}

// ours reports whether cmd is one of the commands written here, not one
// cobra adds or the server's.
func ours(cmd *cobra.Command) bool {
	for c := cmd; c != nil; c = c.Parent() {
		switch c.Name() {
		case "help", "completion", "serve":
			return false
		}
	}
	return true
}
