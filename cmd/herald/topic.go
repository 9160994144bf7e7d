package main

import (
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"herald/client"
)

func newTopicCommand(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "topic",
		Short: "Create, inspect, change and delete topics",
		Long: `Create, inspect, change and delete topics.

A topic is a named stream of events split into shards; an event's key picks
its shard, and events with the same key are delivered in order. Topic names
are 1 to 128 letters, digits, '_' or '-'.`,
		Example: `  herald topic create orders --shards 4
  herald topic list
  herald topic stats orders`,
	}
	cmd.AddCommand(
		newTopicCreateCommand(g),
		newTopicGetCommand(g),
		newTopicListCommand(g),
		newTopicSetCommand(g),
		newTopicDeleteCommand(g),
		newTopicStatsCommand(g),
	)
	return cmd
}

// attrFlags are the attribute flags of topic create and topic set.
type attrFlags struct {
	shards       int
	persistent   bool
	pushEndpoint string
	attrs        []string
}

func (a *attrFlags) register(cmd *cobra.Command, withShards bool) {
	f := cmd.Flags()
	if withShards {
		f.IntVar(&a.shards, "shards", 0,
			"number of shards, 1 to 1024, fixed at creation (default from the server: 11)")
	}
	f.BoolVar(&a.persistent, "persistent", true,
		"store events durably; --persistent=false pushes synchronously and stores nothing")
	f.StringVar(&a.pushEndpoint, "push-endpoint", "",
		"URI to push events to (http, https, amqp, kafka, nats); empty means pull only")
	f.StringArrayVar(&a.attrs, "attr", nil,
		"attribute as name=value, such as max_retries=5 (repeatable)")
}

// collect returns the attributes the user gave, from --attr and from the
// named flags, which may not both set the same attribute.
func (a *attrFlags) collect(cmd *cobra.Command) (map[string]string, error) {
	attrs, err := parsePairs("attr", a.attrs)
	if err != nil {
		return nil, err
	}
	if attrs == nil {
		attrs = map[string]string{}
	}
	err = addNamedFlags(cmd, attrs, []namedFlag{
		{"shards", "shards", strconv.Itoa(a.shards)},
		{"persistent", "persistent", strconv.FormatBool(a.persistent)},
		{"push-endpoint", "push_endpoint", a.pushEndpoint},
	})
	return attrs, err
}

// A namedFlag is a flag that sets an attribute, such as --push-endpoint.
type namedFlag struct{ flag, attr, value string }

// addNamedFlags adds to attrs the attributes of the named flags the user
// gave, refusing one that --attr set too.
func addNamedFlags(cmd *cobra.Command, attrs map[string]string, named []namedFlag) error {
	for _, n := range named {
		if f := cmd.Flags().Lookup(n.flag); f == nil || !f.Changed {
			continue
		}
		if _, dup := attrs[n.attr]; dup {
			return fmt.Errorf("%s is set by both --%s and --attr: give it once", n.attr, n.flag)
		}
		attrs[n.attr] = n.value
	}
	return nil
}

func newTopicCreateCommand(g *globals) *cobra.Command {
	var a attrFlags
	cmd := &cobra.Command{
		Use:   "create NAME",
		Short: "Create a topic",
		Long: `Create a topic and all its shards, and print it with every attribute.

Attributes not given take their defaults: persistent=true, shards=11, no push
endpoint (pull consumers only), events kept until acknowledged. The shard
count cannot change later. Other attributes (time_to_live, max_retries,
retry_sleep_duration, max_queue_bytes, retention, opaque_data, endpoint
options) are set with --attr name=value.`,
		Example: `  herald topic create orders
  herald topic create orders --shards 32 --attr max_retries=10
  herald topic create hooks --push-endpoint https://example.com/hook --persistent=false`,
		Args: nArgs(1, false),
		RunE: func(cmd *cobra.Command, args []string) error {
			attrs, err := a.collect(cmd)
			if err != nil {
				return err
			}
			t, err := g.client().CreateTopic(cmd.Context(), args[0], attrs)
			if err != nil {
				return g.explain(err)
			}
			return g.printTopic(cmd.OutOrStdout(), t)
		},
	}
	a.register(cmd, true)
	return cmd
}

func newTopicGetCommand(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "get NAME",
		Short: "Show a topic and its attributes",
		Long:  "Show a topic: its name, creation and update times, and every attribute.",
		Example: `  herald topic get orders
  herald topic get orders -o json`,
		Args: nArgs(1, false),
		RunE: func(cmd *cobra.Command, args []string) error {
			t, err := g.client().GetTopic(cmd.Context(), args[0])
			if err != nil {
				return g.explain(err)
			}
			return g.printTopic(cmd.OutOrStdout(), t)
		},
	}
}

