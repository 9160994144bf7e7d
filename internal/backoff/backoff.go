// Package backoff computes and waits out the pauses between attempts of an
// operation that keeps failing: each pause doubles the previous one up to a
// cap, and may be shortened at random (jitter) so that many clients that
// failed together do not all try again at the same instant.
//
// It is herald's one implementation of retry pauses: the dispatcher's
// pauses while its shard is unavailable and between failed deliveries, and
// the CLI's pauses while the server is unavailable all use it, each with its
// own Policy.
package backoff

import (
	"context"
	"math"
	"math/rand/v2"
	"time"
)

// Policy says how long to pause before each retry.
type Policy struct {
	// Initial is the pause before the first retry; each later one doubles
	// the one before.
	Initial time.Duration
	// Max caps every pause.
	Max time.Duration
	// Jitter, from 0 to 1, is the largest fraction of a pause that may be
	// cut from it at random. Jitter only ever shortens a pause, so Max
	// stays the longest pause. 0 makes every pause exact.
	Jitter float64
	// Rand returns a number in [0, 1) each time a pause is jittered; nil
	// means math/rand/v2's Float64. Tests set it to make jitter
	// predictable.
	Rand func() float64
}

// Delay returns the pause before retry n, counting from 1: Initial doubled
// n-1 times, at most Max, less the jitter. An n below 1 counts as 1.
func (p Policy) Delay(n int) time.Duration {
	d := min(p.Initial, p.Max)
	for i := 1; i < n && d > 0 && d < p.Max; i++ {
		d = min(double(d), p.Max)
	}
	if p.Jitter <= 0 || d <= 0 {
		return d
	}
	random := p.Rand
	if random == nil {
		random = rand.Float64
	}
	return d - time.Duration(min(p.Jitter, 1)*random()*float64(d))
}

// double returns 2*d, or the longest Duration where that overflows.
func double(d time.Duration) time.Duration {
	if d > math.MaxInt64/2 {
		return math.MaxInt64
	}
	return 2 * d
}

// Backoff follows one loop's consecutive failures. It is not safe for
// concurrent use: each loop has its own.
type Backoff struct {
	policy   Policy
	failures int
}

// New returns a Backoff that pauses as p says.
func New(p Policy) *Backoff { return &Backoff{policy: p} }

// Next records a failure and returns how long to pause before trying
// again: the policy's Delay for the number of failures in a row.
func (b *Backoff) Next() time.Duration {
	if b.failures < 64 { // past that, every pause has long reached Max
		b.failures++
	}
	return b.policy.Delay(b.failures)
}

// Reset records a success: the next failure pauses Initial again, less
// the jitter.
func (b *Backoff) Reset() { b.failures = 0 }

// Sleep pauses for d, or until ctx ends. It returns ctx's error if ctx
// ended first, and nil otherwise.
func Sleep(ctx context.Context, d time.Duration) error {
	if err := ctx.Err(); err != nil {
		return err // a timer due at once could otherwise win the select
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
