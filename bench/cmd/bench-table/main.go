// Command bench-table reads results written by herald bench publish and
// the peer clients (--results FILE, one run per file), takes the median of
// each figure over the runs of each setting, and prints one Markdown table,
// followed by the targets checked against the medians.
//
//	bench-table results/*.json              # the table
//	bench-table --summary summary.json results/*.json
//	bench-table --targets r3 results/*.json # the R3 targets instead
//
// --summary also writes the medians as a JSON array of results, the input
// of scripts/plot-bench.py. --targets picks the targets checked: r1 (the
// default: single nodes), r3 (three-node clusters), snapshots (herald's
// sync vs async snapshots) or none. Results of herald bench consume and the
// peers' consume commands get a table of their own, and the consumption
// targets unless --targets none.
package main

import (
	"cmp"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"

	"github.com/spf13/pflag"

	"herald/bench/load"
)

func main() {
	if err := run(os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintf(os.Stderr, "bench-table: %v\n", err)
		os.Exit(1)
	}
}

func run(args []string, w io.Writer) error {
	fs := pflag.NewFlagSet("bench-table", pflag.ContinueOnError)
	summary := fs.String("summary", "", "also write the medians as JSON to this file")
	targets := fs.String("targets", "r1", "targets to check: r1, r3, snapshots or none")
	if err := fs.Parse(args); err != nil {
		return err
	}
	check, ok := targetChecks[*targets]
	if !ok {
		return fmt.Errorf("--targets %q: want r1, r3, snapshots or none", *targets)
	}
	if fs.NArg() == 0 {
		return fmt.Errorf("no result files given")
	}
	var runs []load.Result
	for _, name := range fs.Args() {
		data, err := os.ReadFile(name)
		if err != nil {
			return err
		}
		var r load.Result
		if err := json.Unmarshal(data, &r); err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		runs = append(runs, r)
	}
	medians := summarize(runs)
	table := writeTable
	if slices.ContainsFunc(runs, func(r load.Result) bool { return r.Consume != nil }) {
		// Consumption results: their own table and targets.
		var err error
		if medians, err = summarizeConsume(runs); err != nil {
			return err
		}
		table = writeConsumeTable
		if check != nil {
			check = consumeTargets
		}
	}
	if *summary != "" {
		data, err := json.MarshalIndent(medians, "", "  ")
		if err != nil {
			return err
		}
		if err := os.WriteFile(*summary, append(data, '\n'), 0o644); err != nil {
			return err
		}
	}
	table(w, medians)
	if check != nil {
		writeLines(w, check(medians))
	}
	return nil
}

// targetChecks are the sets of targets --targets names: each returns one
// line per result checked.
var targetChecks = map[string]func([]load.Result) []string{
	"r1":        r1Targets,
	"r3":        r3Targets,
	"snapshots": snapshotTargets,
	"none":      nil,
}