func newTopicListCommand(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "list",
		Short: "List topics",
		Long: `List every topic with its shard count, persistence and push endpoint.
With --output json, print every topic with all its attributes.`,
		Example: `  herald topic list
  herald topic list -o json`,
		Args: nArgs(0, false),
		RunE: func(cmd *cobra.Command, _ []string) error {
			topics, err := g.client().ListTopics(cmd.Context())
			if err != nil {
				return g.explain(err)
			}
			return g.printTopics(cmd.OutOrStdout(), topics)
		},
	}
}

func newTopicSetCommand(g *globals) *cobra.Command {
	var a attrFlags
	cmd := &cobra.Command{
		Use:   "set NAME --attr name=value...",
		Short: "Change attributes of a topic",
		Long: `Change attributes of a topic, leave the others as they are, and print the
topic. The shard count cannot change: to change it, create a new topic.`,
		Example: `  herald topic set orders --attr max_retries=5 --attr retry_sleep_duration=10
  herald topic set orders --push-endpoint https://example.com/hook`,
		Args: nArgs(1, false),
		RunE: func(cmd *cobra.Command, args []string) error {
			attrs, err := a.collect(cmd)
			if err != nil {
				return err
			}
			if len(attrs) == 0 {
				return fmt.Errorf("nothing to set: give --attr name=value, --persistent or --push-endpoint")
			}
			t, err := g.client().SetTopicAttributes(cmd.Context(), args[0], attrs)
			if err != nil {
				return g.explain(err)
			}
			return g.printTopic(cmd.OutOrStdout(), t)
		},
	}
	a.register(cmd, false)
	return cmd
}

func newTopicDeleteCommand(g *globals) *cobra.Command {
	var force bool
	cmd := &cobra.Command{
		Use:   "delete NAME",
		Short: "Delete a topic and all its events",
		Long: `Delete a topic, all its shards and all their events, delivered or not. This
cannot be undone.

A topic that still holds events not yet acknowledged, or dead letters, is
deleted only once confirmed: on a terminal, delete asks, saying how many
events go; otherwise (a script) it refuses unless --force is given.`,
		Example: `  herald topic delete orders
  herald topic delete orders --force`,
		Args: nArgs(1, false),
		RunE: func(cmd *cobra.Command, args []string) error {
			name := args[0]
			held, err := g.heldEvents(cmd, name)
			if err != nil {
				return err
			}
			if held.any() && !force {
				if err := confirmDelete(cmd, name, held); err != nil {
					return err
				}
			}
			if err := g.client().DeleteTopic(cmd.Context(), name); err != nil {
				return g.explain(err)
			}
			w := cmd.OutOrStdout()
			if g.json() {
				return writeJSON(w, map[string]any{"name": name, "deleted": true,
					"events": strconv.FormatUint(held.events, 10), "deadLetters": strconv.FormatUint(held.deadLetters, 10)})
			}
			if !held.any() {
				_, err = fmt.Fprintf(w, "deleted topic %s\n", name)
				return err
			}
			_, err = fmt.Fprintf(w, "deleted topic %s with %s\n", name, held)
			return err
		},
	}
	cmd.Flags().BoolVar(&force, "force", false,
		"delete without asking, even a topic holding events not yet acknowledged or dead letters")
	return cmd
}

func newTopicStatsCommand(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "stats NAME",
		Short: "Show the counters of a topic, per shard and in total",
		Long: `Show the counters of a topic as a table: one row per shard and a total row.

EVENTS and BYTES count committed events not yet acknowledged; RESERVED and
RESERVATIONS the space held for two-phase publishes; OLDEST the age of the
oldest unacknowledged event; PUBLISHED, ACKED and LEASED count events; NEXT
is the offset the next event gets and HEAD the first unacknowledged offset.
ERROR says why a shard cannot serve, if it cannot.

On a node that tiers to object storage (serve --tier-url), LRO is the
shard's last reconciled log index (what it still needs up to there is in
the object store), LOCAL BYTES the size of its log on the answering node's
disk, TIERED BYTES what the object store holds of it, and TIER ERROR why
the last tiering cycle of the shard's leader failed, if it did.

For a push topic, the node that leads a shard adds how its pushes are
going, which it keeps in memory since it became leader: FAILING counts the
failed attempts since the last success, LAST OK is how long ago the last
push succeeded, and LAST PUSH ERROR is the last failure, how long ago and
why. A shard led by another node shows "?": ask that node (herald cluster
status names the leaders).`,
		Example: `  herald topic stats orders
  herald topic stats orders -o json`,
		Args: nArgs(1, false),
		RunE: func(cmd *cobra.Command, args []string) error {
			s, err := g.client().TopicStats(cmd.Context(), args[0])
			if err != nil {
				return g.explain(err)
			}
			if g.json() {
				return writeJSON(cmd.OutOrStdout(), s)
			}
			return printStats(cmd.OutOrStdout(), s, time.Now())
		},
	}
}

