// Package delivery pushes a shard's events to its topic's endpoint. One
// Dispatcher runs per shard, on the node that leads the shard. It reads
// pending events from the delivery head, sends them with bounded
// concurrency and at most one event in flight per key — so each key is
// delivered in order while a slow or failing key never holds up the others
// — retries failures with backoff, dead-letters events past their
// time_to_live or max_retries, and records outcomes (delivered, attempted,
// dead-lettered) through the shard's log in batches.
//
// A dispatcher may also be told to spare its endpoint: at most
// Config.MaxPerSecond sends a second; nothing at all, for the whole
// dispatcher, for as long as the endpoint asks with Retry-After; and, with
// a disable policy (Config.OnDisable), nothing more once the endpoint says
// it is gone or has failed every push for Config.DisableAfter, until its
// owner stops it and, later, starts another.
package delivery

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"time"

	"herald/internal/backoff"
	"herald/internal/endpoint"
	"herald/internal/shard"
	"herald/internal/topic"
)

// Event is a pending event as the dispatcher reads it from its shard.
type Event struct {
	Offset   uint64
	Event    shard.Event
	Time     time.Time // publish time
	Attempts uint32    // failed attempts recorded so far
}

// Log is the dispatcher's view of its shard.
type Log interface {
	// Read returns up to max pending events (neither acknowledged nor
	// dead-lettered) with offsets >= from, in offset order, and the offset
	// to read from next.
	Read(ctx context.Context, from uint64, max int) ([]Event, uint64, error)
	// Propose replicates a shard command and returns its result.
	Propose(ctx context.Context, cmd *shard.Command) (shard.Result, error)
	// Seeks returns a number that changes when the subscription's
	// cursor may have been moved by a seek (see consume.Leases.Seeks),
	// and a channel closed when it next changes (nil: never): the
	// dispatcher then drops its read-ahead window, which may lack events
	// the seek made pending again, and reads from the head.
	Seeks() (n uint64, changed <-chan struct{})
}

// Metrics receives delivery outcomes. Its methods must be safe for
// concurrent use; nil methods are not called.
type Metrics interface {
	Delivered(topic, scheme string, latency time.Duration)
	Retried(topic, scheme string)
	DeadLettered(topic, scheme, reason string)
}

// DefaultMaxInFlight bounds a dispatcher's concurrent sends unless its
// Config says otherwise (herald serve's --delivery-concurrency).
const DefaultMaxInFlight = 16

// Config configures a Dispatcher.
type Config struct {
	Topic       string
	Shard       int
	Attributes  topic.Attributes
	Endpoint    endpoint.Endpoint
	Scheme      string  // endpoint scheme, for metrics
	Metrics     Metrics // optional
	MaxInFlight int     // DefaultMaxInFlight concurrent sends
	Window      int     // 10,000 events read ahead of the head
	WindowBytes int     // 16 MiB of payload read ahead
	Logger      interface {
		Warn(msg string, args ...any)
		Info(msg string, args ...any)
	}

	// MaxPerSecond caps the sends a second of this dispatcher, retries
	// included, with a token bucket whose burst is a tenth of a second's
	// worth (at least one send). A send waits for a token; the wait ends at
	// once on Stop. 0 (or a negative or infinite rate) is no cap.
	MaxPerSecond float64

	// OnDisable, if set, is the disable policy: the dispatcher calls it
	// when the endpoint answers that it no longer exists (an
	// endpoint.ErrGone error, HTTP 410) or, with DisableAfter, when every
	// push has failed for that long, and from then on sends nothing until
	// it is stopped. The event that was refused stays pending, as do all
	// the others: nothing is acknowledged, counted as an attempt or
	// dead-lettered because of the disabling (see Start for time_to_live).
	// OnDisable is called once in the dispatcher's life, with a reason for
	// people. It runs on the dispatcher's goroutine, so it must return
	// promptly and must not call Stop, which waits for that goroutine:
	// record the decision and stop the dispatcher from another goroutine.
	//
	// Without OnDisable nothing is disabled, and a 410 is dead-lettered as
	// rejected, like any refusal.
	OnDisable func(reason string)
	// DisableAfter, if positive, disables the endpoint once pushes have
	// failed, without a success between them, for this long, counted from
	// the first failure of the run. It is checked at each failure, so the
	// call comes with the first failure at or past the mark, at most one
	// retry delay later. Only with OnDisable.
	DisableAfter time.Duration

	// Admit, if set, says which events are for this dispatcher's
	// subscription: its filter. An event it rejects is not sent; it is
	// recorded done with a Skip, and holds up no other event of its key.
	// It must be safe to call from the dispatcher's goroutine while the
	// owner reads nothing it changes: a pure function of the event.
	Admit func(e *shard.Event) bool

	now func() time.Time // for tests
}

