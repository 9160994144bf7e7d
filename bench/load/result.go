package load

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"time"
)

// Result is what one run measured. Its JSON form is what herald bench
// publish and the peer clients print with --output json and write with
// --results.
type Result struct {
	// System names what was measured: "herald", "nats-jetstream",
	// "rabbitmq".
	System string `json:"system"`
	// Label tells settings of one system apart, such as "11 shards" or
	// "sync_interval: always".
	Label string `json:"label,omitempty"`
	// FsyncBeforeAck says whether the system fsyncs an event before it
	// acknowledges it.
	FsyncBeforeAck bool `json:"fsync_before_ack"`
	// Settings holds system settings worth recording (shards, sync
	// interval, queue type, server version).
	Settings map[string]string `json:"settings,omitempty"`
	Config   Config            `json:"config"`
	// Start is when the measured run began (after the warm-up).
	Start time.Time `json:"start"`
	// Seconds is the length of the measured run, from its start to the
	// acknowledgement of its last batch.
	Seconds float64 `json:"seconds"`
	// Events, Batches and Bytes count what was acknowledged in the measured
	// run; Bytes counts payload bytes only. In a push drain, Batches counts
	// the requests the receiver was sent.
	Events  int64 `json:"events"`
	Batches int64 `json:"batches"`
	Bytes   int64 `json:"bytes"`
	// Errors counts batches that failed; FirstError is the first failure.
	Errors     int64  `json:"errors"`
	FirstError string `json:"first_error,omitempty"`
	// EventsPerSecond and MBPerSecond (10^6 payload bytes per second) are
	// the throughput of the measured run.
	EventsPerSecond float64 `json:"events_per_second"`
	MBPerSecond     float64 `json:"mb_per_second"`
	// Latency is the time from sending a batch to its acknowledgement; in
	// a pull drain, from fetching a batch to the confirmation of its ack.
	Latency Latency `json:"latency_ms"`
	// Consume is set on a consumption run: what was drained, and how.
	// Config is then the publish load that made the backlog, and Seconds
	// the drain only.
	Consume *ConsumeConfig `json:"consume,omitempty"`
	// FetchLatency and AckLatency split Latency in a pull drain: from
	// asking for a batch to having it, and from acknowledging it to the
	// confirmation.
	FetchLatency *Latency `json:"fetch_latency_ms,omitempty"`
	AckLatency   *Latency `json:"ack_latency_ms,omitempty"`
	// ServerCPU is the CPU time of the system's server processes in the
	// measured interval, when the run was given their PIDs
	// (--server-pids): per event acknowledged in it.
	ServerCPU *ProcessesCPU `json:"server_cpu,omitempty"`
	// Rounds is set on a median of several runs: how many there were.
	Rounds int `json:"rounds,omitempty"`
}

