package shard

import (
	"bytes"
	"errors"
	"math"
	"reflect"
	"testing"
)

// sampleCommands has one or more commands of every op, including extreme
// and nonsensical field values, which must still round-trip.
func sampleCommands() []Command {
	return []Command{
		{Op: OpReserve, Time: 1_700_000_000_000_000_000, Bytes: 4096, Count: 3, MaxQueueBytes: 1 << 30},
		{Op: OpReserve},
		{Op: OpReserve, Time: -1, Bytes: -5, Count: -2, MaxQueueBytes: -3},
		{Op: OpReserve, Time: math.MinInt64, Bytes: math.MaxInt64, Count: math.MaxInt, MaxQueueBytes: math.MinInt64},
		{Op: OpCommit, Time: 42, ReservationID: 7, Events: []Event{
			{Key: "user-1", Payload: []byte("hello"), Headers: []Header{{"content-type", "text/plain"}, {"", "v"}}},
			{},
			{Payload: make([]byte, 300)},
		}},
		{Op: OpCommit, ReservationID: math.MaxUint64, Events: []Event{{Key: "k"}}},
		{Op: OpAbort, ReservationID: 1},
		{Op: OpAbort},
		{Op: OpPublish, Time: 3, MaxQueueBytes: 100, Events: []Event{{Key: "a", Payload: []byte{0, 1, 2}}}},
		{Op: OpPublish, Events: []Event{{Headers: []Header{{"x", ""}, {"y", "z"}}}, {Key: string(make([]byte, 200))}}},
		{Op: OpAck, Offsets: []uint64{0}},
		{Op: OpAck, Offsets: []uint64{5, 6, 7, 3, 0, math.MaxUint64, 1, math.MaxUint64, 9}},
		{Op: OpExpire, OlderThan: 1_700_000_000_000_000_000},
		{Op: OpExpire, OlderThan: math.MinInt64},
		{Op: OpExpire},
		// Fields an op does not use still round-trip.
		{Op: OpAck, Time: 1, ReservationID: 2, Bytes: 3, Count: 4, MaxQueueBytes: 5, OlderThan: 6,
			Offsets: []uint64{7}, Events: []Event{{Key: "8"}}},
	}
}

func TestCommandRoundTrip(t *testing.T) {
	for _, c := range sampleCommands() {
		data := c.AppendBinary(nil)
		got, err := UnmarshalCommand(data)
		if err != nil {
			t.Errorf("%+v: UnmarshalCommand: %v", c, err)
			continue
		}
		if !reflect.DeepEqual(got, c) {
			t.Errorf("round trip changed the command:\n got %+v\nwant %+v", got, c)
		}
		// Appending to an existing buffer leaves its contents alone.
		prefix := []byte("prefix")
		if b := c.AppendBinary(prefix); !bytes.Equal(b[:6], []byte("prefix")) || !bytes.Equal(b[6:], data) {
			t.Errorf("%v: AppendBinary to a non-empty buffer differs", c.Op)
		}
		if n := c.encodedLen(c.mask()); n != len(data) {
			t.Errorf("%v: encodedLen = %d, encoding is %d bytes", c.Op, n, len(data))
		}
	}
}

func TestCommandNormalizesEmpty(t *testing.T) {
	c := Command{Op: OpPublish, Offsets: []uint64{}, Events: []Event{{Payload: []byte{}, Headers: []Header{}}}}
	got, err := UnmarshalCommand(c.AppendBinary(nil))
	if err != nil {
		t.Fatal(err)
	}
	want := Command{Op: OpPublish, Events: []Event{{}}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got %#v, want %#v", got, want)
	}
}

// TestCommandEncoding pins the wire format: commands are stored in logs
// and must decode the same way in later versions.
func TestCommandEncoding(t *testing.T) {
	tests := []struct {
		c    Command
		want []byte
	}{
		{Command{Op: OpAbort, ReservationID: 300}, []byte{1, 3, 0x02, 0xac, 0x02}},
		{Command{Op: OpReserve, Time: -1, Bytes: 2, Count: 1}, []byte{1, 1, 0x0d, 0x01, 0x04, 0x02}},
		{Command{Op: OpAck, Offsets: []uint64{10, 11, 9}}, []byte{1, 5, 0x40, 3, 20, 2, 3}},
		{Command{Op: OpExpire, OlderThan: 64}, []byte{1, 6, 0x20, 0x80, 0x01}},
		{Command{Op: OpPublish, MaxQueueBytes: 1, Events: []Event{{Key: "k", Payload: []byte("pp"), Headers: []Header{{"n", "v"}}}}},
			[]byte{1, 4, 0x90, 0x02, 1, 10, 1, 'k', 2, 'p', 'p', 1, 1, 'n', 1, 'v'}},
	}
	for _, tt := range tests {
		if got := tt.c.AppendBinary(nil); !bytes.Equal(got, tt.want) {
			t.Errorf("%+v encodes as %v, want %v", tt.c, got, tt.want)
		}
	}
}

