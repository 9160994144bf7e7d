package host

import (
	"slices"
	"sync"
)

// LeadershipWatch tells its owner which groups' leadership changed on this
// node: a group learned of a new leader or lost it, this node became or
// stopped being a group's leader, or a group stopped. Changes are
// coalesced and never dropped, and a group never waits for a watcher: after
// each signal on C the owner takes the changed groups and reads their
// current state with GroupStatus. A group that starts is reported once it
// knows its first leader.
type LeadershipWatch struct {
	h       *Host
	c       chan struct{}
	mu      sync.Mutex
	changed map[uint64]struct{}
}

// WatchLeadership starts a watch; Stop ends it.
func (h *Host) WatchLeadership() *LeadershipWatch {
	w := &LeadershipWatch{h: h, c: make(chan struct{}, 1), changed: make(map[uint64]struct{})}
	h.leaders.mu.Lock()
	defer h.leaders.mu.Unlock()
	if h.leaders.watches == nil {
		h.leaders.watches = make(map[*LeadershipWatch]struct{})
	}
	h.leaders.watches[w] = struct{}{}
	return w
}

// C receives a value when groups changed since the last Changed call.
func (w *LeadershipWatch) C() <-chan struct{} { return w.c }

// Changed returns, in order of id, the groups whose leadership changed
// since the last call, and forgets them.
func (w *LeadershipWatch) Changed() []uint64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	ids := make([]uint64, 0, len(w.changed))
	for id := range w.changed {
		ids = append(ids, id)
	}
	clear(w.changed)
	slices.Sort(ids)
	return ids
}

// Stop ends the watch.
func (w *LeadershipWatch) Stop() {
	w.h.leaders.mu.Lock()
	defer w.h.leaders.mu.Unlock()
	delete(w.h.leaders.watches, w)
}

func (w *LeadershipWatch) add(group uint64) {
	w.mu.Lock()
	w.changed[group] = struct{}{}
	w.mu.Unlock()
	select {
	case w.c <- struct{}{}:
	default: // a signal is already pending; it covers this change
	}
}

// leadershipWatchers are the host's watches.
type leadershipWatchers struct {
	mu      sync.Mutex
	watches map[*LeadershipWatch]struct{}
}

// notify records a change of the group's leadership in every watch.
func (l *leadershipWatchers) notify(group uint64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for w := range l.watches {
		w.add(group)
	}
}
