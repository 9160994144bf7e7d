package natsjs

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"herald/bench/load"
)

func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// startNATS starts a nats-server with JetStream on loopback and returns its
// client and monitoring URLs.
func startNATS(t *testing.T) (url, monitor string) {
	t.Helper()
	bin, err := exec.LookPath("nats-server")
	if err != nil {
		for _, p := range []string{"/usr/sbin/nats-server", "/usr/bin/nats-server"} {
			if _, serr := os.Stat(p); serr == nil {
				bin, err = p, nil
			}
		}
	}
	if err != nil {
		t.Fatal("no nats-server: install it with scripts/install-test-deps.sh (make test does)")
	}
	dir := t.TempDir()
	port, mon := freePort(t), freePort(t)
	conf := filepath.Join(dir, "nats.conf")
	text := fmt.Sprintf("listen: 127.0.0.1:%d\nhttp: 127.0.0.1:%d\njetstream { store_dir: %q }\n", port, mon, filepath.Join(dir, "js"))
	if err := os.WriteFile(conf, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	logFile, err := os.Create(filepath.Join(dir, "nats.log"))
	if err != nil {
		t.Fatal(err)
	}
	defer logFile.Close()
	cmd := exec.Command(bin, "-c", conf)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			cmd.Process.Kill()
			<-done
		}
	})
	url = fmt.Sprintf("nats://127.0.0.1:%d", port)
	deadline := time.Now().Add(10 * time.Second)
	for {
		nc, err := nats.Connect(url)
		if err == nil {
			nc.Close()
			break
		}
		if time.Now().After(deadline) {
			log, _ := os.ReadFile(logFile.Name())
			t.Fatalf("nats-server did not come up: %v\n%s", err, log)
		}
		time.Sleep(50 * time.Millisecond)
	}
	return url, fmt.Sprintf("http://127.0.0.1:%d", mon)
}

func TestLoadThroughJetStream(t *testing.T) {
	url, monitor := startNATS(t)
	ctx := context.Background()
	target := Target{URL: url, Stream: "BENCHTEST"}
	if err := Prepare(ctx, target); err != nil {
		t.Fatal(err)
	}
	for _, batch := range []int{1, 7} {
		// Prepare again: the stream starts empty.
		if err := Prepare(ctx, target); err != nil {
			t.Fatal(err)
		}
		cfg := load.Config{Producers: 3, Batch: batch, EventBytes: 64, Keys: 5, Count: 100}
		res, err := load.Run(ctx, cfg, NewProducer(target, batch))
		if err != nil {
			t.Fatal(err)
		}
		if res.Events != 100 || res.Errors != 0 {
			t.Errorf("batch %d: events %d errors %d (%s)", batch, res.Events, res.Errors, res.FirstError)
		}
		nc, err := nats.Connect(url)
		if err != nil {
			t.Fatal(err)
		}
		js, _ := jetstream.New(nc)
		s, err := js.Stream(ctx, target.Stream)
		if err != nil {
			t.Fatal(err)
		}
		info, err := s.Info(ctx, jetstream.WithSubjectFilter(target.Stream+".>"))
		if err != nil {
			t.Fatal(err)
		}
		if info.State.Msgs != 100 || info.State.Bytes < 100*64 || info.Config.Storage != jetstream.FileStorage ||
			info.Config.Replicas != 1 || info.State.NumSubjects > 5 {
			t.Errorf("batch %d: stream state %+v, config storage %v replicas %d", batch, info.State, info.Config.Storage, info.Config.Replicas)
		}
		nc.Close()
	}
	if err := Delete(ctx, target); err != nil {
		t.Fatal(err)
	}

	sync, err := ReadSync(ctx, monitor)
	if err != nil {
		t.Fatal(err)
	}
	if sync.Always || sync.Version == "" {
		t.Errorf("ReadSync = %+v, want sync_always false (the default) and a version", sync)
	}
}

func TestReadSyncWithoutJetStream(t *testing.T) {
	if _, err := ReadSync(context.Background(), "http://127.0.0.1:1"); err == nil {
		t.Error("no error from a monitoring URL where nothing listens")
	}
}
