package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"herald/client"
	"herald/internal/backoff"
)

// fetchRetryPause is how long consume --follow pauses before it retries
// a fetch that failed while the server was unavailable. The jitter keeps
// many consumers from returning to a recovering server all at once.
var fetchRetryPause = backoff.Policy{Initial: time.Second, Max: 30 * time.Second, Jitter: 0.2}

type consumeFlags struct {
	max             int
	batch           int
	visibility      time.Duration
	wait            time.Duration
	follow          bool
	noAck           bool
	allowUnreadable bool
	subscription    string
}

func newConsumeCommand(g *globals) *cobra.Command {
	var f consumeFlags
	cmd := &cobra.Command{
		Use:   "consume TOPIC",
		Short: "Fetch events from a topic, print them and acknowledge them",
		Long: `Fetch events from a topic, print them, then acknowledge them so they are
not handed out again (unless --no-ack: then they are handed out again when
--visibility ends).

With --subscription NAME, consume fetches from that pull subscription of the
topic (one without push_endpoint) rather than from its default one. Each
subscription gets every event its filter passes and keeps its own progress:
acknowledging an event in one leaves it pending in the others.

Each event is printed on one line as "ID KEY PAYLOAD", with "-" for an empty
key; a payload that is not printable UTF-8 text is shown as "base64:" and its
base64 encoding. With --output json, each event is one JSON object per line,
as the API's Fetch returns it (id, topic, shard, offset, key, payload in
base64, headers, time, deliveryAttempt, receipt).

Without --follow, consume stops when a fetch returns nothing (after waiting
up to --wait) or after --max events. With --follow, it keeps fetching until
interrupted (Ctrl-C or SIGTERM); it then acknowledges what it printed and
exits cleanly.

A shard the server cannot read (for example because its log is damaged) is
never taken for an empty one: consume prints one line on stderr naming the
shard and the reason, once, and again only if the reason changes. With
--output json it also prints, among the events on stdout, a line
{"unreadableShard":{"topic":"orders","shard":1,"name":"orders.1","reason":"..."}}.
It still prints and acknowledges the events of the other shards, then exits
with status 1 (with --follow, as soon as it sees the unreadable shard).

With --allow-unreadable it only warns, keeps consuming the readable shards
and exits 0; with --follow it also keeps retrying while no shard can be
read. Without --follow, a topic none of whose shards can be read fails with
status 1 even with --allow-unreadable.

Exit status: 0 when done or interrupted; 1 on any error, including shards
that could not be read (unless --allow-unreadable).`,
		Example: `  herald consume orders
  herald consume orders --follow -o json | jq -r 'select(.id) | .payload | @base64d'
  herald consume orders --max 10 --no-ack
  herald consume orders --subscription billing --follow
  herald consume orders --follow --allow-unreadable`,
		Args: nArgs(1, false),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := f.check(); err != nil {
				return err
			}
			c := &consumer{
				c: g.client(), topic: args[0], flags: f,
				out: cmd.OutOrStdout(), errOut: cmd.ErrOrStderr(), json: g.json(),
			}
			return g.explain(c.run(cmd.Context()))
		},
	}
	fl := cmd.Flags()
	fl.IntVar(&f.max, "max", 0, "stop after this many events (0: no limit)")
	fl.IntVar(&f.batch, "batch", 100, "events per fetch, 1 to 10000")
	fl.DurationVar(&f.visibility, "visibility", 30*time.Second,
		"how long fetched events stay leased before they may be handed out again")
	fl.DurationVar(&f.wait, "wait", 5*time.Second, "how long each fetch waits for events when none is available (at most 60s)")
	fl.BoolVar(&f.follow, "follow", false, "keep fetching until interrupted")
	fl.BoolVar(&f.noAck, "no-ack", false, "do not acknowledge the events")
	fl.StringVar(&f.subscription, "subscription", "",
		"the pull subscription of the topic to consume from (default: the topic's default subscription)")
	fl.BoolVar(&f.allowUnreadable, "allow-unreadable", false,
		"only warn about shards the server cannot read, and exit 0 (default: exit 1 once the readable events are consumed)")
	return cmd
}