func TestUnmarshalCommandRejects(t *testing.T) {
	valid := (&Command{Op: OpCommit, Time: 1, ReservationID: 2, Offsets: []uint64{3},
		Events: []Event{{Key: "k", Payload: []byte("p"), Headers: []Header{{"n", "v"}}}}}).AppendBinary(nil)
	for n := range len(valid) {
		if _, err := UnmarshalCommand(valid[:n]); !errors.Is(err, ErrInvalidCommand) {
			t.Errorf("truncated to %d bytes: got %v, want ErrInvalidCommand", n, err)
		}
	}
	tests := map[string][]byte{
		"empty":               nil,
		"version 0":           {0, 1, 0},
		"version 2":           {2, 1, 0},
		"op 0":                {1, 0, 0},
		"op 7":                {1, 7, 0},
		"trailing byte":       {1, 3, 0, 0},
		"zero time":           {1, 1, byte(fieldTime), 0},
		"zero reservation":    {1, 3, byte(fieldReservationID), 0},
		"zero bytes":          {1, 1, byte(fieldBytes), 0},
		"zero count":          {1, 1, byte(fieldCount), 0},
		"zero max bytes":      {1, 1, byte(fieldMaxQueueBytes), 0},
		"zero older than":     {1, 6, byte(fieldOlderThan), 0},
		"no offsets":          {1, 5, byte(fieldOffsets), 0},
		"too many offsets":    {1, 5, byte(fieldOffsets), 3, 0, 0},
		"no events":           {1, 4, byte(fieldEvents), 0},
		"too many events":     {1, 4, byte(fieldEvents), 2, 3, 0, 0, 0},
		"event too long":      {1, 4, byte(fieldEvents), 1, 4, 0, 0, 0},
		"event too short":     {1, 4, byte(fieldEvents), 1, 2, 0, 0},
		"event trailing byte": {1, 4, byte(fieldEvents), 1, 4, 0, 0, 0, 0},
		"key too long":        {1, 4, byte(fieldEvents), 1, 3, 5, 0, 0},
		"header count":        {1, 4, byte(fieldEvents), 1, 4, 0, 0, 1, 0},
		"header value":        {1, 4, byte(fieldEvents), 1, 5, 0, 0, 1, 0, 1},
		"non-minimal varint":  {1, 3, byte(fieldReservationID), 0x81, 0x00},
		"varint overflow":     {1, 3, byte(fieldReservationID), 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x02},
		"varint truncated":    {1, 3, byte(fieldReservationID), 0xff},
		"huge offset count":   {1, 5, byte(fieldOffsets), 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f},
		"huge event length":   {1, 4, byte(fieldEvents), 1, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01},
	}
	for name, data := range tests {
		c, err := UnmarshalCommand(data)
		if !errors.Is(err, ErrInvalidCommand) {
			t.Errorf("%s: got %v, want ErrInvalidCommand", name, err)
		}
		if !reflect.DeepEqual(c, Command{}) {
			t.Errorf("%s: returned %+v alongside the error", name, c)
		}
	}
}

func TestUnmarshalCommandAliasing(t *testing.T) {
	c := Command{Op: OpPublish, Events: []Event{{Key: "key", Payload: []byte("payload")}, {Payload: []byte("next")}}}
	data := c.AppendBinary(nil)
	got, err := UnmarshalCommand(data)
	if err != nil {
		t.Fatal(err)
	}
	// Appending to a payload must not overwrite the following bytes.
	_ = append(got.Events[0].Payload, "XXXXXXXXXX"...)
	if !bytes.Equal(got.Events[1].Payload, []byte("next")) {
		t.Errorf("append to payload 0 clobbered payload 1: %q", got.Events[1].Payload)
	}
	// Payloads alias the input (documented); keys do not.
	for i := range data {
		data[i] = 'Z'
	}
	if got.Events[0].Key != "key" {
		t.Errorf("key changed with the input: %q", got.Events[0].Key)
	}
	if string(got.Events[0].Payload) != "ZZZZZZZ" {
		t.Errorf("payload %q does not alias the input", got.Events[0].Payload)
	}
}

func TestEventAt(t *testing.T) {
	for _, c := range sampleCommands() {
		data := c.AppendBinary(nil)
		for slot, want := range c.Events {
			got, err := EventAt(data, slot)
			if err != nil {
				t.Errorf("%v: EventAt(%d): %v", c.Op, slot, err)
				continue
			}
			if !reflect.DeepEqual(got, want) {
				t.Errorf("%v: EventAt(%d) = %+v, want %+v", c.Op, slot, got, want)
			}
		}
		for _, slot := range []int{-1, len(c.Events), len(c.Events) + 5} {
			if _, err := EventAt(data, slot); !errors.Is(err, ErrInvalidCommand) {
				t.Errorf("%v with %d events: EventAt(%d): got %v, want ErrInvalidCommand", c.Op, len(c.Events), slot, err)
			}
		}
	}
	if _, err := EventAt([]byte{1, 99, 0}, 0); !errors.Is(err, ErrInvalidCommand) {
		t.Errorf("EventAt of a bad op: got %v", err)
	}
	// EventAt looks only as far as the slot it returns.
	c := Command{Op: OpPublish, Events: []Event{{Key: "a"}, {Key: "b"}}}
	data := c.AppendBinary(nil)
	data = data[:len(data)-2]
	if e, err := EventAt(data, 0); err != nil || e.Key != "a" {
		t.Errorf("EventAt(truncated, 0) = %+v, %v", e, err)
	}
	if _, err := EventAt(data, 1); !errors.Is(err, ErrInvalidCommand) {
		t.Errorf("EventAt(truncated, 1): got %v, want ErrInvalidCommand", err)
	}
}

func TestOpString(t *testing.T) {
	for op, want := range map[Op]string{0: "Op(0)", OpReserve: "Reserve", OpAck: "Ack", OpExpire: "Expire", 7: "Op(7)"} {
		if got := op.String(); got != want {
			t.Errorf("Op(%d).String() = %q, want %q", uint8(op), got, want)
		}
	}
}
