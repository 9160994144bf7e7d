package shard

import (
	"errors"
	"testing"
)

func TestMachineAppliesEncodedCommands(t *testing.T) {
	m := NewMachine()
	cmd := Command{Op: OpPublish, Time: 5, Events: []Event{{Key: "k", Payload: []byte("v")}}}
	r := m.Apply(3, cmd.AppendBinary(nil)).(Result)
	if r.Err != nil || r.Count != 1 || m.NextOffset() != 1 {
		t.Fatalf("publish through Machine: %+v", r)
	}
	// An entry that does not decode is rejected but still counts as applied,
	// so every replica moves past it identically.
	r = m.Apply(4, []byte{0xff, 0x00}).(Result)
	if !errors.Is(r.Err, ErrInvalidCommand) || m.Applied() != 4 || m.NextOffset() != 1 {
		t.Fatalf("garbage entry: %+v, applied %d", r, m.Applied())
	}
	snap, err := m.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	m2 := NewMachine()
	if err := m2.Restore(snap); err != nil || m2.NextOffset() != 1 || m2.Applied() != 4 {
		t.Fatalf("restore: %v, next %d", err, m2.NextOffset())
	}
	if err := m2.Restore(nil); err != nil || m2.NextOffset() != 0 || m2.Applied() != 0 {
		t.Fatalf("restore of empty data must give an empty shard: %v", err)
	}
}

func TestMachineOldestReservation(t *testing.T) {
	m := NewMachine()
	if _, ok := m.OldestReservation(); ok {
		t.Fatal("an empty shard reports a reservation")
	}
	for i, at := range []int64{30, 10, 20} {
		c := Command{Op: OpReserve, Time: at, Bytes: 10}
		m.Apply(uint64(i+1), c.AppendBinary(nil))
	}
	if got, ok := m.OldestReservation(); !ok || got != 10 {
		t.Fatalf("oldest reservation = %d, %v; want 10", got, ok)
	}
}