// Latency summarizes batch latencies, in milliseconds.
type Latency struct {
	Min  float64 `json:"min"`
	Mean float64 `json:"mean"`
	P50  float64 `json:"p50"`
	P90  float64 `json:"p90"`
	P99  float64 `json:"p99"`
	P999 float64 `json:"p99_9"`
	Max  float64 `json:"max"`
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func latencyOf(h *Histogram) Latency {
	return Latency{
		Min:  ms(h.Min()),
		Mean: ms(h.Mean()),
		P50:  ms(h.Percentile(0.50)),
		P90:  ms(h.Percentile(0.90)),
		P99:  ms(h.Percentile(0.99)),
		P999: ms(h.Percentile(0.999)),
		Max:  ms(h.Max()),
	}
}

// Median returns the median of several runs of one setting, figure by
// figure: its throughput is the median throughput and its p99 the median
// p99, which may come from different runs. Counts (events, batches, bytes,
// seconds) are medians too; Errors is the total, FirstError the first one
// met, Rounds the number of runs. Descriptive fields come from the first
// run. Median of no runs is the zero Result.
func Median(runs []Result) Result {
	if len(runs) == 0 {
		return Result{}
	}
	m := runs[0]
	m.Rounds = len(runs)
	med := func(f func(*Result) float64) float64 {
		vs := make([]float64, len(runs))
		for i := range runs {
			vs[i] = f(&runs[i])
		}
		return median(vs)
	}
	m.Seconds = med(func(r *Result) float64 { return r.Seconds })
	m.Events = int64(med(func(r *Result) float64 { return float64(r.Events) }))
	m.Batches = int64(med(func(r *Result) float64 { return float64(r.Batches) }))
	m.Bytes = int64(med(func(r *Result) float64 { return float64(r.Bytes) }))
	m.EventsPerSecond = med(func(r *Result) float64 { return r.EventsPerSecond })
	m.MBPerSecond = med(func(r *Result) float64 { return r.MBPerSecond })
	medLatency := func(l func(*Result) *Latency) Latency {
		return Latency{
			Min:  med(func(r *Result) float64 { return l(r).Min }),
			Mean: med(func(r *Result) float64 { return l(r).Mean }),
			P50:  med(func(r *Result) float64 { return l(r).P50 }),
			P90:  med(func(r *Result) float64 { return l(r).P90 }),
			P99:  med(func(r *Result) float64 { return l(r).P99 }),
			P999: med(func(r *Result) float64 { return l(r).P999 }),
			Max:  med(func(r *Result) float64 { return l(r).Max }),
		}
	}
	m.Latency = medLatency(func(r *Result) *Latency { return &r.Latency })
	m.FetchLatency, m.AckLatency = nil, nil
	if split(runs) {
		fetch := medLatency(func(r *Result) *Latency { return r.FetchLatency })
		ack := medLatency(func(r *Result) *Latency { return r.AckLatency })
		m.FetchLatency, m.AckLatency = &fetch, &ack
	}
	m.ServerCPU = medianServerCPU(runs)
	m.Errors, m.FirstError = 0, ""
	for i := range runs {
		m.Errors += runs[i].Errors
		if m.FirstError == "" {
			m.FirstError = runs[i].FirstError
		}
	}
	return m
}

// split reports whether every run has fetch and ack latencies.
func split(runs []Result) bool {
	for i := range runs {
		if runs[i].FetchLatency == nil || runs[i].AckLatency == nil {
			return false
		}
	}
	return true
}

// median returns the middle value of vs, or the mean of the two middle
// values when there is an even number. It sorts vs.
func median(vs []float64) float64 {
	slices.Sort(vs)
	n := len(vs)
	if n%2 == 1 {
		return vs[n/2]
	}
	return (vs[n/2-1] + vs[n/2]) / 2
}

// Describe says in one line what load cfg is.
func (c Config) Describe() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%d producers, batch %d, %d-byte events, %d keys", c.Producers, c.Batch, c.EventBytes, c.Keys)
	if c.KeyPerBatch {
		b.WriteString(", one key per batch")
	}
	switch {
	case c.Count > 0 && c.Duration > 0:
		fmt.Fprintf(&b, ", %d events or %v", c.Count, c.Duration)
	case c.Count > 0:
		fmt.Fprintf(&b, ", %d events", c.Count)
	default:
		fmt.Fprintf(&b, ", %v", c.Duration)
	}
	if c.Warmup > 0 {
		fmt.Fprintf(&b, " after a %v warm-up", c.Warmup)
	}
	return b.String()
}

// WriteText writes r for people.
func WriteText(w io.Writer, r *Result) error {
	name := r.System
	if r.Label != "" {
		name += " (" + r.Label + ")"
	}
	durability := "fsync before every acknowledgement"
	if !r.FsyncBeforeAck {
		durability = "acknowledged WITHOUT fsync"
	}
	var b strings.Builder
	if r.Consume != nil {
		fmt.Fprintf(&b, "%s\n", name)
		writeConsumeText(&b, r)
		writeServerCPU(&b, r)
		return writeErrors(w, &b, r)
	}
	fmt.Fprintf(&b, "%s: %s\n", name, durability)
	fmt.Fprintf(&b, "load:       %s\n", r.Config.Describe())
	fmt.Fprintf(&b, "events:     %d in %.2fs (%d batches)\n", r.Events, r.Seconds, r.Batches)
	fmt.Fprintf(&b, "throughput: %.0f events/s, %.2f MB/s\n", r.EventsPerSecond, r.MBPerSecond)
	l := r.Latency
	fmt.Fprintf(&b, "latency:    p50 %s  p90 %s  p99 %s  p99.9 %s  max %s ms (per batch, send to ack)\n",
		FormatMS(l.P50), FormatMS(l.P90), FormatMS(l.P99), FormatMS(l.P999), FormatMS(l.Max))
	writeServerCPU(&b, r)
	return writeErrors(w, &b, r)
}

// writeServerCPU adds r's server CPU, if measured, to b.
func writeServerCPU(b *strings.Builder, r *Result) {
	if c := r.ServerCPU; c != nil {
		fmt.Fprintf(b, "server CPU: %s µs per acknowledged event (%.2f s user+system, %.2f cores busy on average; processes %v); the host took %.2f s of the machine's CPU (steal)\n",
			FormatCPU(r), c.Seconds, c.Cores, c.PIDs, c.StealSeconds)
	}
}

// writeErrors adds r's errors, if any, to b and writes b to w.
func writeErrors(w io.Writer, b *strings.Builder, r *Result) error {
	if r.Errors > 0 {
		fmt.Fprintf(b, "errors:     %d failed batches; the first: %s\n", r.Errors, r.FirstError)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// FormatMS formats milliseconds with three significant digits or more.
func FormatMS(v float64) string {
	switch {
	case v >= 100:
		return fmt.Sprintf("%.0f", v)
	case v >= 10:
		return fmt.Sprintf("%.1f", v)
	case v >= 1:
		return fmt.Sprintf("%.2f", v)
	}
	return fmt.Sprintf("%.3f", v)
}
