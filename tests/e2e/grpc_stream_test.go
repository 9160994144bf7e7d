package e2e

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"herald/client"
	"herald/internal/testkit"
	"herald/tests/framework"
)

// grpcVenv returns the virtual environment with grpcio and grpcio-tools
// that scripts/install-test-deps.sh makes: $HERALD_GRPC_VENV, by default
// ${XDG_CACHE_HOME:-$HOME/.cache}/herald-test/grpc-venv. Without it the
// test fails rather than skips: a skip would hide that the RPC went
// untested from another language.
func grpcVenv(t *testing.T) string {
	t.Helper()
	dir := os.Getenv("HERALD_GRPC_VENV")
	if dir == "" {
		cache, err := os.UserCacheDir()
		if err != nil {
			t.Fatal(err)
		}
		dir = filepath.Join(cache, "herald-test", "grpc-venv")
	}
	python := filepath.Join(dir, "bin", "python")
	if out, err := exec.Command(python, "-c", "import grpc, grpc_tools").CombinedOutput(); err != nil {
		t.Fatalf("grpcio and grpcio-tools are not installed in %s (%v: %s); run scripts/install-test-deps.sh, or point $HERALD_GRPC_VENV at a virtual environment with them", dir, err, out)
	}
	return python
}

// TestPublishStreamFromPython publishes over the PublishStream RPC from
// Python's grpcio, with stubs generated from herald.proto now, to a real
// herald serve over plaintext HTTP/2 (h2c): the script checks that each
// call is answered once, that an unknown topic and an oversized payload
// fail their own calls and leave the stream serving, and this test that
// each answered id is the one its event is stored under.
func TestPublishStreamFromPython(t *testing.T) {
	python := grpcVenv(t)
	const events, payloadLimit = 2000, 1000
	addr := testkit.FreeAddr(t)
	framework.StartServer(t, t.TempDir(), addr, "--max-payload-bytes", strconv.Itoa(payloadLimit))
	ctx := context.Background()
	c := client.New("http://" + addr)
	if _, err := c.CreateTopic(ctx, "py", map[string]string{"shards": "3"}); err != nil {
		t.Fatal(err)
	}

	protoDir, err := filepath.Abs(filepath.Join("..", "..", "proto"))
	if err != nil {
		t.Fatal(err)
	}
	stubs := t.TempDir()
	if out, err := exec.Command(python, "-m", "grpc_tools.protoc", "-I", protoDir,
		"--python_out", stubs, "--grpc_python_out", stubs, "herald/v1/herald.proto").CombinedOutput(); err != nil {
		t.Fatalf("grpc_tools.protoc: %v\n%s", err, out)
	}
	cctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(cctx, python, filepath.Join("testdata", "grpc_stream_publish.py"),
		stubs, addr, "py", strconv.Itoa(events), strconv.Itoa(payloadLimit))
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("grpc_stream_publish.py: %v", err)
	}
	var res struct {
		IDs        map[string]string `json:"ids"` // payload -> id
		OutOfOrder int               `json:"out_of_order"`
	}
	if err := json.Unmarshal(out, &res); err != nil {
		t.Fatalf("the script printed %q: %v", out, err)
	}
	if len(res.IDs) != events+1 {
		t.Fatalf("%d calls published, want %d", len(res.IDs), events+1)
	}
	t.Logf("%d of %d answers came after a later call's", res.OutOfOrder, events+3)

	for fetched := 0; fetched < len(res.IDs); {
		ds, err := c.Fetch(ctx, "py", client.FetchOptions{MaxEvents: 500, Wait: time.Second})
		if err != nil || len(ds) == 0 {
			t.Fatalf("fetched %d of %d events, then %v", fetched, len(res.IDs), err)
		}
		var ids []string
		for _, d := range ds {
			if want := res.IDs[string(d.Payload)]; d.ID != want {
				t.Errorf("%s is stored as %s, but its call was answered with %q", d.Payload, d.ID, want)
			}
			ids = append(ids, d.ID)
		}
		fetched += len(ds)
		if _, err := c.Ack(ctx, ids...); err != nil {
			t.Fatal(err)
		}
	}
}
