package host

import (
	"sync"

	pb "go.etcd.io/raft/v3/raftpb"
)

// inboxMax is how many messages from other nodes may wait for a group's
// loop; past it a message is refused, and raft sends again what matters.
const inboxMax = 256

// inboxKeep is the largest slice an inbox keeps for reuse once its loop
// has stepped what it held: a group that took a burst once does not keep
// the burst's memory.
const inboxKeep = 64

// inbox holds the messages other nodes sent a group until its loop takes
// them, all at once. It grows with what arrives: a channel's buffer would
// be allocated at its full size with every group, and a node may run tens
// of thousands of groups, nearly all of them idle.
type inbox struct {
	mu   sync.Mutex
	msgs []pb.Message
}

func newInbox() *inbox { return &inbox{} }

// put queues m, and reports false if the inbox is full.
func (b *inbox) put(m pb.Message) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.msgs) >= inboxMax {
		return false
	}
	b.msgs = append(b.msgs, m)
	return true
}

// take empties the inbox and returns what it held, in arrival order. The
// loop gives the slice back with recycle once it has stepped them.
func (b *inbox) take() []pb.Message {
	b.mu.Lock()
	defer b.mu.Unlock()
	msgs := b.msgs
	b.msgs = nil
	return msgs
}

// recycle takes back a slice that take returned, to queue the next
// messages in, unless messages arrived meanwhile (they are in a slice of
// their own) or it is large.
func (b *inbox) recycle(msgs []pb.Message) {
	if cap(msgs) > inboxKeep {
		return
	}
	clear(msgs) // the messages may be large: do not hold on to them
	b.mu.Lock()
	if b.msgs == nil {
		b.msgs = msgs[:0]
	}
	b.mu.Unlock()
}

// viewQueue holds the functions to run on a group's loop (onLoop) until
// its next turn takes them.
type viewQueue struct {
	mu     sync.Mutex
	fns    []func()
	closed bool
}

// put queues f, and reports false if the loop has ended.
func (q *viewQueue) put(f func()) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.closed {
		return false
	}
	q.fns = append(q.fns, f)
	return true
}

// take returns the functions queued, in order.
func (q *viewQueue) take() []func() {
	q.mu.Lock()
	defer q.mu.Unlock()
	fns := q.fns
	q.fns = nil
	return fns
}

// close refuses functions from now on, and drops those queued: the loop
// has ended, and their callers learn it from the group's end.
func (q *viewQueue) close() {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.closed = true
	q.fns = nil
}
