package node

import (
	"errors"
	"fmt"
	"reflect"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"herald/internal/shard"
	clusterv1 "herald/proto/herald/cluster/v1"
)

// A node answers every rpc of the cluster service: one without a handler
// would answer its peers Unimplemented.
func TestEveryClusterRPCIsHandled(t *testing.T) {
	h := rpcHandlers(nil, &relay{}, newLiveness(), &membership{})
	v := reflect.ValueOf(h)
	for i := range v.NumField() {
		if v.Field(i).IsNil() {
			t.Errorf("the node has no handler for the %s rpc", v.Type().Field(i).Name)
		}
	}
}

// overTheWire encodes m and decodes it again, as a peer would.
func overTheWire[M proto.Message](t *testing.T, m M) M {
	t.Helper()
	b, err := proto.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	out := m.ProtoReflect().New().Interface().(M)
	if err := proto.Unmarshal(b, out); err != nil {
		t.Fatal(err)
	}
	return out
}

// A relayed proposal's result comes back whole, and its error with the
// same message and the sentinel it wrapped on the replica.
func TestProposeAnswerCrossesTheWire(t *testing.T) {
	res := shard.Result{ReservationID: 7, FirstOffset: 40, Count: 3, Duplicates: []shard.Duplicate{{Slot: 1, Offset: 12}}}
	got, err := decodeAnswer(overTheWire(t, encodeAnswer(res, nil)))
	if err != nil || !reflect.DeepEqual(got, res) {
		t.Errorf("answer = %+v, %v; want %+v", got, err, res)
	}

	cause := fmt.Errorf("shard orders/0: %w", shard.ErrQueueFull)
	_, err = decodeAnswer(overTheWire(t, encodeAnswer(shard.Result{}, cause)))
	classify(&err)
	if !errors.Is(err, shard.ErrQueueFull) || !errors.Is(err, ErrOverloaded) || err.Error() != cause.Error() {
		t.Errorf("error = %v; want %q, a full queue, classified overloaded", err, cause)
	}
}

// Deliveries fetched on a shard's leader reach the caller unchanged.
func TestDeliveriesCrossTheWire(t *testing.T) {
	ds := []Delivery{{ID: "e1", Receipt: "e1.3", Shard: 2, Offset: 9, Attempt: 3,
		Time:  time.Date(2026, 11, 26, 13, 0, 0, 5, time.UTC),
		Event: Event{Key: "k", Payload: []byte("payload"), Headers: map[string]string{"h": "v"}, DedupID: "d"}}}
	got := deliveriesFromWire(overTheWire(t, &clusterv1.FetchResponse{Deliveries: deliveriesToWire(ds)}).GetDeliveries())
	if !reflect.DeepEqual(got, ds) {
		t.Errorf("deliveries = %+v; want %+v", got, ds)
	}
	res := ackResult{Count: 2, Lapsed: []int{0, 3}}
	if got := ackResultFromWire(overTheWire(t, res.toWire())); !reflect.DeepEqual(got, res) {
		t.Errorf("ack result = %+v; want %+v", got, res)
	}
	st := localStatus{Node: 2, ControllerLeader: 1, Groups: map[uint64]groupLocal{5: {Leader: 1, Applied: 40}, 6: {Err: "damaged"}}}
	if got := localStatusFromWire(overTheWire(t, st.toWire())); !reflect.DeepEqual(got, st) {
		t.Errorf("local status = %+v; want %+v", got, st)
	}
}