func (g *globals) printTopic(w io.Writer, t *client.Topic) error {
	if g.json() {
		return writeJSON(w, t)
	}
	tw := newTable(w)
	row(tw, "Name:", t.Name)
	row(tw, "Created:", timeText(t.CreatedAt))
	row(tw, "Updated:", timeText(t.UpdatedAt))
	row(tw, "Attributes:")
	for _, k := range sortedKeys(t.Attributes) {
		row(tw, "  "+k, t.Attributes[k])
	}
	return tw.Flush()
}

func (g *globals) printTopics(w io.Writer, topics []*client.Topic) error {
	if g.json() {
		return writeJSON(w, topics)
	}
	if len(topics) == 0 {
		_, err := fmt.Fprintln(w, "no topics")
		return err
	}
	tw := newTable(w)
	row(tw, "NAME", "SHARDS", "PERSISTENT", "PUSH ENDPOINT")
	for _, t := range topics {
		a := t.Attributes
		row(tw, t.Name, orDash(a["shards"]), orDash(a["persistent"]), orDash(a["push_endpoint"]))
	}
	return tw.Flush()
}

func printStats(w io.Writer, s *client.TopicStats, now time.Time) error {
	tw := newTable(w)
	header := []any{"SHARD", "NAME", "EVENTS", "BYTES", "RESERVED", "RESERVATIONS", "OLDEST",
		"PUBLISHED", "ACKED", "LEASED", "DELIVERED", "RETRIED", "DEAD", "NEXT", "HEAD", "ERROR"}
	// Delivery health only comes from the leaders of push topics' shards.
	health := s.Total.Delivery != nil || slices.ContainsFunc(s.Shards, func(st client.ShardStats) bool { return st.Delivery != nil })
	if health {
		header = append(header, "FAILING", "LAST OK", "LAST PUSH ERROR")
	}
	// Tiering's columns only for a tiered topic.
	tiered := s.Total.TieredBytes > 0 || s.Total.TierError != "" || slices.ContainsFunc(s.Shards, func(st client.ShardStats) bool { return st.LRO > 0 })
	if tiered {
		header = append(header, "LRO", "LOCAL BYTES", "TIERED BYTES", "TIER ERROR")
	}
	row(tw, header...)
	statsRow := func(shard string, st client.ShardStats) {
		cells := []any{shard, st.Name, st.Events, st.Bytes, st.ReservedBytes, st.Reservations,
			ageText(st.OldestEventTime, now), st.Published, st.Acked, st.Leased,
			st.Delivered, st.Retried, st.DeadLetters, st.NextOffset, st.Head, orDash(st.Error)}
		if health {
			cells = append(cells, healthCells(st.Delivery, now)...)
		}
		if tiered {
			cells = append(cells, orDash(lroText(st.LRO)), st.LocalBytes, st.TieredBytes, orDash(st.TierError))
		}
		row(tw, cells...)
	}
	for _, st := range s.Shards {
		statsRow(strconv.Itoa(st.Shard), st)
	}
	total := s.Total
	if total.Name == "" {
		total.Name = s.Name
	}
	statsRow("total", total)
	return tw.Flush()
}

// lroText is an LRO as a cell: none in a total.
func lroText(lro uint64) string {
	if lro == 0 {
		return ""
	}
	return strconv.FormatUint(lro, 10)
}

// healthCells are a shard's FAILING, LAST OK and LAST PUSH ERROR; "?" for
// a shard whose leader is another node, which alone knows them.
func healthCells(h *client.DeliveryHealth, now time.Time) []any {
	if h == nil {
		return []any{"?", "?", "? (ask the shard's leader)"}
	}
	lastErr := "-"
	if !h.LastErrorTime.IsZero() {
		// One line per row, whatever the endpoint answered.
		lastErr = ageText(h.LastErrorTime, now) + " ago: " + strings.Join(strings.Fields(h.LastError), " ")
	}
	lastOK := "-"
	if !h.LastSuccess.IsZero() {
		lastOK = ageText(h.LastSuccess, now) + " ago"
	}
	return []any{h.ConsecutiveFailures, lastOK, lastErr}
}
