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

func newSubscriptionCommand(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "subscription",
		Short: "Create, inspect, change, disable and delete a topic's subscriptions",
		Long: `Create, inspect, change, disable and delete the subscriptions of a topic.

A subscription receives a topic's events: at a push endpoint (http, https,
amqp, amqps, kafka, nats) or, without one, by pull. It may filter them with an
AWS SNS filter policy on the events' headers or JSON body (filter_policy,
filter_policy_scope) or by key (key_prefix), and has its own delivery
settings: the delivery attributes of a topic (max_retries, time_to_live,
signing_secret, ...) plus max_events_per_second, max_in_flight,
disable_after, start (now or earliest, fixed at creation) and message_format
(herald's envelope, or sns: AWS SNS's JSON notification, raw with
raw_message_delivery).

A topic's own push_endpoint (or pull) is its default subscription, named
"default", with id 0: its settings are the topic's attributes (herald topic
set changes them). Deleting it detaches it; creating it attaches it again.

herald subscription list and get show how far behind each subscription is
(its lag), what it delivered, and how its pushes are going.`,
		Example: `  herald subscription create orders billing --push-endpoint https://billing.example.com/hook \
      --filter-policy '{"type": ["order.paid"]}'
  herald subscription list orders
  herald subscription disable orders billing --reason "endpoint moving"`,
	}
	cmd.AddCommand(
		newSubscriptionCreateCommand(g),
		newSubscriptionGetCommand(g),
		newSubscriptionListCommand(g),
		newSubscriptionSetCommand(g),
		newSubscriptionDeleteCommand(g),
		newSubscriptionEnableCommand(g),
		newSubscriptionDisableCommand(g),
		newSubscriptionSeekCommand(g),
	)
	return cmd
}

// subAttrFlags are the attribute flags of subscription create and set.
type subAttrFlags struct {
	pushEndpoint string
	filterPolicy string
	attrs        []string
}

func (a *subAttrFlags) register(cmd *cobra.Command) {
	f := cmd.Flags()
	f.StringVar(&a.pushEndpoint, "push-endpoint", "",
		"URI to push events to (http, https, amqp, kafka, nats); empty means pull only")
	f.StringVar(&a.filterPolicy, "filter-policy", "",
		`AWS SNS filter policy (JSON) the events must match, such as '{"type": ["order.paid"]}'`)
	f.StringArrayVar(&a.attrs, "attr", nil,
		"attribute as name=value, such as max_retries=5 or key_prefix=eu/ (repeatable)")
}

// collect returns the attributes the user gave, from --attr and from the
// named flags, which may not both set the same attribute.
func (a *subAttrFlags) collect(cmd *cobra.Command) (map[string]string, error) {
	attrs, err := parsePairs("attr", a.attrs)
	if err != nil {
		return nil, err
	}
	if attrs == nil {
		attrs = map[string]string{}
	}
	err = addNamedFlags(cmd, attrs, []namedFlag{
		{"push-endpoint", "push_endpoint", a.pushEndpoint},
		{"filter-policy", "filter_policy", a.filterPolicy},
	})
	return attrs, err
}

func newSubscriptionCreateCommand(g *globals) *cobra.Command {
	var a subAttrFlags
	cmd := &cobra.Command{
		Use:   "create TOPIC NAME",
		Short: "Create a subscription of a topic",
		Long: `Create a subscription of a topic, and print it with every attribute.

Attributes not given take their defaults: no push endpoint (pull), no
filter, start=now (only events published from now on), disable_after=432000
(5 days of failing deliveries). Names are 1 to 128 letters, digits, '_' or
'-'. Creating "default", without attributes, attaches the topic's default
subscription again after it was deleted.`,
		Example: `  herald subscription create orders audit
  herald subscription create orders billing --push-endpoint https://billing.example.com/hook \
      --filter-policy '{"type": ["order.paid"]}' --attr start=earliest
  herald subscription create orders eu --attr filter_policy_scope=MessageBody \
      --filter-policy '{"region": [{"prefix": "eu-"}]}'`,
		Args: nArgs(2, false),
		RunE: func(cmd *cobra.Command, args []string) error {
			attrs, err := a.collect(cmd)
			if err != nil {
				return err
			}
			sub, err := g.client().CreateSubscription(cmd.Context(), args[0], args[1], attrs)
			if err != nil {
				return g.explain(err)
			}
			return g.printSubscription(cmd.OutOrStdout(), sub)
		},
	}
	a.register(cmd)
	return cmd
}

