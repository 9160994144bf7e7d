package main

import (
	"fmt"

	"github.com/spf13/cobra"
)

func newDLQCommand(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "dlq",
		Short: "Inspect, replay and purge a topic's dead letters",
		Long: `A push topic dead-letters an event it gives up on: one older than the topic's
time_to_live, one that failed max_retries times, or one its endpoint refused
for good (for example HTTP 400). Dead letters keep their event, the reason and
the last error, survive restarts, and take space in their shard until they are
replayed or purged. Each subscription has its own: --subscription picks one
(default: the topic's default subscription), and a replay queues the events
again for that subscription alone.`,
		Example: `  herald dlq list orders
  herald dlq replay orders --all
  herald dlq purge orders orders/3/17
  herald dlq list orders --subscription billing`,
	}
	sub := cmd.PersistentFlags().String("subscription", "", "the subscription whose dead letters (default: the topic's default subscription)")
	cmd.AddCommand(newDLQListCommand(g, sub), newDLQReplayCommand(g, sub), newDLQPurgeCommand(g, sub))
	return cmd
}

func newDLQListCommand(g *globals, sub *string) *cobra.Command {
	var max int
	cmd := &cobra.Command{
		Use:   "list TOPIC",
		Short: "List dead letters with their reason and last error",
		Long: `List a topic's dead letters, shard by shard in offset order: id, key, reason
(expired, max_retries or rejected), failed attempts, when it was given up on,
the last delivery error and the payload.`,
		Example: "  herald dlq list orders --max 20\n  herald dlq list orders -o json",
		Args:    nArgs(1, false),
		RunE: func(cmd *cobra.Command, args []string) error {
			dls, err := g.client().ListSubscriptionDeadLetters(cmd.Context(), args[0], *sub, max)
			if err != nil {
				return g.explain(err)
			}
			w := cmd.OutOrStdout()
			if g.json() {
				for _, dl := range dls {
					if err := writeJSONLine(w, dl); err != nil {
						return err
					}
				}
				return nil
			}
			tw := newTable(w)
			row(tw, "ID", "KEY", "REASON", "ATTEMPTS", "DEAD AT", "LAST ERROR", "PAYLOAD")
			for _, dl := range dls {
				row(tw, dl.ID, orDash(dl.Key), dl.Reason, dl.Attempt, timeText(dl.DeadAt), orDash(dl.LastError), payloadText(dl.Payload))
			}
			return tw.Flush()
		},
	}
	cmd.Flags().IntVar(&max, "max", 100, "list at most this many")
	return cmd
}

// dlqChange is replay or purge: both take ids or --all.
func dlqChange(g *globals, use, short, long, example, verb string,
	call func(cmd *cobra.Command, topic string, ids []string) (int, error)) *cobra.Command {
	var all bool
	cmd := &cobra.Command{
		Use: use, Short: short, Long: long, Example: example,
		Args: nArgs(1, true),
		RunE: func(cmd *cobra.Command, args []string) error {
			ids := args[1:]
			if all == (len(ids) > 0) {
				return fmt.Errorf("give dead-letter ids (from herald dlq list) or --all, not both and not neither")
			}
			n, err := call(cmd, args[0], ids)
			if err != nil {
				return g.explain(err)
			}
			if g.json() {
				return writeJSON(cmd.OutOrStdout(), map[string]int{verb: n})
			}
			_, err = fmt.Fprintf(cmd.OutOrStdout(), "%s %s\n", verb, count(n, "dead letter"))
			return err
		},
	}
	cmd.Flags().BoolVar(&all, "all", false, "every dead letter of the topic")
	return cmd
}

func newDLQReplayCommand(g *globals, sub *string) *cobra.Command {
	return dlqChange(g, "replay TOPIC [ID...] [--all]", "Put dead letters back into the topic",
		`Put dead letters back into their topic as new events (new ids), in their
original order, so they are delivered again. Fix the endpoint first.`,
		"  herald dlq replay orders --all\n  herald dlq replay orders orders/3/17 orders/3/18",
		"replayed",
		func(cmd *cobra.Command, topic string, ids []string) (int, error) {
			return g.client().ReplaySubscriptionDeadLetters(cmd.Context(), topic, *sub, ids...)
		})
}

func newDLQPurgeCommand(g *globals, sub *string) *cobra.Command {
	return dlqChange(g, "purge TOPIC [ID...] [--all]", "Delete dead letters for good",
		`Delete dead letters and their events for good, freeing their space.`,
		"  herald dlq purge orders --all\n  herald dlq purge orders orders/3/17",
		"purged",
		func(cmd *cobra.Command, topic string, ids []string) (int, error) {
			return g.client().PurgeSubscriptionDeadLetters(cmd.Context(), topic, *sub, ids...)
		})
}
