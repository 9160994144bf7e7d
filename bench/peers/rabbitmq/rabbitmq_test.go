package rabbitmq

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"herald/bench/load"
)

const rabbitmqServer = "/usr/lib/rabbitmq/bin/rabbitmq-server"

func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// startProcess starts cmd with its output in a log file and stops it with
// SIGTERM when the test ends. The channel it returns is closed when cmd
// exits.
func startProcess(t *testing.T, cmd *exec.Cmd, logName string) <-chan struct{} {
	t.Helper()
	f, err := os.Create(logName)
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = f, f
	if err := cmd.Start(); err != nil {
		f.Close()
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); f.Close(); close(done) }()
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			cmd.Process.Kill()
			<-done
		}
	})
	return done
}

// startRabbitMQ starts a private RabbitMQ node on loopback, with its own
// epmd, and returns its AMQP URL.
func startRabbitMQ(t *testing.T) string {
	t.Helper()
	if _, err := os.Stat(rabbitmqServer); err != nil {
		t.Fatalf("no RabbitMQ at %s: install it with scripts/install-test-deps.sh (make test does)", rabbitmqServer)
	}
	epmd, err := exec.LookPath("epmd")
	if err != nil {
		t.Fatalf("no epmd (it comes with RabbitMQ's Erlang): install RabbitMQ with scripts/install-test-deps.sh: %v", err)
	}
	dir := t.TempDir()
	port, distPort, epmdPort := freePort(t), freePort(t), freePort(t)
	startProcess(t, exec.Command(epmd, "-address", "127.0.0.1", "-port", strconv.Itoa(epmdPort)), filepath.Join(dir, "epmd.log"))

	files := map[string]string{
		"enabled_plugins":   "[].\n",
		"rabbitmq-env.conf": "",
		"rabbitmq.conf":     fmt.Sprintf("listeners.tcp.1 = 127.0.0.1:%d\n", port),
	}
	for name, text := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	home := filepath.Join(dir, "home")
	if err := os.Mkdir(home, 0o700); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(rabbitmqServer)
	cmd.Env = append(os.Environ(),
		"HOME="+home,
		"ERL_EPMD_PORT="+strconv.Itoa(epmdPort),
		"ERL_EPMD_ADDRESS=127.0.0.1",
		"RABBITMQ_NODENAME=herald-bench-test@localhost",
		"RABBITMQ_CONF_ENV_FILE="+filepath.Join(dir, "rabbitmq-env.conf"),
		"RABBITMQ_CONFIG_FILE="+filepath.Join(dir, "rabbitmq.conf"),
		"RABBITMQ_ENABLED_PLUGINS_FILE="+filepath.Join(dir, "enabled_plugins"),
		"RABBITMQ_MNESIA_BASE="+filepath.Join(dir, "mnesia"),
		"RABBITMQ_LOG_BASE="+filepath.Join(dir, "log"),
		"RABBITMQ_NODE_IP_ADDRESS=127.0.0.1",
		"RABBITMQ_NODE_PORT="+strconv.Itoa(port),
		"RABBITMQ_DIST_PORT="+strconv.Itoa(distPort),
		"RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS=-kernel inet_dist_use_interface {127,0,0,1}",
	)
	logName := filepath.Join(dir, "rabbitmq.log")
	exited := startProcess(t, cmd, logName)
	url := fmt.Sprintf("amqp://guest:guest@127.0.0.1:%d/", port)
	deadline := time.Now().Add(90 * time.Second)
	for {
		conn, err := amqp.Dial(url)
		if err == nil {
			conn.Close()
			return url
		}
		select {
		case <-exited:
			log, _ := os.ReadFile(logName)
			t.Fatalf("RabbitMQ exited at startup: %v\n%s", err, log)
		case <-time.After(200 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			log, _ := os.ReadFile(logName)
			t.Fatalf("RabbitMQ did not come up within 90s: %v\n%s", err, log)
		}
	}
}

func TestLoadThroughQuorumQueue(t *testing.T) {
	url := startRabbitMQ(t)
	ctx := context.Background()
	target := Target{URL: url, Queue: "bench-test"}
	v, err := Version(url)
	if err != nil || v == "" {
		t.Errorf("Version = %q, %v", v, err)
	}
	for _, batch := range []int{1, 9} {
		if err := Prepare(ctx, target); err != nil {
			t.Fatal(err)
		}
		cfg := load.Config{Producers: 3, Batch: batch, EventBytes: 64, Keys: 5, Count: 90}
		res, err := load.Run(ctx, cfg, NewProducer(target))
		if err != nil {
			t.Fatal(err)
		}
		if res.Events != 90 || res.Errors != 0 {
			t.Errorf("batch %d: events %d errors %d (%s)", batch, res.Events, res.Errors, res.FirstError)
		}
		conn, err := amqp.Dial(url)
		if err != nil {
			t.Fatal(err)
		}
		ch, err := conn.Channel()
		if err != nil {
			t.Fatal(err)
		}
		// Declaring a quorum queue as classic fails: the queue is a quorum queue.
		q, err := ch.QueueDeclarePassive(target.Queue, true, false, false, false, amqp.Table{"x-queue-type": "quorum"})
		if err != nil {
			t.Fatal(err)
		}
		if q.Messages != 90 {
			t.Errorf("batch %d: queue holds %d messages, want 90", batch, q.Messages)
		}
		if _, err := ch.QueueDeclare(target.Queue, true, false, false, false, amqp.Table{"x-queue-type": "classic"}); err == nil {
			t.Errorf("re-declaring the queue as classic succeeded: it is not a quorum queue")
		}
		conn.Close()
	}
	if err := Delete(ctx, target); err != nil {
		t.Fatal(err)
	}
}
