package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"herald/client"
)

// eventFlags are the flags that shape the events of publish and commit.
type eventFlags struct {
	key     string
	headers []string
}

func (e *eventFlags) register(cmd *cobra.Command) {
	f := cmd.Flags()
	f.StringVar(&e.key, "key", "", "key of every event: it picks the shard, and events with one key are delivered in order")
	f.StringArrayVar(&e.headers, "header", nil, "header of every event as Name=value (repeatable)")
}

type publishFlags struct {
	eventFlags
	file    string
	batch   int
	keyed   bool
	retries int
}

func newPublishCommand(g *globals) *cobra.Command {
	var p publishFlags
	cmd := &cobra.Command{
		Use:   "publish TOPIC [PAYLOAD...]",
		Short: "Publish events to a topic",
		Long: `Publish events to a topic and print their ids, one per line.

Each PAYLOAD argument is one event. Without PAYLOAD arguments, each line of
--file (or of standard input, without --file) is one event; empty lines are
skipped. Events are sent --batch at a time, or fewer when more would make a
request larger than the server's request limit (64 MiB); each batch
returns once its events are committed, and their ids are printed then.

Every event gets the --key and --header values. With --keyed, each line or
argument is KEY<TAB>PAYLOAD instead, and the key is taken from it.

A batch that fails because the server is unreachable, restarting or full is
sent again, up to --retries attempts in all. Every event gets a random dedup
id, so a batch that was partly committed before the failure is not
published twice: the retry prints the ids the committed events got.

With --output json, one object per event: {"id": ..., "key": ...}.`,
		Example: `  herald publish orders --key customer-42 '{"total":12}'
  herald publish orders --header Content-Type=application/json --file events.jsonl
  printf 'a\tone\nb\ttwo\n' | herald publish orders --keyed
  tail -f app.log | herald publish logs --batch 10`,
		Args: nArgs(1, true),
		RunE: func(cmd *cobra.Command, args []string) error {
			return g.publish(cmd, &p, args[0], args[1:])
		},
	}
	p.register(cmd)
	f := cmd.Flags()
	f.StringVarP(&p.file, "file", "f", "", `read one event per line from this file ("-": standard input)`)
	f.IntVar(&p.batch, "batch", 100, "events per publish request")
	f.BoolVar(&p.keyed, "keyed", false, "each line or argument is KEY<TAB>PAYLOAD")
	f.IntVar(&p.retries, "retries", 5, "attempts per batch while the server is unreachable, restarting or full (1: no retry); retries are idempotent")
	return cmd
}

func (g *globals) publish(cmd *cobra.Command, p *publishFlags, topic string, payloads []string) error {
	if p.batch < 1 {
		return fmt.Errorf("--batch %d: want at least 1", p.batch)
	}
	if p.retries < 1 {
		return fmt.Errorf("--retries %d: want at least 1 (1 sends each batch once)", p.retries)
	}
	if p.file != "" && len(payloads) > 0 {
		return errors.New("give PAYLOAD arguments or --file, not both")
	}
	headers, err := parsePairs("header", p.headers)
	if err != nil {
		return err
	}
	c := g.client()
	if p.retries > 1 {
		c = client.New(g.server, append(g.clientOptions(), client.WithPublishRetries(p.retries))...)
	}
	b := &batcher{
		publish: func(ctx context.Context, events []client.Event) ([]string, error) {
			return c.Publish(ctx, topic, events...)
		},
		size:     p.batch,
		maxBytes: client.MaxRequestBytes - len(topic) - 16, // less the request's topic field
		print:    g.idPrinter(cmd.OutOrStdout()),
	}
	mk := eventMaker{key: p.key, headers: headers, keyed: p.keyed}
	ctx := cmd.Context()
	if len(payloads) > 0 {
		err = publishArgs(ctx, b, mk, payloads)
	} else {
		err = publishLines(cmd, b, mk, p.file)
	}
	if err == nil {
		err = b.flush(ctx)
	}
	if err != nil && b.sent > 0 {
		err = fmt.Errorf("%w\n%d events were published before this error", err, b.sent)
	}
	return g.explain(err)
}

func publishArgs(ctx context.Context, b *batcher, mk eventMaker, payloads []string) error {
	for i, s := range payloads {
		e, err := mk.make([]byte(s))
		if err == nil {
			err = b.fits(e)
		}
		if err != nil {
			return fmt.Errorf("payload argument %d: %w", i+1, err)
		}
		if err := b.add(ctx, e); err != nil {
			return err
		}
	}
	return nil
}