func writeLines(w io.Writer, lines []string) {
	if len(lines) == 0 {
		return
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Targets (medians):")
	fmt.Fprintln(w)
	for _, l := range lines {
		fmt.Fprintln(w, l)
	}
}

// setting identifies the runs of one setting.
type setting struct {
	system, label                   string
	producers, batch, eventBytes, k int
}

func settingOf(r *load.Result) setting {
	c := r.Config
	return setting{r.System, r.Label, c.Producers, c.Batch, c.EventBytes, c.Keys}
}

// systemOrder puts herald first, then the peers.
func systemOrder(s string) int {
	switch s {
	case "herald":
		return 0
	case "nats-jetstream":
		return 1
	case "rabbitmq":
		return 2
	}
	return 3
}

// summarize returns the median of each setting's runs, ordered by event
// size, producers, batch, then system, with fsyncing settings first.
func summarize(runs []load.Result) []load.Result {
	out := mediansBy(runs, settingOf)
	slices.SortStableFunc(out, func(a, b load.Result) int {
		ca, cb := a.Config, b.Config
		return cmp.Or(
			cmp.Compare(ca.EventBytes, cb.EventBytes),
			cmp.Compare(ca.Producers, cb.Producers),
			cmp.Compare(ca.Batch, cb.Batch),
			cmp.Compare(systemOrder(a.System), systemOrder(b.System)),
			cmp.Compare(a.System, b.System),
			-cmpBool(a.FsyncBeforeAck, b.FsyncBeforeAck),
			cmp.Compare(a.Label, b.Label),
		)
	})
	return out
}

// mediansBy groups runs by the setting that of returns and returns the
// median of each group, in the order the settings first appear.
func mediansBy[S comparable](runs []load.Result, of func(*load.Result) S) []load.Result {
	groups := map[S][]load.Result{}
	var order []S
	for i := range runs {
		s := of(&runs[i])
		if _, ok := groups[s]; !ok {
			order = append(order, s)
		}
		groups[s] = append(groups[s], runs[i])
	}
	var out []load.Result
	for _, s := range order {
		out = append(out, load.Median(groups[s]))
	}
	return out
}

func cmpBool(a, b bool) int {
	switch {
	case a == b:
		return 0
	case a:
		return 1
	}
	return -1
}

func writeTable(w io.Writer, medians []load.Result) {
	fmt.Fprintln(w, "| system | setting | fsync before ack | producers | batch | event bytes | events/s | MB/s | p50 ms | p90 ms | p99 ms | p99.9 ms | max ms | server CPU µs/event | runs | errors |")
	fmt.Fprintln(w, "| --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
	for _, m := range medians {
		c, l := m.Config, m.Latency
		fsync := "yes"
		if !m.FsyncBeforeAck {
			fsync = "**no**"
		}
		fmt.Fprintf(w, "| %s | %s | %s | %d | %d | %d | %.0f | %.1f | %s | %s | %s | %s | %s | %s | %d | %d |\n",
			m.System, m.Label, fsync, c.Producers, c.Batch, c.EventBytes, m.EventsPerSecond, m.MBPerSecond,
			load.FormatMS(l.P50), load.FormatMS(l.P90), load.FormatMS(l.P99), load.FormatMS(l.P999),
			load.FormatMS(l.Max), load.FormatCPU(&m), max(m.Rounds, 1), m.Errors)
	}
}

// r1Targets checks the targets for each load that has herald
// and JetStream results: herald (fsync before ack) at least 10× JetStream
// with sync_interval: always, at least JetStream's default, p99 under 5 ms.
func r1Targets(medians []load.Result) []string {
	type loadKey struct{ producers, batch, eventBytes int }
	var keys []loadKey
	find := func(k loadKey, match func(*load.Result) bool) *load.Result {
		for i := range medians {
			m := &medians[i]
			c := m.Config
			if c.Producers == k.producers && c.Batch == k.batch && c.EventBytes == k.eventBytes && match(m) {
				return m
			}
		}
		return nil
	}
	for _, m := range medians {
		k := loadKey{m.Config.Producers, m.Config.Batch, m.Config.EventBytes}
		if !slices.Contains(keys, k) {
			keys = append(keys, k)
		}
	}
	var lines []string
	for _, k := range keys {
		always := find(k, func(m *load.Result) bool { return m.System == "nats-jetstream" && m.FsyncBeforeAck })
		def := find(k, func(m *load.Result) bool { return m.System == "nats-jetstream" && !m.FsyncBeforeAck })
		for i := range medians {
			h := &medians[i]
			c := h.Config
			if h.System != "herald" || !h.FsyncBeforeAck || c.Producers != k.producers || c.Batch != k.batch || c.EventBytes != k.eventBytes {
				continue
			}
			lines = append(lines, targetLine(h, always, def))
		}
	}
	return lines
}

// targetLine checks herald's result h against JetStream's with
// sync_interval: always and its default (either may be nil).
func targetLine(h, always, def *load.Result) string {
	c := h.Config
	head := fmt.Sprintf("- %d producers, batch %d, %d-byte events, herald (%s):", c.Producers, c.Batch, c.EventBytes, h.Label)
	var parts []string
	if always != nil {
		x := h.EventsPerSecond / always.EventsPerSecond
		parts = append(parts, fmt.Sprintf("%.1f× JetStream sync_interval: always (target ≥ 10×: %s)", x, verdict(x >= 10)))
	}
	if def != nil {
		x := h.EventsPerSecond / def.EventsPerSecond
		parts = append(parts, fmt.Sprintf("%.2f× JetStream's non-fsyncing default (target ≥ 1×: %s)", x, verdict(x >= 1)))
	}
	parts = append(parts, fmt.Sprintf("p99 %s ms (target < 5 ms: %s)", load.FormatMS(h.Latency.P99), verdict(h.Latency.P99 < 5)))
	return head + " " + strings.Join(parts, "; ")
}

func verdict(ok bool) string {
	if ok {
		return "met"
	}
	return "**not met**"
}

// sameLoad reports whether a and b ran the same load.
func sameLoad(a, b *load.Result) bool {
	ca, cb := a.Config, b.Config
	return ca.Producers == cb.Producers && ca.Batch == cb.Batch && ca.EventBytes == cb.EventBytes
}

// r3Targets checks the R3 targets for each herald result (fsync before
// ack) whose load the peers ran too: at least 2× JetStream R3 with
// sync_interval: always, at least RabbitMQ's quorum queue, and p99 at most
// 10 ms at batch 1.
func r3Targets(medians []load.Result) []string {
	var lines []string
	for i := range medians {
		h := &medians[i]
		if h.System != "herald" || !h.FsyncBeforeAck {
			continue
		}
		var parts []string
		for j := range medians {
			p := &medians[j]
			if !sameLoad(h, p) || !p.FsyncBeforeAck {
				continue
			}
			x := h.EventsPerSecond / p.EventsPerSecond
			switch p.System {
			case "nats-jetstream":
				parts = append(parts, fmt.Sprintf("%.2f× JetStream (%s) (target ≥ 2×: %s)", x, p.Label, verdict(x >= 2)))
			case "rabbitmq":
				parts = append(parts, fmt.Sprintf("%.2f× RabbitMQ (%s) (target ≥ 1×: %s)", x, p.Label, verdict(x >= 1)))
			}
		}
		if h.Config.Batch == 1 {
			parts = append(parts, fmt.Sprintf("p99 %s ms (target ≤ 10 ms: %s)", load.FormatMS(h.Latency.P99), verdict(h.Latency.P99 <= 10)))
		}
		if len(parts) > 0 {
			c := h.Config
			lines = append(lines, fmt.Sprintf("- %d producers, batch %d, %d-byte events, herald (%s): %s",
				c.Producers, c.Batch, c.EventBytes, h.Label, strings.Join(parts, "; ")))
		}
	}
	return lines
}

// snapshotTargets compares, for each load, herald with sync snapshots (a
// label with "sync snapshots") and with async ones (the same label with
// "async snapshots"): async p99.9 and max at least 3× lower, throughput no
// lower.
func snapshotTargets(medians []load.Result) []string {
	var lines []string
	for i := range medians {
		sync := &medians[i]
		if sync.System != "herald" || !strings.Contains(sync.Label, "sync snapshots") || strings.Contains(sync.Label, "async snapshots") {
			continue
		}
		want := strings.Replace(sync.Label, "sync snapshots", "async snapshots", 1)
		for j := range medians {
			async := &medians[j]
			if async.System != "herald" || async.Label != want || !sameLoad(sync, async) {
				continue
			}
			p999 := sync.Latency.P999 / async.Latency.P999
			mx := sync.Latency.Max / async.Latency.Max
			tp := async.EventsPerSecond / sync.EventsPerSecond
			c := sync.Config
			lines = append(lines, fmt.Sprintf("- %d producers, batch %d, %d-byte events, herald (%s vs async): "+
				"p99.9 %s vs %s ms, %.2f× lower (target ≥ 3×: %s); max %s vs %s ms, %.2f× lower (target ≥ 3×: %s); "+
				"throughput %.0f vs %.0f events/s, async %.2f× (target ≥ 1×: %s)",
				c.Producers, c.Batch, c.EventBytes, sync.Label,
				load.FormatMS(sync.Latency.P999), load.FormatMS(async.Latency.P999), p999, verdict(p999 >= 3),
				load.FormatMS(sync.Latency.Max), load.FormatMS(async.Latency.Max), mx, verdict(mx >= 3),
				sync.EventsPerSecond, async.EventsPerSecond, tp, verdict(tp >= 1)))
		}
	}
	return lines
}
