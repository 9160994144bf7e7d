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
		{Op: OpAttempt, Offsets: []uint64{3, 1, 4, 1, 5}},
		{Op: OpAttempt},
		{Op: OpDeadLetter, Time: 1_700_000_000_000_000_000, Dead: []DeadInfo{
			{Offset: 12, Reason: "max_retries", LastError: "HTTP 503: Service Unavailable"},
			{Offset: 3, Reason: "time_to_live"},
			{Offset: math.MaxUint64, LastError: "naïve €rror \xff"},
			{},
		}},
		{Op: OpDeadLetter, Dead: []DeadInfo{{Offset: 1, Reason: string(make([]byte, 2000))}}},
		{Op: OpReplayDead, Time: 9, Offsets: []uint64{2, 7}, Events: []Event{{Key: "a", Payload: []byte("x")}, {Key: "b"}}},
		{Op: OpReplayDead, Offsets: []uint64{1}},
		{Op: OpPurgeDead, Offsets: []uint64{8, 9}},
		{Op: OpPurgeDead},
		{Op: OpSkip, Subscription: 3, Offsets: []uint64{4, 2}},
		{Op: OpAck, Subscription: math.MaxUint64, Offsets: []uint64{1}},
		{Op: OpSubscribe, Subscription: 1, From: FromNow},
		{Op: OpSubscribe},
		{Op: OpUnsubscribe, Subscription: 12},
		// Fields an op does not use still round-trip.
		{Op: OpAck, Time: 1, ReservationID: 2, Bytes: 3, Count: 4, MaxQueueBytes: 5, OlderThan: 6,
			Offsets: []uint64{7}, Dead: []DeadInfo{{Offset: 8, Reason: "9"}}, Events: []Event{{Key: "10"}}},
		{Op: OpRetain, OlderThan: 1_700_000_000_000_000_000},
		{Op: OpRetain, OlderThan: RetainNone},
		{Op: OpSeek, Subscription: 5, From: 17},
		{Op: OpSeek, From: FromNow},
		{Op: OpTierAdvance, From: 1234},
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
	c := Command{Op: OpPublish, Offsets: []uint64{}, Dead: []DeadInfo{}, Events: []Event{{Payload: []byte{}, Headers: []Header{}}}}
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
		{Command{Op: OpAbort, ReservationID: 300}, []byte{2, 3, 0x02, 0xac, 0x02}},
		{Command{Op: OpReserve, Time: -1, Bytes: 2, Count: 1}, []byte{2, 1, 0x0d, 0x01, 0x04, 0x02}},
		{Command{Op: OpAck, Offsets: []uint64{10, 11, 9}}, []byte{2, 5, 0x20, 3, 20, 2, 3}},
		{Command{Op: OpExpire, OlderThan: 64}, []byte{2, 6, 0x80, 0x01, 0x80, 0x01}},
		{Command{Op: OpPublish, MaxQueueBytes: 1, Events: []Event{{Key: "k", Payload: []byte("pp"), Headers: []Header{{"n", "v"}}}}},
			[]byte{2, 4, 0x50, 0x02, 1, 10, 1, 'k', 2, 'p', 'p', 1, 1, 'n', 1, 'v'}},
		{Command{Op: OpAttempt, Offsets: []uint64{7}}, []byte{2, 7, 0x20, 1, 14}},
		{Command{Op: OpDeadLetter, Time: 1, Dead: []DeadInfo{{5, "r", "e"}, {3, "", ""}}},
			[]byte{2, 8, 0x81, 0x02, 0x02, 2, 10, 1, 'r', 1, 'e', 3, 0, 0}},
		{Command{Op: OpReplayDead, Time: 2, Offsets: []uint64{4}, Events: []Event{{Key: "k"}}},
			[]byte{2, 9, 0x61, 0x04, 1, 8, 1, 4, 1, 'k', 0, 0}},
		{Command{Op: OpPurgeDead}, []byte{2, 10, 0}},
	}
	for _, tt := range tests {
		if got := tt.c.AppendBinary(nil); !bytes.Equal(got, tt.want) {
			t.Errorf("%+v encodes as %v, want %v", tt.c, got, tt.want)
		}
	}
}

