package delivery

import (
	"math"
	"time"
)

// minTokenWait is the shortest wait for a token the bucket reports, so
// that rounding never has the dispatcher wake, find almost a token, and
// wake again at once.
const minTokenWait = time.Millisecond

// bucket is a token bucket: it holds up to burst tokens and gains rate
// tokens a second. A send takes one. Only the dispatcher's loop uses it,
// so it needs no lock; its clock is the one passed in, so tests drive it
// with their own.
type bucket struct {
	rate   float64 // tokens per second, > 0
	burst  float64 // at least 1
	tokens float64
	last   time.Time // when tokens was last brought up to date
}

// newBucket returns a full bucket of rate tokens a second whose burst is a
// tenth of a second's worth, and at least one token: small, so that a
// dispatcher that was idle cannot send a flood, but enough that a high
// rate does not need a timer per send.
func newBucket(rate float64, now time.Time) *bucket {
	burst := max(1, math.Floor(rate/10))
	return &bucket{rate: rate, burst: burst, tokens: burst, last: now}
}

// take takes a token at now if there is one. If there is none, it takes
// nothing and returns how long until there is.
func (b *bucket) take(now time.Time) (wait time.Duration, ok bool) {
	if elapsed := now.Sub(b.last); elapsed > 0 { // a clock that steps back adds nothing
		b.tokens = min(b.burst, b.tokens+elapsed.Seconds()*b.rate)
		b.last = now
	}
	if b.tokens >= 1 {
		b.tokens--
		return 0, true
	}
	secs := (1 - b.tokens) / b.rate
	if secs >= maxTokenWait.Seconds() {
		return maxTokenWait, false
	}
	return max(time.Duration(math.Ceil(secs*float64(time.Second))), minTokenWait), false
}

// maxTokenWait bounds what one wait for a token can be, however small
// MaxPerSecond is; the dispatcher asks again when it ends.
const maxTokenWait = time.Hour