func newSubscriptionGetCommand(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "get TOPIC NAME",
		Short: "Show a subscription, its statistics and its attributes",
		Long: `Show a subscription: its id, whether it is disabled and why, its creation
and update times, how far behind it is and how its deliveries are going, every
attribute, and its counters per shard.

Lag counts the events it has yet to deliver and says how long ago the oldest
of them was published. Delivered, skipped (its filter rejected them), retried
(failed attempts) and dead-lettered count its own deliveries since it was
created. Health is its pushes' last error and when, the failed attempts since
the last success and since when, and the last success; it lives in the memory
of each shard's leader, so a node answers for the shards it leads ("?" for the
others: herald cluster status names their leaders).`,
		Example: `  herald subscription get orders billing
  herald subscription get orders default -o json`,
		Args: nArgs(2, false),
		RunE: func(cmd *cobra.Command, args []string) error {
			sub, err := g.client().GetSubscriptionWithStats(cmd.Context(), args[0], args[1])
			if err != nil {
				return g.explain(err)
			}
			return g.printSubscription(cmd.OutOrStdout(), sub)
		},
	}
}

func newSubscriptionListCommand(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "list TOPIC",
		Short: "List the subscriptions of a topic",
		Long: `List the subscriptions of a topic with their id, state, push endpoint and
filter, and how they are doing: LAG is the events each has yet to deliver and
OLDEST how long ago the oldest of them was published; DELIVERED and DEAD count
the events it delivered and the dead letters it holds; HEALTH is "ok", "failing
(N)" with the failed attempts since the last success, "paused" when the
endpoint asked to wait, "?" when the shards are led by other nodes, which
alone know, and "-" for pull and disabled subscriptions. The default subscription comes
first (unless detached), then the others by name. With --output json, print
every subscription with all its attributes and statistics.`,
		Example: `  herald subscription list orders
  herald subscription list orders -o json`,
		Args: nArgs(1, false),
		RunE: func(cmd *cobra.Command, args []string) error {
			subs, err := g.client().ListSubscriptionsWithStats(cmd.Context(), args[0])
			if err != nil {
				return g.explain(err)
			}
			return g.printSubscriptions(cmd.OutOrStdout(), args[0], subs)
		},
	}
}

func newSubscriptionSetCommand(g *globals) *cobra.Command {
	var a subAttrFlags
	cmd := &cobra.Command{
		Use:   "set TOPIC NAME --attr name=value...",
		Short: "Change attributes of a subscription",
		Long: `Change attributes of a subscription, leave the others as they are, and print
the subscription. start cannot change: it applies when a subscription is
created. The default subscription's settings are its topic's: change them
with herald topic set.`,
		Example: `  herald subscription set orders billing --attr max_retries=5 --attr key_prefix=eu/
  herald subscription set orders billing --filter-policy '{"type": ["order.paid", "order.refunded"]}'`,
		Args: nArgs(2, false),
		RunE: func(cmd *cobra.Command, args []string) error {
			attrs, err := a.collect(cmd)
			if err != nil {
				return err
			}
			if len(attrs) == 0 {
				return fmt.Errorf("nothing to set: give --attr name=value, --push-endpoint or --filter-policy")
			}
			sub, err := g.client().SetSubscriptionAttributes(cmd.Context(), args[0], args[1], attrs)
			if err != nil {
				return g.explain(err)
			}
			return g.printSubscription(cmd.OutOrStdout(), sub)
		},
	}
	a.register(cmd)
	return cmd
}

func newSubscriptionDeleteCommand(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "delete TOPIC NAME",
		Short: "Delete a subscription",
		Long: `Delete a subscription. The topic and its events stay. Deleting the default
subscription detaches it: the topic keeps its attributes, and
"herald subscription create TOPIC default" attaches it again.`,
		Example: `  herald subscription delete orders billing
  herald subscription delete orders default`,
		Args: nArgs(2, false),
		RunE: func(cmd *cobra.Command, args []string) error {
			topicName, name := args[0], args[1]
			if err := g.client().DeleteSubscription(cmd.Context(), topicName, name); err != nil {
				return g.explain(err)
			}
			w := cmd.OutOrStdout()
			if g.json() {
				return writeJSON(w, map[string]any{"topic": topicName, "name": name, "deleted": true})
			}
			if name == client.DefaultSubscription {
				_, err := fmt.Fprintf(w, "detached the default subscription of topic %s; herald subscription create %s default attaches it again\n", topicName, topicName)
				return err
			}
			_, err := fmt.Fprintf(w, "deleted subscription %s of topic %s\n", name, topicName)
			return err
		},
	}
}

