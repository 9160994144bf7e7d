package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"herald/client"
)

func newReserveCommand(g *globals) *cobra.Command {
	var (
		key   string
		size  uint64
		count uint32
	)
	cmd := &cobra.Command{
		Use:   "reserve TOPIC --key KEY --bytes N",
		Short: "Hold space for a two-phase publish",
		Long: `Hold space in the shard of KEY for a later "herald commit", and print the
reservation id. This is the first step of a two-phase publish: reserve, do
your own work, then commit the events or abort. A reservation not committed
in time expires and its space is released.

--bytes must cover the keys, payloads and header names and values of the
events to commit. A full shard refuses the reservation; retry later.`,
		Example: `  id=$(herald reserve orders --key customer-42 --bytes 4096)
  herald commit "$id" --key customer-42 '{"total":12}'`,
		Args: nArgs(1, false),
		RunE: func(cmd *cobra.Command, args []string) error {
			r, err := g.client().Reserve(cmd.Context(), args[0], key, size, count)
			if err != nil {
				return g.explain(err)
			}
			if g.json() {
				return writeJSON(cmd.OutOrStdout(), r)
			}
			_, err = fmt.Fprintln(cmd.OutOrStdout(), r.ID)
			return err
		},
	}
	f := cmd.Flags()
	f.StringVar(&key, "key", "", "key of the events to commit; it picks the shard")
	f.Uint64Var(&size, "bytes", 0, "bytes to hold")
	f.Uint32Var(&count, "count", 0, "number of events to commit (0: any)")
	cmd.MarkFlagRequired("key")
	cmd.MarkFlagRequired("bytes")
	return cmd
}

func newCommitCommand(g *globals) *cobra.Command {
	var e eventFlags
	cmd := &cobra.Command{
		Use:   "commit RESERVATION_ID PAYLOAD...",
		Short: "Commit events into a reservation",
		Long: `Commit events into the space of a reservation made by "herald reserve", and
print their ids, one per line. Each PAYLOAD argument is one event. Every
event's key must route to the reservation's shard: use the key given to
reserve.`,
		Example: `  herald commit "$id" --key customer-42 '{"total":12}'
  herald commit "$id" --key customer-42 --header Type=paid first second`,
		Args: nArgs(2, true),
		RunE: func(cmd *cobra.Command, args []string) error {
			headers, err := parsePairs("header", e.headers)
			if err != nil {
				return err
			}
			events := make([]client.Event, 0, len(args)-1)
			for _, p := range args[1:] {
				events = append(events, client.Event{Key: e.key, Payload: []byte(p), Headers: headers})
			}
			ids, err := g.client().Commit(cmd.Context(), args[0], events...)
			if err != nil {
				return g.explain(err)
			}
			return g.idPrinter(cmd.OutOrStdout())(ids, events)
		},
	}
	e.register(cmd)
	return cmd
}

func newAbortCommand(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "abort RESERVATION_ID",
		Short: "Release a reservation",
		Long: `Release a reservation made by "herald reserve" without committing
anything. Aborting twice is not an error.`,
		Example: `  herald abort "$id"`,
		Args:    nArgs(1, false),
		RunE: func(cmd *cobra.Command, args []string) error {
			id := args[0]
			if err := g.client().Abort(cmd.Context(), id); err != nil {
				return g.explain(err)
			}
			if g.json() {
				return writeJSON(cmd.OutOrStdout(), map[string]any{"reservationId": id, "aborted": true})
			}
			_, err := fmt.Fprintf(cmd.OutOrStdout(), "aborted %s\n", id)
			return err
		},
	}
}