func TestUnmarshalCommandRejects(t *testing.T) {
	valid := (&Command{Op: OpCommit, Time: 1, ReservationID: 2, Offsets: []uint64{3}, Dead: []DeadInfo{{4, "r", "e"}},
		Events: []Event{{Key: "k", Payload: []byte("p"), Headers: []Header{{"n", "v"}}}}}).AppendBinary(nil)
	for n := range len(valid) {
		if _, err := UnmarshalCommand(valid[:n]); !errors.Is(err, ErrInvalidCommand) {
			t.Errorf("truncated to %d bytes: got %v, want ErrInvalidCommand", n, err)
		}
	}
	// Masks of one field; those from fieldOlderThan on take two bytes.
	one := func(f fieldMask) byte { return byte(f) }
	const olderThan, dead = 0x80, 0x80 // first bytes of their masks, then 0x01, 0x02
	tests := map[string][]byte{
		"empty":               nil,
		"version 0":           {0, 1, 0},
		"version 1":           {1, 1, 0},
		"version 3":           {3, 1, 0},
		"op 0":                {2, 0, 0},
		"op 17":               {2, 17, 0},
		"trailing byte":       {2, 3, 0, 0},
		"unknown field":       {2, 3, 0x80, 0x04, 0},
		"unknown high field":  {2, 3, 0x80, 0x80, 0x80, 0x80, 0x01, 0},
		"non-minimal mask":    {2, 3, 0x80, 0x00},
		"zero time":           {2, 1, one(fieldTime), 0},
		"zero reservation":    {2, 3, one(fieldReservationID), 0},
		"zero bytes":          {2, 1, one(fieldBytes), 0},
		"zero count":          {2, 1, one(fieldCount), 0},
		"zero max bytes":      {2, 1, one(fieldMaxQueueBytes), 0},
		"zero older than":     {2, 6, olderThan, 0x01, 0},
		"no offsets":          {2, 5, one(fieldOffsets), 0},
		"too many offsets":    {2, 5, one(fieldOffsets), 3, 0, 0},
		"no dead":             {2, 8, dead, 0x02, 0},
		"too many dead":       {2, 8, dead, 0x02, 2, 0, 0, 0},
		"dead reason":         {2, 8, dead, 0x02, 1, 0, 5, 0},
		"dead error":          {2, 8, dead, 0x02, 1, 0, 0, 2, 0},
		"dead offset":         {2, 8, dead, 0x02, 1, 0xff, 0, 0},
		"no events":           {2, 4, one(fieldEvents), 0},
		"too many events":     {2, 4, one(fieldEvents), 2, 3, 0, 0, 0},
		"event too long":      {2, 4, one(fieldEvents), 1, 4, 0, 0, 0},
		"event too short":     {2, 4, one(fieldEvents), 1, 2, 0, 0},
		"event trailing byte": {2, 4, one(fieldEvents), 1, 4, 0, 0, 0, 0},
		"key too long":        {2, 4, one(fieldEvents), 1, 3, 5, 0, 0},
		"header count":        {2, 4, one(fieldEvents), 1, 4, 0, 0, 1, 0},
		"header value":        {2, 4, one(fieldEvents), 1, 5, 0, 0, 1, 0, 1},
		"non-minimal varint":  {2, 3, one(fieldReservationID), 0x81, 0x00},
		"varint overflow":     {2, 3, one(fieldReservationID), 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x02},
		"varint truncated":    {2, 3, one(fieldReservationID), 0xff},
		"huge offset count":   {2, 5, one(fieldOffsets), 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f},
		"huge dead count":     {2, 8, dead, 0x02, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f},
		"huge event length":   {2, 4, one(fieldEvents), 1, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01},
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
	if _, err := EventAt([]byte{commandVersion, 99, 0}, 0); !errors.Is(err, ErrInvalidCommand) {
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
	for op, want := range map[Op]string{0: "Op(0)", OpReserve: "Reserve", OpAck: "Ack", OpExpire: "Expire",
		OpAttempt: "Attempt", OpDeadLetter: "DeadLetter", OpReplayDead: "ReplayDead", OpPurgeDead: "PurgeDead",
		OpSkip: "Skip", OpSubscribe: "Subscribe", OpUnsubscribe: "Unsubscribe", OpRetain: "Retain", OpSeek: "Seek",
		OpTierAdvance: "TierAdvance", 17: "Op(17)"} {
		if got := op.String(); got != want {
			t.Errorf("Op(%d).String() = %q, want %q", uint8(op), got, want)
		}
	}
}