func newSubscriptionEnableCommand(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:     "enable TOPIC NAME",
		Short:   "Let a disabled subscription deliver again",
		Long:    "Enable a disabled subscription, so that it delivers again, and print it. Enabling an enabled subscription changes nothing.",
		Example: `  herald subscription enable orders billing`,
		Args:    nArgs(2, false),
		RunE: func(cmd *cobra.Command, args []string) error {
			sub, err := g.client().EnableSubscription(cmd.Context(), args[0], args[1])
			if err != nil {
				return g.explain(err)
			}
			return g.printSubscription(cmd.OutOrStdout(), sub)
		},
	}
}

func newSubscriptionDisableCommand(g *globals) *cobra.Command {
	var reason string
	cmd := &cobra.Command{
		Use:   "disable TOPIC NAME [--reason TEXT]",
		Short: "Stop a subscription's delivery until it is enabled",
		Long: `Disable a subscription: it delivers nothing until enabled again. The reason
is recorded and shown with it. Disabling a disabled subscription keeps the
first reason and time.`,
		Example: `  herald subscription disable orders billing --reason "billing is migrating"`,
		Args:    nArgs(2, false),
		RunE: func(cmd *cobra.Command, args []string) error {
			sub, err := g.client().DisableSubscription(cmd.Context(), args[0], args[1], reason)
			if err != nil {
				return g.explain(err)
			}
			return g.printSubscription(cmd.OutOrStdout(), sub)
		},
	}
	cmd.Flags().StringVar(&reason, "reason", "", "why, for whoever reads the subscription (at most 1024 bytes)")
	return cmd
}

func (g *globals) printSubscription(w io.Writer, s *client.Subscription) error {
	if g.json() {
		return writeJSON(w, s)
	}
	return printSubscriptionText(w, s, time.Now())
}