func publishLines(cmd *cobra.Command, b *batcher, mk eventMaker, file string) error {
	r, name, closeFn, err := openInput(cmd, file)
	if err != nil {
		return err
	}
	defer closeFn()
	ctx := cmd.Context()
	lines := startLineReader(ctx, r)
	defer lines.stop()
	for {
		var it lineItem
		select {
		case <-ctx.Done():
			return nil // interrupted: what was read is published by the caller
		case it = <-lines.items:
		}
		switch {
		case it.err != nil:
			return fmt.Errorf("read %s: %w", name, it.err)
		case it.eof:
			return nil
		case it.idle:
			err = b.flush(ctx)
		default:
			err = b.addLine(ctx, mk, name, it)
		}
		if err != nil {
			return err
		}
	}
}

// openInput opens file, or standard input for "" and "-". It returns the
// reader, a name for error messages and a function that closes it.
func openInput(cmd *cobra.Command, file string) (io.Reader, string, func(), error) {
	if file != "" && file != "-" {
		f, err := os.Open(file)
		if err != nil {
			return nil, "", nil, fmt.Errorf("--file: %w", err)
		}
		return f, file, func() { f.Close() }, nil
	}
	in := cmd.InOrStdin()
	f, ok := in.(*os.File)
	if !ok {
		return in, "standard input", func() {}, nil
	}
	if isTerminal(f) {
		fmt.Fprintln(cmd.ErrOrStderr(), "reading events from standard input, one per line; end with Ctrl-D")
	}
	// So that an interruption can stop the reading goroutine (lineReader).
	if polled, ok := reopenForPolling(f); ok {
		return polled, "standard input", func() { polled.Close() }, nil
	}
	return in, "standard input", func() {}, nil
}

func isTerminal(f *os.File) bool {
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}

// eventMaker turns a payload argument or line into an event.
type eventMaker struct {
	key     string
	headers map[string]string
	keyed   bool
}

func (m eventMaker) make(data []byte) (client.Event, error) {
	e := client.Event{Key: m.key, Payload: data, Headers: m.headers}
	if !m.keyed {
		return e, nil
	}
	key, payload, ok := bytes.Cut(data, []byte("\t"))
	if !ok {
		return client.Event{}, errors.New("no TAB between key and payload (--keyed wants KEY<TAB>PAYLOAD)")
	}
	e.Key, e.Payload = string(key), payload
	return e, nil
}

// batcher sends events size at a time, or fewer when more would take a
// request over maxBytes or when the input pauses, and prints their ids.
// Keeping each batch to one request (rather than leaving the client to
// split it) keeps the count of events published before an error exact.
type batcher struct {
	publish      func(context.Context, []client.Event) ([]string, error)
	size         int
	maxBytes     int
	print        func(ids []string, events []client.Event) error
	pending      []client.Event
	pendingBytes int // client.EventBytes of pending
	sent         int
}

// addLine adds the event of a line of input.
func (b *batcher) addLine(ctx context.Context, mk eventMaker, input string, it lineItem) error {
	e, err := mk.make(it.line)
	if err == nil {
		err = b.fits(e)
	}
	if err != nil {
		return fmt.Errorf("%s line %d: %w", input, it.n, err)
	}
	return b.add(ctx, e)
}

// fits refuses an event that no request can carry.
func (b *batcher) fits(e client.Event) error {
	if n := client.EventBytes(e); b.maxBytes > 0 && n > b.maxBytes {
		return fmt.Errorf("the event is %d bytes, more than a request to the server may carry (%d bytes); split it", n, b.maxBytes)
	}
	return nil
}

func (b *batcher) add(ctx context.Context, e client.Event) error {
	n := client.EventBytes(e)
	if b.maxBytes > 0 && b.pendingBytes+n > b.maxBytes {
		if err := b.flush(ctx); err != nil {
			return err
		}
	}
	b.pending = append(b.pending, e)
	b.pendingBytes += n
	if len(b.pending) < b.size {
		return nil
	}
	return b.flush(ctx)
}

func (b *batcher) flush(ctx context.Context) error {
	if len(b.pending) == 0 {
		return nil
	}
	// Once read, events are published even if herald is interrupted.
	ids, err := b.publish(context.WithoutCancel(ctx), b.pending)
	if err != nil {
		return err
	}
	b.sent += len(b.pending)
	events := b.pending
	b.pending, b.pendingBytes = nil, 0
	return b.print(ids, events)
}

// idPrinter prints the ids of published events: one per line, or one JSON
// object per line.
func (g *globals) idPrinter(w io.Writer) func([]string, []client.Event) error {
	return func(ids []string, events []client.Event) error {
		if g.json() {
			return printIDsJSON(w, ids, events)
		}
		_, err := io.WriteString(w, strings.Join(ids, "\n")+"\n")
		return err
	}
}

func printIDsJSON(w io.Writer, ids []string, events []client.Event) error {
	type published struct {
		ID  string `json:"id"`
		Key string `json:"key"`
	}
	for i, id := range ids {
		p := published{ID: id}
		if i < len(events) {
			p.Key = events[i].Key
		}
		if err := writeJSONLine(w, p); err != nil {
			return err
		}
	}
	return nil
}