func (f *consumeFlags) check() error {
	switch {
	case f.max < 0:
		return fmt.Errorf("--max %d: want 0 (no limit) or more", f.max)
	case f.batch < 1 || f.batch > 10000:
		return fmt.Errorf("--batch %d: want 1 to 10000", f.batch)
	case f.visibility < 0:
		return fmt.Errorf("--visibility %v: want a positive duration", f.visibility)
	case f.wait < 0:
		return fmt.Errorf("--wait %v: want 0 or more", f.wait)
	}
	return nil
}

type consumer struct {
	c      *client.Client
	topic  string
	flags  consumeFlags
	out    io.Writer
	errOut io.Writer
	json   bool
	done   int // events printed so far

	// unread holds the reason last reported for each shard that could
	// not be read, so that each is reported once per change, not per poll.
	unread map[int]string
	missed bool // some shard could not be read at some point
	// onlyOpening: every shard that could not be read was still opening.
	onlyOpening bool
	// waitOpening is until when shards still opening are waited for
	// rather than reported (zero with --follow: for ever); opening is set
	// while some are.
	waitOpening time.Time
	opening     bool
}

// run fetches, prints and acknowledges events until it should stop. An
// interruption (ctx done) is a clean stop, not an error.
func (c *consumer) run(ctx context.Context) error {
	retry := backoff.New(fetchRetryPause)
	c.onlyOpening = true
	if !c.flags.follow {
		c.waitOpening = time.Now().Add(c.flags.wait)
	}
	for !c.reachedMax() && ctx.Err() == nil {
		events, partial, err := c.fetch(ctx)
		switch {
		case ctx.Err() != nil:
			return nil
		case err != nil && c.flags.follow && client.IsRetryable(err):
			pause := retry.Next()
			if !errors.As(err, new(*client.UnreadableError)) { // those were reported once
				fmt.Fprintf(c.errOut, "herald: %s; retrying in %v\n", errorMessage(err), pause.Round(time.Millisecond))
			}
			backoff.Sleep(ctx, pause)
			continue
		case err != nil:
			return err
		}
		retry.Reset()
		if len(events) > 0 {
			if err := c.handle(ctx, events); err != nil {
				return err
			}
		}
		if partial && c.flags.follow && !c.flags.allowUnreadable {
			return c.unreadableError(false)
		}
		if len(events) == 0 {
			if c.opening {
				backoff.Sleep(ctx, startingPoll) // the server opens them: ask again
				continue
			}
			if !c.flags.follow {
				break
			}
			if c.flags.wait == 0 {
				backoff.Sleep(ctx, time.Second) // the server did not wait: do not spin
			}
		}
	}
	if c.missed && !c.flags.allowUnreadable && ctx.Err() == nil {
		return c.unreadableError(false)
	}
	return nil
}

// fetch fetches the next batch and reports the shards that could not be
// read. partial is true when some could not: events are the others'. When
// none could, the error is the client's *UnreadableError if --follow and
// --allow-unreadable say to keep trying, and the reason to stop otherwise.
func (c *consumer) fetch(ctx context.Context) (events []client.Delivery, partial bool, err error) {
	opts := c.fetchOptions()
	events, err = c.c.Fetch(ctx, c.topic, opts)
	var unread *client.UnreadableError
	if err != nil && !errors.As(err, &unread) {
		return nil, false, fmt.Errorf("fetch: %w", err)
	}
	// A shard still opening (the server has just started) is not an
	// unreadable one: it is waited for, within --wait.
	c.opening = unread != nil && allOpening(unread.Shards) &&
		(c.waitOpening.IsZero() || time.Now().Before(c.waitOpening))
	if c.opening {
		return events, false, nil
	}
	if err := c.report(unread, len(events) < opts.MaxEvents); err != nil {
		return nil, false, err
	}
	switch {
	case unread == nil:
		return events, false, nil
	case !unread.All():
		return events, true, nil
	case c.flags.follow && c.flags.allowUnreadable:
		return nil, false, err
	}
	return nil, false, c.unreadableError(true)
}

// report prints the shards of u that were not reported yet, or whose
// reason changed: one line each on stderr and, with --output json, one on
// stdout. u is nil when every shard was read. A shard missing from u is
// forgotten, to be reported again if it fails again, only when the batch
// was not full: only then did the server look at every shard.
func (c *consumer) report(u *client.UnreadableError, notFull bool) error {
	if c.unread == nil {
		c.unread = make(map[int]string)
	}
	listed := make(map[int]bool)
	if u != nil {
		c.missed = true
		c.onlyOpening = c.onlyOpening && allOpening(u.Shards)
		for _, s := range u.Shards {
			listed[s.Shard] = true
			if reason, ok := c.unread[s.Shard]; ok && reason == s.Reason {
				continue
			}
			c.unread[s.Shard] = s.Reason
			if err := c.warn(s); err != nil {
				return err
			}
		}
	}
	if notFull {
		for shard := range c.unread {
			if !listed[shard] {
				delete(c.unread, shard)
			}
		}
	}
	return nil
}

