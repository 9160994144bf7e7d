package main

import (
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"herald/client"
)

func newSubscriptionSeekCommand(g *globals) *cobra.Command {
	var toTime, toEvent string
	var earliest bool
	cmd := &cobra.Command{
		Use:   "seek TOPIC NAME (--to-time RFC3339 | --to-event ID | --earliest)",
		Short: "Deliver a subscription's events again from a time, an event or the earliest one held",
		Long: `Move a subscription's cursor on every shard of its topic, as Pub/Sub's seek
does: the events a shard holds from the target on are delivered again, in
order, acknowledged ones included; the events before it are passed over, as
if delivered. Dead letters stay in the dead-letter queue.

--to-time goes to the first event published at or after a time;
--to-event to an event (an id from publish) on its shard and to its publish
time on the others; --earliest to the earliest event each shard holds.

How far back a subscription can go is its topic's retention (herald topic
set TOPIC --attr retention=SECONDS): with retention 0, a shard holds only
the events some subscription has still to deliver.`,
		Example: `  herald subscription seek orders billing --to-time 2026-11-26T09:00:00Z
  herald subscription seek orders billing --to-event orders/3/1042
  herald subscription seek orders billing --earliest`,
		Args: nArgs(2, false),
		RunE: func(cmd *cobra.Command, args []string) error {
			var to client.SeekTarget
			set := 0
			if toTime != "" {
				t, err := time.Parse(time.RFC3339Nano, toTime)
				if err != nil {
					return fmt.Errorf("--to-time %q: give a time as RFC 3339, such as 2026-11-26T09:00:00Z: %w", toTime, err)
				}
				to.Time = t
				set++
			}
			if toEvent != "" {
				to.EventID = toEvent
				set++
			}
			if earliest {
				to.Earliest = true
				set++
			}
			if set != 1 {
				return fmt.Errorf("give one of --to-time, --to-event and --earliest")
			}
			n, err := g.client().SeekSubscription(cmd.Context(), args[0], args[1], to)
			if err != nil {
				return g.explain(err)
			}
			if g.json() {
				return writeJSON(cmd.OutOrStdout(), map[string]int64{"replayed": n})
			}
			_, err = fmt.Fprintf(cmd.OutOrStdout(), "sought: %s to deliver again\n", count(int(n), "event"))
			return err
		},
	}
	f := cmd.Flags()
	f.StringVar(&toTime, "to-time", "", "go to the first event published at or after this time (RFC 3339)")
	f.StringVar(&toEvent, "to-event", "", "go to this event (TOPIC/SHARD/OFFSET, as publish returns it)")
	f.BoolVar(&earliest, "earliest", false, "go to the earliest event held")
	return cmd
}