// unavailablePause is how long the dispatcher pauses, after a failure to
// read or record events, before it tries its shard again; the jitter keeps
// the dispatchers of many shards that lost their leader together from
// coming back all at once.
var unavailablePause = backoff.Policy{Initial: 50 * time.Millisecond, Max: 5 * time.Second, Jitter: 0.2}

// Dead-letter reasons.
const (
	ReasonExpired    = "expired"     // older than time_to_live
	ReasonMaxRetries = "max_retries" // failed max_retries times
	ReasonRejected   = "rejected"    // the endpoint refused it permanently
)

// Dispatcher delivers one shard's events. Start it with Start; Stop ends
// it and waits for its sends to finish.
type Dispatcher struct {
	cfg  Config
	log  Log
	wake chan struct{}
	stop context.CancelFunc
	done chan struct{}

	health health
}

// Start runs a dispatcher until Stop or ctx ends.
//
// time_to_live is checked as events come up to be sent, against their
// publish time: while the endpoint has asked to pause (Retry-After) the
// dispatcher still dead-letters events past it, as it does for events
// waiting for a retry. Once it has disabled the endpoint it looks at no
// event at all, so it dead-letters nothing; when its owner starts a new
// dispatcher after enabling the endpoint again, the events that outlived
// their time_to_live meanwhile are dead-lettered as expired, and the rest
// delivered in order. The topic's time_to_live is what bounds how long
// events wait for a disabled endpoint.
func Start(ctx context.Context, log Log, cfg Config) *Dispatcher {
	if cfg.MaxInFlight <= 0 {
		cfg.MaxInFlight = DefaultMaxInFlight
	}
	if cfg.Window <= 0 {
		cfg.Window = 10000
	}
	if cfg.WindowBytes <= 0 {
		cfg.WindowBytes = 16 << 20
	}
	if cfg.now == nil {
		cfg.now = time.Now
	}
	ctx, cancel := context.WithCancel(ctx)
	d := &Dispatcher{cfg: cfg, log: log, wake: make(chan struct{}, 1), stop: cancel, done: make(chan struct{})}
	go func() {
		defer close(d.done)
		newRun(d).loop(ctx)
	}()
	return d
}

// Notify tells the dispatcher that new events may be pending.
func (d *Dispatcher) Notify() {
	select {
	case d.wake <- struct{}{}:
	default:
	}
}

// Health reports how the dispatcher's pushes are going.
func (d *Dispatcher) Health() Health { return d.health.get() }

// Stop ends the dispatcher and waits for it. Sends in flight are
// cancelled; their events stay pending and are delivered again later.
func (d *Dispatcher) Stop() {
	d.stop()
	<-d.done
}

// item is an event in the read-ahead window.
type item struct {
	Event
	inFlight bool
	settled  bool      // outcome recorded or being recorded: skip it
	retryAt  time.Time // not before this time
	lastErr  string
}

type outcome struct {
	it  *item
	err error
	dur time.Duration
}