// printSubscriptionText writes s, and its statistics if it has them, as
// of now.
func printSubscriptionText(w io.Writer, s *client.Subscription, now time.Time) error {
	tw := newTable(w)
	row(tw, "Topic:", s.Topic)
	row(tw, "Name:", s.Name)
	row(tw, "ID:", s.ID)
	row(tw, "State:", stateText(s))
	row(tw, "Created:", timeText(s.CreatedAt))
	row(tw, "Updated:", timeText(s.UpdatedAt))
	if st := s.Stats; st != nil {
		row(tw, "Lag:", lagText(st, now))
		row(tw, "Delivered:", st.Delivered)
		row(tw, "Skipped:", fmt.Sprintf("%d (rejected by the filter)", st.Skipped))
		row(tw, "Retried:", fmt.Sprintf("%d (failed attempts)", st.Retried))
		row(tw, "Dead letters:", fmt.Sprintf("%d held, %d in all", st.DeadLetters, st.DeadLettered))
		row(tw, "Health:", healthText(s, now))
	}
	row(tw, "Attributes:")
	for _, k := range sortedKeys(s.Attributes) {
		row(tw, "  "+k, s.Attributes[k])
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(s.ShardStats) == 0 {
		return nil
	}
	if _, err := fmt.Fprintln(w, "Shards:"); err != nil {
		return err
	}
	return printSubscriptionShards(w, s, now)
}

// printSubscriptionShards writes a subscription's counters per shard;
// push subscriptions' rows end with the health columns of topic stats.
func printSubscriptionShards(w io.Writer, s *client.Subscription, now time.Time) error {
	tw := newTable(w)
	push := isPush(s)
	header := []any{"SHARD", "NAME", "LAG", "OLDEST", "DELIVERED", "SKIPPED", "RETRIED", "DEAD", "ERROR"}
	if push {
		header = append(header, "FAILING", "LAST OK", "LAST PUSH ERROR")
	}
	row(tw, header...)
	for _, st := range s.ShardStats {
		cells := []any{st.Shard, st.Name, st.Events, ageText(st.OldestEventTime, now), st.Delivered,
			st.Skipped, st.Retried, st.DeadLetters, orDash(st.Error)}
		if push {
			cells = append(cells, healthCells(st.Delivery, now)...)
		}
		row(tw, cells...)
	}
	return tw.Flush()
}

// isPush says whether s pushes to an endpoint rather than waiting for
// pull consumers.
func isPush(s *client.Subscription) bool {
	return s.Attributes["push_endpoint"] != ""
}

// lagText says how many events a subscription has yet to deliver, their
// bytes, and how long ago the oldest was published.
func lagText(st *client.ShardStats, now time.Time) string {
	text := fmt.Sprintf("%s (%d bytes)", count(int(st.Events), "event"), st.Bytes)
	if !st.OldestEventTime.IsZero() {
		text += ", the oldest published " + ageText(st.OldestEventTime, now) + " ago"
	}
	if st.Error != "" {
		text += "; incomplete: " + st.Error
	}
	return text
}

// healthText says how a subscription's pushes are going, as far as the
// answering node knows: it keeps the health of the shards it leads.
func healthText(s *client.Subscription, now time.Time) string {
	if !isPush(s) {
		return "- (pull: consumers fetch its events)"
	}
	h := s.Stats.Delivery
	if h == nil && s.Disabled {
		// Its shards run no dispatcher, which keeps the health.
		return "- (disabled: not delivering)"
	}
	if h == nil {
		return "? (known to each shard's leader, another node: herald cluster status names them)"
	}
	var parts []string
	if h.ConsecutiveFailures > 0 {
		failing := fmt.Sprintf("failing: %s since the last success", count(int(h.ConsecutiveFailures), "failed attempt"))
		if !h.FailingSince.IsZero() {
			failing += ", for " + ageText(h.FailingSince, now)
		}
		parts = append(parts, failing)
	} else {
		parts = append(parts, "ok")
	}
	if h.PausedUntil.After(now) {
		parts = append(parts, "paused for "+ageText(now, h.PausedUntil)+" more, as the endpoint asked (Retry-After)")
	}
	if !h.LastSuccess.IsZero() {
		parts = append(parts, "last success "+ageText(h.LastSuccess, now)+" ago")
	} else {
		parts = append(parts, "no success yet")
	}
	if !h.LastErrorTime.IsZero() {
		// One line, whatever the endpoint answered.
		parts = append(parts, "last error "+ageText(h.LastErrorTime, now)+" ago: "+strings.Join(strings.Fields(h.LastError), " "))
	}
	text := strings.Join(parts, "; ")
	if slices.ContainsFunc(s.ShardStats, func(st client.ShardStats) bool { return st.Delivery == nil && st.Error == "" }) {
		text += " (shards led by other nodes not included)"
	}
	return text
}

// healthCell is a subscription's HEALTH in a list: "-" for pull or
// disabled, "?" when other nodes lead its shards, else ok, failing or
// paused.
func healthCell(s *client.Subscription, now time.Time) string {
	switch {
	case !isPush(s), s.Disabled && s.Stats != nil && s.Stats.Delivery == nil:
		return "-"
	case s.Stats == nil || s.Stats.Delivery == nil:
		return "?"
	case s.Stats.Delivery.ConsecutiveFailures > 0:
		return fmt.Sprintf("failing (%d)", s.Stats.Delivery.ConsecutiveFailures)
	case s.Stats.Delivery.PausedUntil.After(now):
		return "paused"
	}
	return "ok"
}

func (g *globals) printSubscriptions(w io.Writer, topicName string, subs []*client.Subscription) error {
	if g.json() {
		return writeJSON(w, subs)
	}
	if len(subs) == 0 {
		_, err := fmt.Fprintf(w, "topic %s has no subscriptions (its default one is detached)\n", topicName)
		return err
	}
	return printSubscriptionsText(w, subs, time.Now())
}

// printSubscriptionsText writes subs as a table, with their statistics
// as of now.
func printSubscriptionsText(w io.Writer, subs []*client.Subscription, now time.Time) error {
	tw := newTable(w)
	row(tw, "NAME", "ID", "STATE", "LAG", "OLDEST", "DELIVERED", "DEAD", "HEALTH", "PUSH ENDPOINT", "FILTER")
	for _, s := range subs {
		a := s.Attributes
		state := "enabled"
		if s.Disabled {
			state = "disabled"
		}
		// One line per row, however the policy was written.
		filter := strings.Join(strings.Fields(a["filter_policy"]), " ")
		cells := []any{s.Name, s.ID, state}
		cells = append(cells, statsCells(s.Stats, now)...)
		cells = append(cells, healthCell(s, now), orDash(a["push_endpoint"]), orDash(filter))
		row(tw, cells...)
	}
	return tw.Flush()
}

// statsCells are a subscription's LAG, OLDEST, DELIVERED and DEAD in a
// list; "?" for a lag that a shard could not count.
func statsCells(st *client.ShardStats, now time.Time) []any {
	if st == nil {
		return []any{"-", "-", "-", "-"}
	}
	lag := strconv.FormatUint(st.Events, 10)
	if st.Error != "" {
		lag = "?"
	}
	return []any{lag, ageText(st.OldestEventTime, now), st.Delivered, st.DeadLetters}
}

// stateText says whether s delivers and, if not, since when and why.
func stateText(s *client.Subscription) string {
	if !s.Disabled {
		return "enabled"
	}
	text := "disabled since " + timeText(s.DisabledAt)
	if s.DisabledReason != "" {
		text += ": " + s.DisabledReason
	}
	return text
}
