package main

import (
	"cmp"
	"fmt"
	"io"
	"slices"

	"herald/bench/load"
)

// consumeSetting identifies the runs of one consumption setting.
type consumeSetting struct {
	system, label, mode               string
	backlog                           int64
	keys, consumers, batch, eventSize int
}

func consumeSettingOf(r *load.Result) consumeSetting {
	c := r.Consume
	return consumeSetting{r.System, r.Label, c.Mode, c.Backlog, c.Keys, c.Consumers, c.Batch, c.EventBytes}
}

// summarizeConsume returns the median of each consumption setting's runs,
// ordered by keys, backlog, then system.
func summarizeConsume(runs []load.Result) ([]load.Result, error) {
	if slices.ContainsFunc(runs, func(r load.Result) bool { return r.Consume == nil }) {
		return nil, fmt.Errorf("publish and consumption results mixed: give one kind at a time")
	}
	out := mediansBy(runs, consumeSettingOf)
	slices.SortStableFunc(out, func(a, b load.Result) int {
		ca, cb := a.Consume, b.Consume
		return cmp.Or(
			cmp.Compare(ca.Keys, cb.Keys),
			cmp.Compare(ca.Backlog, cb.Backlog),
			cmp.Compare(systemOrder(a.System), systemOrder(b.System)),
			cmp.Compare(a.System, b.System),
			cmp.Compare(a.Label, b.Label),
		)
	})
	return out, nil
}

func writeConsumeTable(w io.Writer, medians []load.Result) {
	fmt.Fprintln(w, "| system | setting | keys | backlog | consumers | batch | events/s | MB/s | fetch p50 ms | fetch p99 ms | ack p50 ms | ack p99 ms | server CPU µs/event | runs | errors |")
	fmt.Fprintln(w, "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
	for _, m := range medians {
		c := m.Consume
		fetch, ack := "–", "–"
		fetch99, ack99 := "–", "–"
		if m.FetchLatency != nil && m.AckLatency != nil {
			fetch, fetch99 = load.FormatMS(m.FetchLatency.P50), load.FormatMS(m.FetchLatency.P99)
			ack, ack99 = load.FormatMS(m.AckLatency.P50), load.FormatMS(m.AckLatency.P99)
		}
		consumers, batch := fmt.Sprint(c.Consumers), fmt.Sprint(c.Batch)
		if c.Mode == "push" {
			consumers, batch = "push", "–"
		}
		fmt.Fprintf(w, "| %s | %s | %d | %d | %s | %s | %.0f | %.1f | %s | %s | %s | %s | %s | %d | %d |\n",
			m.System, m.Label, c.Keys, c.Backlog, consumers, batch, m.EventsPerSecond, m.MBPerSecond,
			fetch, fetch99, ack, ack99, load.FormatCPU(&m), max(m.Rounds, 1), m.Errors)
	}
}

// consumeTargets checks the targets: herald's pull drain at least
// as fast as JetStream's pull consumer (acks confirmed on both) at each
// backlog and key count, and flat (within 20 %) from the smallest backlog
// measured to the largest.
func consumeTargets(medians []load.Result) []string {
	var lines []string
	var herald []*load.Result
	for i := range medians {
		h := &medians[i]
		if h.System != "herald" || h.Consume.Mode != "pull" {
			continue
		}
		herald = append(herald, h)
		for j := range medians {
			js := &medians[j]
			if js.System != "nats-jetstream" || !sameDrain(h, js) {
				continue
			}
			x := h.EventsPerSecond / js.EventsPerSecond
			lines = append(lines, fmt.Sprintf("- %d keys, backlog %d: herald (%s) %s× JetStream (%s) (target ≥ 1×: %s)",
				h.Consume.Keys, h.Consume.Backlog, h.Label, ratio(x), js.Label, verdict(x >= 1)))
		}
	}
	return append(lines, flatness(herald)...)
}

// flatness compares each herald setting's drain rate at its largest
// backlog with that at its smallest; the runs are ordered by backlog.
func flatness(herald []*load.Result) []string {
	type key struct {
		label          string
		keys, consumer int
	}
	first := map[key]*load.Result{}
	last := map[key]*load.Result{}
	var order []key
	for _, h := range herald {
		k := key{h.Label, h.Consume.Keys, h.Consume.Consumers}
		if first[k] == nil {
			first[k] = h
			order = append(order, k)
		}
		last[k] = h
	}
	var lines []string
	for _, k := range order {
		a, b := first[k], last[k]
		if a == b {
			continue
		}
		x := b.EventsPerSecond / a.EventsPerSecond
		lines = append(lines, fmt.Sprintf("- %d keys, herald (%s): backlog %d drains at %s× the rate of backlog %d (target within 20 %%: %s)",
			k.keys, k.label, b.Consume.Backlog, ratio(x), a.Consume.Backlog, verdict(x >= 0.8 && x <= 1.2)))
	}
	return lines
}

// ratio formats x with two decimals, three below 0.1, so that a small
// ratio does not show as 0.00.
func ratio(x float64) string {
	if x < 0.1 {
		return fmt.Sprintf("%.3f", x)
	}
	return fmt.Sprintf("%.2f", x)
}

// sameDrain reports whether a and b drained the same backlog the same way.
func sameDrain(a, b *load.Result) bool {
	ca, cb := a.Consume, b.Consume
	return ca.Mode == cb.Mode && ca.Backlog == cb.Backlog && ca.Keys == cb.Keys &&
		ca.Consumers == cb.Consumers && ca.Batch == cb.Batch && ca.EventBytes == cb.EventBytes
}