// run is the state of one dispatcher loop; only the loop goroutine
// touches it.
type run struct {
	d        *Dispatcher
	window   []*item
	bytes    int
	readFrom uint64
	seeks    uint64          // Log.Seeks when the window was last read from the head
	sought   <-chan struct{} // closed at the next seek
	inFlight int
	results  chan outcome
	senders  sync.WaitGroup // the goroutines that send (sender)
	idle     chan func()    // hands a send to a sender waiting for one

	rate        *bucket   // nil: no MaxPerSecond
	pausedUntil time.Time // no sends before this: the endpoint's Retry-After
	disabled    bool      // OnDisable was called: no sends at all

	acks, attempts, skips []*item
	dead                  []deadItem
}

type deadItem struct {
	it     *item
	reason string
}

func newRun(d *Dispatcher) *run {
	r := &run{d: d, results: make(chan outcome, d.cfg.MaxInFlight), idle: make(chan func())}
	r.seeks, r.sought = d.log.Seeks()
	if rate := d.cfg.MaxPerSecond; rate > 0 && !math.IsInf(rate, 1) {
		r.rate = newBucket(rate, d.cfg.now())
	}
	return r
}

func (r *run) loop(ctx context.Context) {
	defer r.senders.Wait()
	unavailable := backoff.New(unavailablePause)
	for ctx.Err() == nil {
		s, sought := r.d.log.Seeks()
		if s != r.seeks {
			// A seek moved the cursor. Forget the window, and the
			// outcomes not yet recorded, before anything else: those
			// events were delivered before the seek, and must be again.
			r.reset(nil)
		}
		r.seeks, r.sought = s, sought
		r.collect()
		err := r.flush(ctx)
		if err == nil {
			err = r.fill(ctx)
		}
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			// The shard is unavailable (for example it lost its leader): wait
			// and start over from what the log says.
			pause := unavailable.Next()
			r.warn("delivery paused", err, pause)
			backoff.Sleep(ctx, pause)
			continue
		}
		unavailable.Reset()
		next := r.dispatch(ctx)
		// Dead letters just queued unblock their keys, and skips just read
		// wait for nothing: go round at once to record them.
		if len(r.dead) == 0 && len(r.skips) == 0 {
			r.wait(ctx, next)
		}
	}
}

func (r *run) warn(msg string, err error, wait time.Duration) {
	if r.d.cfg.Logger != nil {
		r.d.cfg.Logger.Warn(msg, "topic", r.d.cfg.Topic, "shard", r.d.cfg.Shard, "err", err, "retry_in", wait)
	}
}

// fill reads pending events into the window up to its bounds.
func (r *run) fill(ctx context.Context) error {
	for len(r.window) < r.d.cfg.Window && r.bytes < r.d.cfg.WindowBytes {
		evs, next, err := r.d.log.Read(ctx, r.readFrom, min(r.d.cfg.Window-len(r.window), 1000))
		if err != nil {
			return fmt.Errorf("read pending events: %w", err)
		}
		r.readFrom = next
		for _, e := range evs {
			it := &item{Event: e}
			if admit := r.d.cfg.Admit; admit != nil && !admit(&it.Event.Event) {
				it.settled = true
				r.skips = append(r.skips, it)
			}
			r.window = append(r.window, it)
			r.bytes += len(e.Event.Payload)
		}
		if len(evs) == 0 {
			return nil
		}
	}
	return nil
}

