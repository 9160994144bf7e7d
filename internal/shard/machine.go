package shard

import "fmt"

// Machine is a State that takes its commands encoded, as they travel in the
// shard's replicated log. Its method set is what a Raft host needs of a
// state machine: apply an entry, snapshot, restore, and say which entries
// are still needed.
type Machine struct {
	*State
}

// NewMachine returns a Machine holding an empty shard.
func NewMachine() *Machine { return &Machine{State: New()} }

// Apply decodes and applies the command in a log entry and returns its
// Result. An entry that does not decode is rejected like any invalid
// command: the index is recorded as applied and nothing else changes, so
// replicas stay identical.
func (m *Machine) Apply(index uint64, data []byte) any {
	cmd, err := UnmarshalCommand(data)
	return m.ApplyDecoded(index, &cmd, err)
}

// ApplyDecoded is Apply for an applier that decodes the entry itself, to
// act on the command too: cmd and err are what UnmarshalCommand returned.
func (m *Machine) ApplyDecoded(index uint64, cmd *Command, err error) Result {
	if err != nil {
		r := m.State.Apply(index, nil)
		if r.Err == nil {
			r.Err = fmt.Errorf("%w: %v", ErrInvalidCommand, err)
		}
		return r
	}
	return m.State.Apply(index, cmd)
}

// Snapshot encodes the shard's metadata.
func (m *Machine) Snapshot() ([]byte, error) { return m.MarshalBinary() }

// SnapshotFunc captures the shard's metadata as it is now, cheaply, and
// returns a function that encodes it: the bytes Snapshot would return now.
// The function may run later on another goroutine, concurrently with
// further Apply and Restore calls; see State.SnapshotFunc.
func (m *Machine) SnapshotFunc() func() ([]byte, error) { return m.State.SnapshotFunc() }

// Restore replaces the state with a snapshot's; empty data is an empty shard.
func (m *Machine) Restore(data []byte) error {
	if len(data) == 0 {
		m.State = New()
		return nil
	}
	s := New()
	if err := s.UnmarshalBinary(data); err != nil {
		return err
	}
	m.State = s
	return nil
}

// OldestReservation returns the creation time of the oldest open
// reservation; ok is false when there is none.
func (m *Machine) OldestReservation() (t int64, ok bool) {
	for _, r := range m.reservations {
		if !ok || r.time < t {
			t, ok = r.time, true
		}
	}
	return t, ok
}