// unreadableLine is how --output json reports a shard that could not be
// read, on a line of its own among the events.
type unreadableLine struct {
	Shard struct {
		Topic string `json:"topic"`
		client.UnreadableShard
	} `json:"unreadableShard"`
}

func (c *consumer) warn(s client.UnreadableShard) error {
	fmt.Fprintf(c.errOut, "herald: shard %s (index %d) of topic %q could not be read: %s\n", s.Name, s.Shard, c.topic, s.Reason)
	if !c.json {
		return nil
	}
	var line unreadableLine
	line.Shard.Topic = c.topic
	line.Shard.UnreadableShard = s
	return writeJSONLine(c.out, line)
}

// unreadableError is the error consume exits with when shards could not be
// read (none when all is set); the shards and reasons were printed as they
// were found.
func (c *consumer) unreadableError(all bool) error {
	if c.onlyOpening {
		return fmt.Errorf("topic %q: shards still opening (listed above): the server has just started\n"+
			"consume again once it is ready (herald wait --ready), or give --wait the time it needs", c.topic)
	}
	if all {
		return fmt.Errorf("topic %q: no shard could be read (listed above)\n"+
			"repair or restore those shards (see the server log); with --follow --allow-unreadable, consume waits for them",
			c.topic)
	}
	done := ""
	switch {
	case c.done > 0 && c.flags.noAck:
		done = "; the events of the other shards were printed (not acknowledged: --no-ack)"
	case c.done > 0:
		done = "; the events of the other shards were printed and acknowledged"
	}
	return fmt.Errorf("topic %q: some shards could not be read (listed above)%s\n"+
		"repair or restore those shards (see the server log), or pass --allow-unreadable to consume the readable shards without failing",
		c.topic, done)
}

// allOpening reports whether every shard listed is still opening, as a
// server that has just started says of the shards it has not opened yet.
func allOpening(shards []client.UnreadableShard) bool {
	for _, s := range shards {
		if !strings.Contains(s.Reason, " is still opening (") {
			return false
		}
	}
	return len(shards) > 0
}

func (c *consumer) reachedMax() bool {
	return c.flags.max > 0 && c.done >= c.flags.max
}

func (c *consumer) fetchOptions() client.FetchOptions {
	n := c.flags.batch
	if c.flags.max > 0 {
		n = min(n, c.flags.max-c.done)
	}
	return client.FetchOptions{MaxEvents: n, VisibilityTimeout: c.flags.visibility, Wait: c.flags.wait, Subscription: c.flags.subscription}
}

// handle prints events and acknowledges them by their receipts. The
// acknowledgement is sent even when ctx is done, so that what was printed
// is not handed out again. Receipts that lapsed (the events were handed
// out again, to another consumer, before this one acked) are a warning:
// the events are with their new holders.
func (c *consumer) handle(ctx context.Context, events []client.Delivery) error {
	receipts := make([]string, len(events))
	for i, d := range events {
		if err := c.print(d); err != nil {
			return err
		}
		receipts[i] = cmp.Or(d.Receipt, d.ID)
	}
	c.done += len(events)
	if c.flags.noAck {
		return nil
	}
	_, err := c.c.AckSubscription(context.WithoutCancel(ctx), c.flags.subscription, receipts...)
	var lapsed *client.LapsedError
	if errors.As(err, &lapsed) {
		_, err = fmt.Fprintf(c.errOut, "herald consume: warning: %v; a --visibility longer than the time to handle a batch avoids this\n", err)
	}
	if err != nil {
		return fmt.Errorf("ack %d events: %w", len(receipts), err)
	}
	return nil
}

func (c *consumer) print(d client.Delivery) error {
	if c.json {
		return writeJSONLine(c.out, d)
	}
	_, err := fmt.Fprintf(c.out, "%s %s %s\n", d.ID, orDash(d.Key), payloadText(d.Payload))
	return err
}