// dispatch starts sends for every event that may go now: the first
// unsettled event of its key, not in flight, not waiting for a retry,
// while the dispatcher is neither paused nor out of tokens. It
// dead-letters events past their time to live or retry limit, and returns
// the earliest time a waiting retry, or the end of a pause, becomes due.
// A disabled dispatcher does nothing (see Start).
func (r *run) dispatch(ctx context.Context) time.Time {
	if r.disabled {
		return time.Time{}
	}
	a := r.d.cfg.Attributes
	now := r.d.cfg.now()
	var next time.Time
	// held is when sends may start again if not now: the end of the pause
	// the endpoint asked for, or when the rate limit has a token.
	var held time.Time
	if now.Before(r.pausedUntil) {
		held = r.pausedUntil
	}
	blocked := make(map[string]bool)
	for _, it := range r.window {
		if it.settled {
			continue
		}
		key := it.Event.Event.Key
		if blocked[key] {
			continue
		}
		blocked[key] = true
		if it.inFlight {
			continue
		}
		switch {
		case a.TimeToLive > 0 && now.Sub(it.Time) > time.Duration(a.TimeToLive)*time.Second:
			r.deadLetter(it, ReasonExpired)
			continue
		case a.MaxRetries > 0 && it.Attempts >= uint32(a.MaxRetries):
			r.deadLetter(it, ReasonMaxRetries)
			continue
		case now.Before(it.retryAt):
			next = earliest(next, it.retryAt)
			continue
		}
		// The event may go. Look on through the window even when nothing
		// can be sent, for the events that time_to_live or max_retries end.
		if !held.IsZero() {
			next = earliest(next, held)
			continue
		}
		if r.inFlight >= r.d.cfg.MaxInFlight {
			break
		}
		if wait, ok := r.token(now); !ok {
			held = now.Add(wait)
			next = earliest(next, held)
			continue
		}
		r.send(ctx, it)
	}
	return next
}

// token takes a token for a send at now, or says how long until the rate
// limit has one.
func (r *run) token(now time.Time) (time.Duration, bool) {
	if r.rate == nil {
		return 0, true
	}
	return r.rate.take(now)
}

// earliest returns the earlier of a, which may be zero (no time), and b.
func earliest(a, b time.Time) time.Time {
	if a.IsZero() || b.Before(a) {
		return b
	}
	return a
}

func (r *run) send(ctx context.Context, it *item) {
	it.inFlight = true
	r.inFlight++
	c := r.d.cfg
	m := &endpoint.Message{
		ID:    topic.EventID(c.Topic, c.Shard, it.Offset),
		Topic: c.Topic, Shard: c.Shard, Offset: it.Offset, Key: it.Event.Event.Key,
		Time: it.Time, Headers: it.Event.Event.HeaderMap(), Payload: it.Event.Event.Payload,
		OpaqueData: c.Attributes.OpaqueData, Attempt: int(it.Attempts) + 1,
	}
	job := func() {
		err := c.Endpoint.Send(ctx, m)
		r.results <- outcome{it: it, err: err, dur: time.Since(it.Time)}
	}
	select {
	case r.idle <- job:
	default:
		r.senders.Go(func() { r.sender(ctx, job) })
	}
}

// senderIdle is how long a sender waits for another send before it ends.
const senderIdle = time.Second

// sender runs job, then the sends handed to it while it waits, until it
// has waited senderIdle for one or ctx ends. Senders outlive their sends
// because a send's first run grows the goroutine's stack (an HTTP request
// needs more than a new goroutine has), and a goroutine per send paid
// that copy every time: 6 % of a webhook drain's CPU.
func (r *run) sender(ctx context.Context, job func()) {
	wait := time.NewTimer(senderIdle)
	defer wait.Stop()
	for {
		job()
		wait.Reset(senderIdle)
		select {
		case job = <-r.idle:
		case <-wait.C:
			return
		case <-ctx.Done():
			return
		}
	}
}

// wait blocks until a send finishes, new events are announced, a retry is
// due, or the dispatcher stops.
func (r *run) wait(ctx context.Context, retryAt time.Time) {
	var timer <-chan time.Time
	if !retryAt.IsZero() {
		t := time.NewTimer(max(retryAt.Sub(r.d.cfg.now()), 0)) // the clock retryAt was set by
		defer t.Stop()
		timer = t.C
	}
	select {
	case <-ctx.Done():
	case o := <-r.results:
		r.handle(o)
	case <-r.d.wake:
	case <-r.sought: // wherever the seek was proposed
	case <-timer:
	}
}

// collect takes every finished send without blocking.
func (r *run) collect() {
	for {
		select {
		case o := <-r.results:
			r.handle(o)
		default:
			return
		}
	}
}

