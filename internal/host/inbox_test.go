package host

import (
	"testing"

	pb "go.etcd.io/raft/v3/raftpb"
)

// An inbox hands its messages over all at once, in arrival order, refuses
// them past inboxMax.
func TestInboxTakesEverythingInOrderUpToItsBound(t *testing.T) {
	b := newInbox()
	for i := range inboxMax {
		if !b.put(pb.Message{Index: uint64(i)}) {
			t.Fatalf("put %d refused; the bound is %d", i, inboxMax)
		}
	}
	if b.put(pb.Message{}) {
		t.Fatalf("put %d accepted past the bound", inboxMax)
	}
	msgs := b.take()
	if len(msgs) != inboxMax {
		t.Fatalf("took %d messages, want %d", len(msgs), inboxMax)
	}
	for i, m := range msgs {
		if m.Index != uint64(i) {
			t.Fatalf("message %d has index %d: out of order", i, m.Index)
		}
	}
	b.recycle(msgs)
	if got := b.take(); len(got) != 0 {
		t.Fatalf("a second take returned %d messages", len(got))
	}
	if !b.put(pb.Message{}) {
		t.Fatal("put refused after the inbox was emptied")
	}
}

// A small slice handed back is reused, without the messages it held; a
// burst's large one is dropped.
func TestInboxReusesOnlySmallSlices(t *testing.T) {
	b := newInbox()
	b.put(pb.Message{})
	small := b.take()
	b.recycle(small)
	b.put(pb.Message{})
	if again := b.take(); &again[:1][0] != &small[:1][0] {
		t.Error("a small slice given back was not reused")
	}
	for range inboxKeep + 1 {
		b.put(pb.Message{})
	}
	large := b.take()
	b.recycle(large)
	if b.msgs != nil {
		t.Errorf("a slice of capacity %d was kept; at most %d are", cap(large), inboxKeep)
	}
}
