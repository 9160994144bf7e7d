package compare

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"herald/bench/load"
)

// Report is what a comparison measured; its JSON form is what
// herald-compare prints with --output json and writes with --results.
type Report struct {
	Rounds    int              `json:"rounds"`
	Scenarios []ScenarioResult `json:"scenarios"`
}

// ScenarioResult is what one scenario measured.
type ScenarioResult struct {
	Name  string        `json:"name"`
	Title string        `json:"title"`
	Sides [2]SideResult `json:"sides"`
}

// SideResult is every run of one side of a scenario and their median.
type SideResult struct {
	Label  string        `json:"label"`
	Median load.Result   `json:"median"`
	Runs   []load.Result `json:"runs"`
}

// WriteText writes r for people: a table per scenario, and how the second
// side compares with the first.
func (r *Report) WriteText(w io.Writer) error {
	for n, sc := range r.Scenarios {
		if n > 0 {
			fmt.Fprintln(w)
		}
		fmt.Fprintf(w, "%s: %s\n%s; median of %d rounds\n", sc.Name, sc.Title, sc.Sides[0].Median.Config.Describe(), r.Rounds)
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		row(tw, "SETTING", "EVENTS/S", "MB/S", "P50 MS", "P90 MS", "P99 MS", "P99.9 MS", "MAX MS", "ERRORS")
		for _, side := range sc.Sides {
			m := side.Median
			l := m.Latency
			row(tw, side.Label, fmt.Sprintf("%.0f", m.EventsPerSecond), fmt.Sprintf("%.2f", m.MBPerSecond),
				load.FormatMS(l.P50), load.FormatMS(l.P90), load.FormatMS(l.P99), load.FormatMS(l.P999),
				load.FormatMS(l.Max), fmt.Sprint(m.Errors))
		}
		if err := tw.Flush(); err != nil {
			return err
		}
		a, b := sc.Sides[0].Median, sc.Sides[1].Median
		if _, err := fmt.Fprintf(w, "%s vs %s: %s events/s, p99 %s, p99.9 %s\n", sc.Sides[1].Label, sc.Sides[0].Label,
			ratio(b.EventsPerSecond, a.EventsPerSecond), ratio(b.Latency.P99, a.Latency.P99),
			ratio(b.Latency.P999, a.Latency.P999)); err != nil {
			return err
		}
	}
	return nil
}

// row writes cells as one tab-separated table row.
func row(w io.Writer, cells ...string) {
	fmt.Fprintln(w, strings.Join(cells, "\t"))
}

func ratio(b, a float64) string {
	if a == 0 {
		return "-"
	}
	return fmt.Sprintf("%.2f×", b/a)
}
