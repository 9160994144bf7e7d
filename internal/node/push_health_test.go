package node

import (
	"bytes"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// logBuffer is a log destination that tests read while the node writes.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *logBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// lines returns the lines that contain s.
func (b *logBuffer) lines(s string) []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []string
	for l := range strings.Lines(b.buf.String()) {
		if strings.Contains(l, s) {
			out = append(out, l)
		}
	}
	return out
}

// TestPushHealthInStatsLogAndMetrics: while a webhook answers 500, the
// shard's stats show its error, when it happened and the failures since
// the last success, and so do the metrics; once it answers 200, the last
// success. The log has one line for the run of failures and one for the
// recovery, however many retries there were.
func TestPushHealthInStatsLogAndMetrics(t *testing.T) {
	rcv := newReceiver(t)
	rcv.setStatus(func(string) int { return http.StatusInternalServerError })
	logs := &logBuffer{}
	reg := prometheus.NewRegistry()
	cfg := testConfig(t.TempDir())
	cfg.Logger, cfg.Registerer = slog.New(slog.NewTextHandler(logs, nil)), reg
	n := openNode(t, cfg)
	mustCreate(t, n, "hooks", map[string]string{"shards": "1", "push_endpoint": rcv.URL, "retry_sleep_duration": "0"})
	publish(t, n, "hooks", jsonEvents("k", 0, 3)...)

	st := waitStats(t, n, "hooks", func(s ShardStats) bool { return s.Delivery != nil && s.Delivery.ConsecutiveFailures >= 5 })
	if h := st.Delivery; !strings.Contains(h.LastError, "500") || h.LastErrorTime.IsZero() || !h.LastSuccess.IsZero() {
		t.Fatalf("health while the webhook fails: %+v, want its error and time, no success", h)
	}
	if got := gauge(t, reg, "herald_delivery_consecutive_failures"); got < 5 {
		t.Errorf("herald_delivery_consecutive_failures = %v, want at least 5", got)
	}

	rcv.setStatus(nil)
	st = waitStats(t, n, "hooks", func(s ShardStats) bool { return s.Stats.Delivered == 3 })
	h := st.Delivery
	if h == nil || h.ConsecutiveFailures != 0 || h.LastSuccess.Before(h.LastErrorTime) || !strings.Contains(h.LastError, "500") {
		t.Fatalf("health after the webhook recovered: %+v, want a success after the last error, which stays shown", h)
	}
	if got := gauge(t, reg, "herald_delivery_consecutive_failures"); got != 0 {
		t.Errorf("herald_delivery_consecutive_failures = %v after the recovery, want 0", got)
	}
	if got := gauge(t, reg, "herald_delivery_last_success_timestamp_seconds"); got != float64(h.LastSuccess.UnixNano())/1e9 {
		t.Errorf("herald_delivery_last_success_timestamp_seconds = %v, want %v", got, h.LastSuccess)
	}
	failing, recovered := logs.lines("push delivery failing"), logs.lines("push delivery recovered")
	if len(failing) != 1 || !strings.Contains(failing[0], "500") || len(recovered) != 1 {
		t.Fatalf("log lines on failing %q and on recovering %q; want one each", failing, recovered)
	}
}

// gauge returns the value of the only series of a gauge.
func gauge(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			m := mf.GetMetric()
			if len(m) != 1 {
				t.Fatalf("%s has %d series, want 1", name, len(m))
			}
			return m[0].GetGauge().GetValue()
		}
	}
	t.Fatalf("no metric %s", name)
	return 0
}
