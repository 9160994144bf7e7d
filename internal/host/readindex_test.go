package host

import (
	"testing"

	"go.etcd.io/raft/v3"
)

func newBarrier() chan error { return make(chan error, 1) }

// released reports whether done was answered, failing on an error.
func released(t *testing.T, done chan error) bool {
	t.Helper()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("barrier failed: %v", err)
		}
		return true
	default:
		return false
	}
}

// Barriers asked while a ReadIndex is in flight share the next one, which
// goes out once the first is answered.
func TestReadBarriersBatchBehindTheOneInFlight(t *testing.T) {
	var r readBarriers
	a, b, c := newBarrier(), newBarrier(), newBarrier()
	first := r.ask(a)
	if first == nil {
		t.Fatal("the first barrier sent no ReadIndex")
	}
	if ctx := r.ask(b); ctx != nil {
		t.Fatal("a barrier asked while one is in flight sent a ReadIndex of its own")
	}
	if ctx := r.ask(c); ctx != nil {
		t.Fatal("a barrier asked while one is in flight sent a ReadIndex of its own")
	}
	second := r.confirm([]raft.ReadState{{Index: 10, RequestCtx: first}})
	if second == nil {
		t.Fatal("the waiting barriers sent no ReadIndex once the first was answered")
	}
	if ctx := r.confirm([]raft.ReadState{{Index: 12, RequestCtx: second}}); ctx != nil {
		t.Fatal("a ReadIndex went out with no barrier waiting")
	}
	if len(r.confirmed) != 2 || len(r.confirmed[1].waiters) != 2 {
		t.Fatalf("confirmed = %+v, want the first barrier, then the two that waited", r.confirmed)
	}
}

// A barrier is released only once its index is applied, and in order.
func TestReadBarriersReleaseInOrderOfIndex(t *testing.T) {
	var r readBarriers
	a, b := newBarrier(), newBarrier()
	first := r.ask(a)
	r.ask(b)
	second := r.confirm([]raft.ReadState{{Index: 10, RequestCtx: first}})
	r.confirm([]raft.ReadState{{Index: 12, RequestCtx: second}})

	r.release(9)
	if released(t, a) || released(t, b) {
		t.Fatal("a barrier was released before its index was applied")
	}
	r.release(11)
	if !released(t, a) || released(t, b) {
		t.Fatal("applying 11 should release the barrier at 10 alone")
	}
	r.release(12)
	if !released(t, b) {
		t.Fatal("applying 12 did not release the barrier at 12")
	}
	if r.confirmed != nil {
		t.Fatalf("confirmed = %+v after every barrier was released", r.confirmed)
	}
}

// An answer to a request that is no longer in flight (answered already,
// or failed with a change of leader) confirms nothing.
func TestReadBarriersIgnoreStaleAnswers(t *testing.T) {
	var r readBarriers
	a := newBarrier()
	ctx := r.ask(a)
	r.fail()
	if err := <-a; err != ErrNotLeader {
		t.Fatalf("failed barrier got %v, want ErrNotLeader", err)
	}
	b := newBarrier()
	next := r.ask(b)
	if string(next) == string(ctx) {
		t.Fatal("a request after a failure reused the failed request's context")
	}
	r.confirm([]raft.ReadState{{Index: 5, RequestCtx: ctx}})
	if len(r.confirmed) != 0 {
		t.Fatal("the answer to a failed request confirmed a barrier")
	}
	r.confirm([]raft.ReadState{{Index: 6, RequestCtx: next}, {Index: 7, RequestCtx: next}})
	if len(r.confirmed) != 1 || r.confirmed[0].index != 6 {
		t.Fatalf("confirmed = %+v, want the one barrier at 6", r.confirmed)
	}
}

// A leader that steps down fails every barrier, whatever its stage.
func TestReadBarriersFailAnswersEveryStage(t *testing.T) {
	var r readBarriers
	confirmed, inFlight, waiting := newBarrier(), newBarrier(), newBarrier()
	first := r.ask(confirmed)
	r.ask(inFlight)
	r.confirm([]raft.ReadState{{Index: 10, RequestCtx: first}}) // inFlight goes out
	r.ask(waiting)
	r.fail()
	for _, done := range []chan error{confirmed, inFlight, waiting} {
		if err := <-done; err != ErrNotLeader {
			t.Fatalf("barrier got %v, want ErrNotLeader", err)
		}
	}
	if r.waiting != nil || r.inFlight != nil || r.confirmed != nil {
		t.Fatalf("barriers left after fail: %+v", r)
	}
}
