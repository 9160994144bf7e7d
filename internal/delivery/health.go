package delivery

import (
	"sync"
	"time"
)

// Health is how a dispatcher's pushes are going: the last error and when
// it happened, the failed attempts since the last success and when they
// began, the last success, and whether the dispatcher has stopped sending
// on its own (Disabled) or for a while (PausedUntil). It lives in the
// memory of the node that runs the dispatcher (the shard's leader), from
// when the dispatcher started; it is not replicated, so a new leader
// starts with none.
type Health struct {
	LastError           string
	LastErrorTime       time.Time // zero if no push failed
	ConsecutiveFailures uint64    // failed attempts since the last success
	FailingSince        time.Time // first failure since the last success; zero if the last push succeeded
	LastSuccess         time.Time // zero if no push succeeded

	// PausedUntil is when the dispatcher may send again after the endpoint
	// answered with Retry-After; zero or past when it is not paused.
	PausedUntil time.Time
	// Disabled is set once the dispatcher has called Config.OnDisable, with
	// the reason it gave; it sends nothing more until it is stopped.
	Disabled       bool
	DisabledReason string
}

// failureLogEvery bounds the log lines of a flapping endpoint: the start
// of a run of failures is logged at most this often per dispatcher, and
// its recovery only if its start was.
const failureLogEvery = time.Minute

// health is a dispatcher's Health with what its logging needs. The run
// goroutine writes it; stats readers take copies.
type health struct {
	mu sync.Mutex
	Health
	runLogged  bool      // the current run's start was logged
	lastLogged time.Time // when a run's start was last logged
	unlogged   int       // runs not logged since lastLogged
}

func (h *health) get() Health {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.Health
}

// failed records a failed push at now. It returns whether the failure
// starts a run that should be logged, and how many runs went unlogged
// before it.
func (h *health) failed(now time.Time, err string) (logIt bool, unlogged int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.LastError, h.LastErrorTime = err, now
	h.ConsecutiveFailures++
	if h.ConsecutiveFailures > 1 {
		return false, 0
	}
	h.FailingSince = now
	h.runLogged = h.lastLogged.IsZero() || now.Sub(h.lastLogged) >= failureLogEvery
	if !h.runLogged {
		h.unlogged++
		return false, 0
	}
	h.lastLogged, unlogged, h.unlogged = now, h.unlogged, 0
	return true, unlogged
}

// succeeded records a successful push at now. It returns whether it ends
// a logged run of failures, with that run's length and start.
func (h *health) succeeded(now time.Time) (logIt bool, failures uint64, since time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.LastSuccess = now
	failures, since, logIt = h.ConsecutiveFailures, h.FailingSince, h.runLogged && h.ConsecutiveFailures > 0
	h.ConsecutiveFailures, h.FailingSince, h.runLogged = 0, time.Time{}, false
	return logIt, failures, since
}

// failingFor returns how long pushes have failed without a success between
// them, as of now: 0 if the last push succeeded.
func (h *health) failingFor(now time.Time) time.Duration {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.ConsecutiveFailures == 0 {
		return 0
	}
	return now.Sub(h.FailingSince)
}

func (h *health) paused(until time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.PausedUntil = until
}

func (h *health) disabled(reason string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.Disabled, h.DisabledReason = true, reason
}
