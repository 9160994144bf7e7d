package shard

import "testing"

func TestOpOf(t *testing.T) {
	for _, c := range []Command{
		{Op: OpAck, Offsets: []uint64{3, 1}},
		{Op: OpPublish, Time: 1, Events: []Event{{Key: "k", Payload: []byte("p")}}},
		{Op: OpExpire, OlderThan: 5},
	} {
		op, ok := OpOf(c.AppendBinary(nil))
		if !ok || op != c.Op {
			t.Errorf("OpOf(%v command) = %v, %v; want %v, true", c.Op, op, ok, c.Op)
		}
	}
	for _, data := range [][]byte{nil, {commandVersion}, {commandVersion + 1, byte(OpAck)}, {commandVersion, 0}, {commandVersion, byte(OpPurgeDead) + 1}} {
		if op, ok := OpOf(data); ok {
			t.Errorf("OpOf(%v) = %v, true; want false", data, op)
		}
	}
}
