package e2e

import (
	"context"
	"net"
	"net/http"
	"os/exec"
	"strings"
	"testing"
	"time"

	"herald/client"
	"herald/internal/testkit"
	"herald/tests/framework"
)

// TestE2EDeliveryHealthOfARefusingWebhook: while the webhook's port is
// closed, topic stats show the connection error, when it happened and the
// failures since the last success (max_retries is 0: nothing is
// dead-lettered, the error would show nowhere else); once the webhook
// listens, the last success. The server logs one line for the failures and
// one for the recovery, and its startup line names the dashboard's URL.
func TestE2EDeliveryHealthOfARefusingWebhook(t *testing.T) {
	addr, hookAddr := testkit.FreeAddr(t), testkit.FreeAddr(t) // nothing listens on hookAddr yet
	srv := framework.StartServer(t, t.TempDir(), addr)
	cli := func(args ...string) string {
		t.Helper()
		out, err := exec.Command(framework.Binary(), append([]string{"--server", "http://" + addr}, args...)...).CombinedOutput()
		if err != nil {
			t.Fatalf("herald %v: %v\n%s", args, err, out)
		}
		return string(out)
	}
	stats := func() client.ShardStats {
		t.Helper()
		s, err := client.New("http://"+addr).TopicStats(context.Background(), "hooks")
		if err != nil {
			t.Fatal(err)
		}
		return s.Shards[0]
	}
	waitStats := func(what string, cond func(client.ShardStats) bool) client.ShardStats {
		t.Helper()
		for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
			s := stats()
			if cond(s) {
				return s
			}
			if time.Now().After(deadline) {
				t.Fatalf("timed out waiting for %s; stats %+v, delivery %+v", what, s, s.Delivery)
			}
		}
	}
	cli("topic", "create", "hooks", "--shards", "1", "--push-endpoint", "http://"+hookAddr+"/events", "--attr", "retry_sleep_duration=0")
	cli("publish", "hooks", "--key", "k", `"e1"`)

	s := waitStats("failures to be counted", func(s client.ShardStats) bool { return s.Delivery != nil && s.Delivery.ConsecutiveFailures >= 3 })
	if h := s.Delivery; !strings.Contains(h.LastError, "connection refused") || h.LastErrorTime.IsZero() || !h.LastSuccess.IsZero() {
		t.Fatalf("delivery health while the webhook's port is closed: %+v", h)
	}
	if table := cli("topic", "stats", "hooks"); !strings.Contains(table, "LAST PUSH ERROR") || !strings.Contains(table, "connection refused") {
		t.Fatalf("topic stats does not show the push error:\n%s", table)
	}
	if out := cli("topic", "stats", "hooks", "-o", "json"); !strings.Contains(out, "connection refused") {
		t.Fatalf("topic stats -o json does not show the push error:\n%s", out)
	}

	ln, err := net.Listen("tcp", hookAddr)
	if err != nil {
		t.Fatal(err)
	}
	hook := &http.Server{Handler: http.HandlerFunc(func(http.ResponseWriter, *http.Request) {})}
	done := make(chan struct{})
	go func() { defer close(done); hook.Serve(ln) }()
	defer func() { hook.Close(); <-done }()

	s = waitStats("the event to be delivered", func(s client.ShardStats) bool {
		return s.Delivered == 1 && s.Delivery != nil && !s.Delivery.LastSuccess.IsZero()
	})
	if h := s.Delivery; h.ConsecutiveFailures != 0 || h.LastSuccess.Before(h.LastErrorTime) {
		t.Fatalf("delivery health after the webhook came up: %+v", h)
	}

	srv.Kill() // its output is complete once it has exited
	log := srv.Output()
	if n := strings.Count(log, "push delivery failing"); n != 1 {
		t.Errorf("%d log lines for the failures, want 1:\n%s", n, log)
	}
	if n := strings.Count(log, "push delivery recovered"); n != 1 {
		t.Errorf("%d log lines for the recovery, want 1:\n%s", n, log)
	}
	if want := "dashboard=http://" + addr + "/dashboard/"; !strings.Contains(log, want) {
		t.Errorf("the server's log does not name the dashboard (%s):\n%s", want, log)
	}
}