func (r *run) handle(o outcome) {
	it := o.it
	it.inFlight = false
	r.inFlight--
	c := r.d.cfg
	switch {
	case o.err == nil:
		it.settled = true
		r.acks = append(r.acks, it)
		r.succeeded()
		if c.Metrics != nil {
			c.Metrics.Delivered(c.Topic, c.Scheme, o.dur)
		}
	case errors.Is(o.err, context.Canceled):
		// Stopping: the event stays pending.
	case errors.Is(o.err, endpoint.ErrGone) && c.OnDisable != nil:
		// Retrying cannot help, and dead-lettering would throw away events
		// the subscriber may want once it is back: keep the event as it
		// is, without counting an attempt (max_retries must not spend the
		// time the endpoint is disabled), and stop sending.
		it.lastErr = o.err.Error()
		r.failed(it)
		r.disable(fmt.Sprintf("%v: %v", endpoint.ErrGone, o.err))
	case endpoint.IsPermanent(o.err):
		it.lastErr = o.err.Error()
		r.failed(it)
		r.deadLetter(it, ReasonRejected)
	default:
		it.lastErr = o.err.Error()
		r.failed(it)
		// A failure with Retry-After is still a failed attempt: the event
		// was sent and refused, the receiver sees the next try as attempt
		// n+1, and an endpoint that answers 429 for ever must not keep an
		// event past max_retries.
		it.Attempts++
		now := c.now()
		delay := retryDelay(c.Attributes.RetrySleepDuration, it.Attempts)
		if after, ok := endpoint.RetryAfter(o.err); ok {
			// The endpoint, not one key, is overloaded: pause the whole
			// dispatcher, and retry this event no sooner.
			delay = max(delay, after)
			r.pause(now.Add(after))
		}
		it.retryAt = now.Add(delay)
		r.attempts = append(r.attempts, it)
		if c.Metrics != nil {
			c.Metrics.Retried(c.Topic, c.Scheme)
		}
	}
}

// pause stops sends until until, or later if already paused longer.
func (r *run) pause(until time.Time) {
	if until.After(r.pausedUntil) {
		r.pausedUntil = until
		r.d.health.paused(until)
	}
}

// failed records a failed push in the dispatcher's health, and logs it if
// it starts a run of failures: one line per run, not one per retry, and
// at most one a minute for an endpoint that keeps failing and recovering.
// It disables the endpoint if the run has lasted DisableAfter.
func (r *run) failed(it *item) {
	c := r.d.cfg
	now := c.now()
	logIt, unlogged := r.d.health.failed(now, it.lastErr)
	if c.DisableAfter > 0 && c.OnDisable != nil {
		if d := r.d.health.failingFor(now); d >= c.DisableAfter {
			r.disable(fmt.Sprintf("every push failed for %v (at least the %v allowed); last error: %s",
				d.Round(time.Second), c.DisableAfter, it.lastErr))
		}
	}
	if !logIt || c.Logger == nil {
		return
	}
	args := []any{"topic", c.Topic, "shard", c.Shard, "endpoint", c.Scheme, "event", topic.EventID(c.Topic, c.Shard, it.Offset), "err", it.lastErr}
	if unlogged > 0 {
		args = append(args, "unlogged_failure_runs", unlogged)
	}
	c.Logger.Warn("push delivery failing; retrying, and logging its recovery, not each retry", args...)
}

// disable stops the dispatcher's sends for good and tells its owner, the
// first time only. The owner logs it, once for all the shards of what it
// disables.
func (r *run) disable(reason string) {
	if r.disabled {
		return
	}
	r.disabled = true
	r.d.health.disabled(reason)
	r.d.cfg.OnDisable(reason)
}

// succeeded records a successful push in the dispatcher's health, and
// logs the recovery from a run of failures whose start was logged.
func (r *run) succeeded() {
	c := r.d.cfg
	now := c.now()
	logIt, failures, since := r.d.health.succeeded(now)
	if logIt && c.Logger != nil {
		c.Logger.Info("push delivery recovered", "topic", c.Topic, "shard", c.Shard, "endpoint", c.Scheme,
			"failed_attempts", failures, "failing_for", now.Sub(since).Round(time.Millisecond))
	}
}

