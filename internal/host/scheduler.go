package host

import (
	"runtime"
	"sync"
	"sync/atomic"
)

// The scheduler runs every group of a host on a fixed set of workers, as
// TiKV's batch system, CockroachDB's raft scheduler and Dragonboat's step
// engine do, instead of a goroutine per group. A group with work (a
// proposal, a message, a tick, a report, a view, a finished background
// job) is queued once; a worker takes every group queued, up to
// maxRoundGroups, and handles them as one round (round.go): their Readies'
// entries and hard states go to the node's WAL, one fdatasync makes them
// all durable, and then each group sends, applies and advances. A node's
// CPU per event then no longer grows with the number of groups an event
// stream is spread over, and an idle group costs nothing: nothing queues
// it.

// maxRoundGroups bounds the groups one round takes, so that a round's
// latency stays bounded when very many groups have work (a boot, where
// every group elects itself): the others wait for the next round, on this
// worker or another.
const maxRoundGroups = 256

// A group's place in the scheduler. Only the worker that holds a group
// (running or rerun) handles it, so a group is handled by one goroutine at
// a time, as raft's RawNode requires.
const (
	schedIdle    int32 = iota // no work known; whoever brings some queues it
	schedQueued               // in the queue, no worker holds it
	schedRunning              // a worker handles it
	schedRerun                // a worker handles it, and work came meanwhile
	schedExited               // its loop ended; nothing queues it again
)

// defaultWorkers is one worker per two processors the Go runtime may use,
// and at least one.
//
// A worker per processor does not make the WAL durable sooner: its
// fdatasyncs run one at a time, so a round that a second worker starts
// while the first's sync runs waits for that sync before paying its own.
// What the second worker does is split the groups with work into more,
// smaller rounds, each with its own sync goroutine and wake-ups, and take
// CPU from the goroutines that feed the rounds (the transport, the API),
// which on a publish workload use more of it than the rounds do. On
// two-processor nodes, one worker instead of two cut a three-node
// cluster's rounds per event by about a third (two groups per round
// instead of 1.3; syncs per event hardly changed), its CPU per event by
// about 11% and raised its throughput by about 14%
// (docs/bench/results/scheduler/r3-workers.txt).
func defaultWorkers() int {
	return max(runtime.GOMAXPROCS(0)/2, 1)
}

// scheduler owns the queue of groups with work and the workers that
// handle them.
type scheduler struct {
	round func(w *roundWorker, groups []*group, more func([]*group) []*group) []*group

	mu      sync.Mutex
	cond    *sync.Cond
	queue   []*group
	stopped bool
	wg      sync.WaitGroup
}

// newScheduler starts workers workers (0: defaultWorkers) that hand the
// groups queued to round.
func newScheduler(workers int, round func(w *roundWorker, groups []*group, more func([]*group) []*group) []*group) *scheduler {
	if workers <= 0 {
		workers = defaultWorkers()
	}
	s := &scheduler{round: round}
	s.cond = sync.NewCond(&s.mu)
	for range workers {
		s.wg.Go(s.work)
	}
	return s
}

// schedule says that g has work: it is queued unless it already is, or a
// worker holds it (which then queues it again when it is done). It never
// blocks, so anyone may call it, a group's own worker included.
func (s *scheduler) schedule(g *group) {
	for {
		switch st := g.sched.Load(); st {
		case schedIdle:
			if g.sched.CompareAndSwap(schedIdle, schedQueued) {
				s.push(g)
				return
			}
		case schedRunning:
			if g.sched.CompareAndSwap(schedRunning, schedRerun) {
				return
			}
		default: // queued, rerun or exited
			return
		}
	}
}

func (s *scheduler) push(g *group) {
	s.mu.Lock()
	s.queue = append(s.queue, g)
	s.mu.Unlock()
	s.cond.Signal()
}

// take waits for queued groups and takes up to maxRoundGroups of them,
// appending them to into; it returns false once the scheduler stops.
func (s *scheduler) take(into []*group) ([]*group, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for len(s.queue) == 0 && !s.stopped {
		s.cond.Wait()
	}
	if s.stopped {
		return into, false
	}
	return s.takeLocked(into), true
}

// takeMore appends to into the groups queued, if any, while the round
// has room for them; the calling worker then holds them too.
func (s *scheduler) takeMore(into []*group) []*group {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.takeLocked(into)
}

// takeLocked moves queued groups to into, up to maxRoundGroups in all,
// and marks them held.
func (s *scheduler) takeLocked(into []*group) []*group {
	n := min(len(s.queue), maxRoundGroups-len(into))
	if n <= 0 {
		return into
	}
	for _, g := range s.queue[:n] {
		g.sched.Store(schedRunning)
	}
	into = append(into, s.queue[:n]...)
	rest := copy(s.queue, s.queue[n:])
	clear(s.queue[rest:])
	s.queue = s.queue[:rest]
	if rest > 0 {
		s.cond.Signal() // another worker may take the rest
	}
	return into
}

// work is a worker: it handles rounds until the scheduler stops.
func (s *scheduler) work() {
	w := &roundWorker{}
	var groups []*group
	for {
		var ok bool
		groups, ok = s.take(groups[:0])
		if !ok {
			return
		}
		groups = s.round(w, groups, s.takeMore)
		for _, g := range groups {
			s.release(g)
		}
		clear(groups)
	}
}

// release hands back a group its worker is done with: it is queued again
// if it has work left (raft has a Ready, or proposals wait) or work came
// while it ran, and is idle otherwise.
func (s *scheduler) release(g *group) {
	if g.sched.Load() == schedExited {
		return
	}
	if g.hasWork() || !g.sched.CompareAndSwap(schedRunning, schedIdle) {
		g.sched.Store(schedQueued)
		s.push(g)
	}
}

// stop stops the workers once their rounds end; groups still queued are
// not handled. The host stops every group first.
func (s *scheduler) stop() {
	s.mu.Lock()
	s.stopped = true
	s.mu.Unlock()
	s.cond.Broadcast()
	s.wg.Wait()
}

// schedState is a group's place in the scheduler.
type schedState = atomic.Int32
