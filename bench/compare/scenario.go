// Package compare runs herald with two settings side by side: it starts
// its own herald servers from a herald binary, runs the two settings of
// each scenario one after the other for several rounds, alternating which
// goes first, and reports the median of each figure. It is the library of
// bench/cmd/herald-compare.
package compare

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// Side is one of the two settings a scenario compares.
type Side struct {
	Label string
	// SyncSnapshots runs the side on a server that writes its snapshots
	// on the apply loop (HERALD_BENCH_SYNC_SNAPSHOTS=1).
	SyncSnapshots bool
	// Push makes the topic non-persistent, pushing to the comparison's
	// HTTP sink.
	Push       bool
	Shards     int // 0: Options.Shards
	Batch      int
	EventBytes int
}

// Scenario is one comparison of two settings.
type Scenario struct {
	Name  string // also names its topics
	Group string // what the command line selects it by
	Title string
	Sides [2]Side
}

// Scenarios lists every comparison there is, by group.
func Scenarios() []Scenario {
	var list []Scenario
	for _, size := range []int{1024, 4096} {
		kib := strconv.Itoa(size/1024) + "KiB"
		list = append(list, Scenario{
			Name: "shards-" + kib, Group: "shards",
			Title: "1 shard vs 11 shards, " + kib + " events",
			Sides: [2]Side{
				{Label: "1 shard", Shards: 1, Batch: 1, EventBytes: size},
				{Label: "11 shards", Shards: 11, Batch: 1, EventBytes: size},
			},
		})
	}
	for _, batch := range []int{1, 500} {
		n := strconv.Itoa(batch)
		list = append(list, Scenario{
			Name: "snapshots-batch" + n, Group: "snapshots",
			Title: "snapshots on the apply loop vs in the background, batch " + n,
			Sides: [2]Side{
				{Label: "sync snapshots", SyncSnapshots: true, Batch: batch, EventBytes: 1024},
				{Label: "async snapshots", Batch: batch, EventBytes: 1024},
			},
		})
	}
	list = append(list, Scenario{
		Name: "persistence", Group: "persistence",
		Title: "persistent (fsync) vs non-persistent (synchronous push to a local HTTP sink)",
		Sides: [2]Side{
			{Label: "persistent", Batch: 1, EventBytes: 1024},
			{Label: "non-persistent", Push: true, Batch: 1, EventBytes: 1024},
		},
	})
	return list
}

// Select returns the scenarios of the groups named, in the order of
// Scenarios; no names, or "all", selects every one.
func Select(names []string) ([]Scenario, error) {
	all := Scenarios()
	if len(names) == 0 || slices.Contains(names, "all") {
		return all, nil
	}
	var groups []string
	for _, s := range all {
		if !slices.Contains(groups, s.Group) {
			groups = append(groups, s.Group)
		}
	}
	for _, n := range names {
		if !slices.Contains(groups, n) {
			return nil, fmt.Errorf("unknown scenario %q: want one of %s, or all", n, strings.Join(groups, ", "))
		}
	}
	var out []Scenario
	for _, s := range all {
		if slices.Contains(names, s.Group) {
			out = append(out, s)
		}
	}
	return out, nil
}
