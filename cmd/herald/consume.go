package main

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"

	"herald/client"
)

// maxBackoff bounds the pause between retries of a failing fetch in
// --follow mode.
const maxBackoff = 30 * time.Second

type consumeFlags struct {
	max        int
	batch      int
	visibility time.Duration
	wait       time.Duration
	follow     bool
	noAck      bool
}

func newConsumeCommand(g *globals) *cobra.Command {
	var f consumeFlags
	cmd := &cobra.Command{
		Use:   "consume TOPIC",
		Short: "Fetch events from a topic, print them and acknowledge them",
		Long: `Fetch events from a topic, print them, then acknowledge them so they are
not handed out again (unless --no-ack: then they are handed out again when
--visibility ends).

Each event is printed on one line as "ID KEY PAYLOAD", with "-" for an empty
key; a payload that is not printable UTF-8 text is shown as "base64:" and its
base64 encoding. With --output json, each event is one JSON object per line,
with the payload in base64.

Without --follow, consume stops when a fetch returns nothing (after waiting
up to --wait) or after --max events. With --follow, it keeps fetching until
interrupted (Ctrl-C or SIGTERM); it then acknowledges what it printed and
exits cleanly.`,
		Example: `  herald consume orders
  herald consume orders --follow -o json | jq -r '.payload | @base64d'
  herald consume orders --max 10 --no-ack`,
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
}

// run fetches, prints and acknowledges events until it should stop. An
// interruption (ctx done) is a clean stop, not an error.
func (c *consumer) run(ctx context.Context) error {
	backoff := time.Second
	for !c.reachedMax() && ctx.Err() == nil {
		events, err := c.c.Fetch(ctx, c.topic, c.fetchOptions())
		switch {
		case ctx.Err() != nil:
			return nil
		case err != nil && c.flags.follow && client.IsRetryable(err):
			fmt.Fprintf(c.errOut, "herald: fetch: %s; retrying in %v\n", errorMessage(err), backoff)
			sleep(ctx, backoff)
			backoff = min(2*backoff, maxBackoff)
			continue
		case err != nil:
			return fmt.Errorf("fetch: %w", err)
		}
		backoff = time.Second
		if len(events) == 0 {
			if !c.flags.follow {
				return nil
			}
			if c.flags.wait == 0 {
				sleep(ctx, time.Second) // the server did not wait: do not spin
			}
			continue
		}
		if err := c.handle(ctx, events); err != nil {
			return err
		}
	}
	return nil
}

func (c *consumer) reachedMax() bool {
	return c.flags.max > 0 && c.done >= c.flags.max
}

func (c *consumer) fetchOptions() client.FetchOptions {
	n := c.flags.batch
	if c.flags.max > 0 {
		n = min(n, c.flags.max-c.done)
	}
	return client.FetchOptions{MaxEvents: n, VisibilityTimeout: c.flags.visibility, Wait: c.flags.wait}
}

// handle prints events and acknowledges them. The acknowledgement is sent
// even when ctx is done, so that what was printed is not handed out again.
func (c *consumer) handle(ctx context.Context, events []client.Delivery) error {
	ids := make([]string, len(events))
	for i, d := range events {
		if err := c.print(d); err != nil {
			return err
		}
		ids[i] = d.ID
	}
	c.done += len(events)
	if c.flags.noAck {
		return nil
	}
	if _, err := c.c.Ack(context.WithoutCancel(ctx), ids...); err != nil {
		return fmt.Errorf("ack %d events: %w", len(ids), err)
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

// sleep pauses for d or until ctx is done.
func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}
