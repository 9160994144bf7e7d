package main

import (
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"herald/internal/topic"
)

// TestServeExamplesAreAccepted checks that every example of serve --help
// that listens on an address passes serve's checks, among them the
// refusal to listen beyond loopback without tokens. Nothing listens:
// the address is only given to the check.
func TestServeExamplesAreAccepted(t *testing.T) {
	dir := t.TempDir()
	tokens := filepath.Join(dir, "tokens")
	createToken(t, tokens, "admin", "ops")
	for _, line := range strings.Split(newServeCommand().Example, "\n") {
		args := strings.Fields(line)
		if len(args) < 3 || args[0] != "herald" || args[1] != "serve" || !strings.Contains(line, "--listen") {
			continue
		}
		args = args[2:]
		for i, a := range args {
			switch a {
			case "/etc/herald/tokens":
				args[i] = tokens
			case "/var/lib/herald":
				args[i] = filepath.Join(dir, "data")
			}
		}
		cfg, err := loadServeArgs(t, args...)
		if err != nil {
			t.Errorf("%s: %v", line, err)
			continue
		}
		addr, err := net.ResolveTCPAddr("tcp", cfg.Listen)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := newSecurity(cfg, addr, slog.New(slog.NewTextHandler(io.Discard, nil))); err != nil {
			t.Errorf("serve --help's example %q is refused: %v", strings.TrimSpace(line), err)
		}
	}
}

func TestDefaultDataDirIsIgnoredByGit(t *testing.T) {
	for _, path := range []string{"../../herald-data/controller", "herald-data/controller"} {
		if out, err := exec.Command("git", "check-ignore", path).CombinedOutput(); err != nil {
			t.Errorf("git does not ignore %s, which herald serve makes by default: %v %s", path, err, out)
		}
	}
}

// TestREADMEIdsAreWhatPublishReturns checks the ids the examples of the
// README and of docs/ show against the routing hash: FNV-1a-64(key) mod
// shards.
func TestREADMEIdsAreWhatPublishReturns(t *testing.T) {
	for _, ex := range []struct {
		doc        string // relative to the repository's root
		key, topic string
		shards     int
		shown      string // the document's line, with %d for the shard
	}{
		{"README.md", "customer-42", "orders", 4, "the first publish\nabove prints `orders/%d/0`"},
		{"docs/integrations.md", "customer-42", "fishtopic", 11, `# {"MessageId": "fishtopic/%d/0"}`}, // created over SNS: the default shards
		{"docs/integrations.md", "fish:a.txt", "objects", 4, `# {"ids":["objects/%d/0"]}`},            // S3 records are keyed bucket:key
		{"docs/api.md", "customer-42", "orders", 4, `# {"ids":["orders/%d/3"]}`},
	} {
		data, err := os.ReadFile(filepath.Join("../..", ex.doc))
		if err != nil {
			t.Fatal(err)
		}
		want := fmt.Sprintf(ex.shown, topic.ShardFor(ex.key, ex.shards))
		if !strings.Contains(string(data), want) {
			t.Errorf("%s does not show %q: key %q of %s routes to shard %d of %d",
				ex.doc, want, ex.key, ex.topic, topic.ShardFor(ex.key, ex.shards), ex.shards)
		}
	}
}