// retryDelay doubles the topic's retry_sleep_duration with every failed
// attempt, up to 60 times it (a minute for the default of one second). A
// retry_sleep_duration of 0 starts at 10ms, so a dead endpoint is not
// hammered in a tight loop. There is no jitter: the pauses are the ones
// the topic's attributes promise.
func retryDelay(sleepSeconds int64, attempts uint32) time.Duration {
	base := time.Duration(sleepSeconds) * time.Second
	if base <= 0 {
		base = 10 * time.Millisecond
	}
	longest := time.Duration(math.MaxInt64)
	if base <= longest/60 { // else 60 times it, years, would overflow
		longest = 60 * base
	}
	return backoff.Policy{Initial: base, Max: longest}.Delay(int(min(attempts, 64)))
}

func (r *run) deadLetter(it *item, reason string) {
	it.settled = true
	r.dead = append(r.dead, deadItem{it, reason})
	if c := r.d.cfg; c.Metrics != nil {
		c.Metrics.DeadLettered(c.Topic, c.Scheme, reason)
	}
}

// flush records the outcomes gathered since the last flush, one proposal
// per kind, and drops settled events from the front of the window.
func (r *run) flush(ctx context.Context) error {
	if len(r.acks) > 0 {
		cmd := shard.Command{Op: shard.OpAck, Offsets: offsets(r.acks)}
		if _, err := r.d.log.Propose(ctx, &cmd); err != nil {
			return r.reset(fmt.Errorf("record deliveries: %w", err))
		}
		r.acks = r.acks[:0]
	}
	if len(r.skips) > 0 {
		cmd := shard.Command{Op: shard.OpSkip, Offsets: offsets(r.skips)}
		if _, err := r.d.log.Propose(ctx, &cmd); err != nil {
			return r.reset(fmt.Errorf("record skipped events: %w", err))
		}
		r.skips = r.skips[:0]
	}
	if len(r.attempts) > 0 {
		cmd := shard.Command{Op: shard.OpAttempt, Offsets: offsets(r.attempts)}
		if _, err := r.d.log.Propose(ctx, &cmd); err != nil {
			return r.reset(fmt.Errorf("record failed attempts: %w", err))
		}
		r.attempts = r.attempts[:0]
	}
	if len(r.dead) > 0 {
		cmd := shard.Command{Op: shard.OpDeadLetter, Time: r.d.cfg.now().UnixNano()}
		for _, d := range r.dead {
			cmd.Dead = append(cmd.Dead, shard.DeadInfo{Offset: d.it.Offset, Reason: d.reason, LastError: d.it.lastErr})
		}
		if _, err := r.d.log.Propose(ctx, &cmd); err != nil {
			return r.reset(fmt.Errorf("record dead letters: %w", err))
		}
		r.dead = r.dead[:0]
	}
	r.trim()
	return nil
}

// reset forgets the window after a failure to record outcomes: what the
// log holds is the truth, and the next fill reads it again. Events whose
// delivery was not recorded will be delivered again (at least once).
func (r *run) reset(err error) error {
	for r.inFlight > 0 {
		r.handle(<-r.results)
	}
	r.window, r.bytes, r.readFrom = nil, 0, 0
	r.acks, r.attempts, r.skips, r.dead = r.acks[:0], r.attempts[:0], r.skips[:0], r.dead[:0]
	return err
}

func (r *run) trim() {
	n := 0
	for n < len(r.window) && r.window[n].settled && !r.window[n].inFlight {
		r.bytes -= len(r.window[n].Event.Event.Payload)
		n++
	}
	if n > 0 {
		r.window = append(r.window[:0], r.window[n:]...)
	}
}

func offsets(items []*item) []uint64 {
	out := make([]uint64, len(items))
	for i, it := range items {
		out[i] = it.Offset
	}
	return out
}
