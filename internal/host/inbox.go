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
	msgs []*pb.Message
	// ready holds a token once a message arrives in an empty inbox; the
	// loop waits on it. A token may outlive the messages it announced
	// (taken by a drain meanwhile): the loop then takes nothing.
	ready chan struct{}
}

func newInbox() *inbox { return &inbox{ready: make(chan struct{}, 1)} }

// put queues m, and reports false if the inbox is full.
func (b *inbox) put(m *pb.Message) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.msgs) >= inboxMax {
		return false
	}
	b.msgs = append(b.msgs, m)
	if len(b.msgs) == 1 {
		select {
		case b.ready <- struct{}{}:
		default:
		}
	}
	return true
}

// take empties the inbox and returns what it held, in arrival order. The
// loop gives the slice back with recycle once it has stepped them.
func (b *inbox) take() []*pb.Message {
	b.mu.Lock()
	defer b.mu.Unlock()
	msgs := b.msgs
	b.msgs = nil
	return msgs
}

// recycle takes back a slice that take returned, to queue the next
// messages in, unless messages arrived meanwhile (they are in a slice of
// their own) or it is large.
func (b *inbox) recycle(msgs []*pb.Message) {
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
