package shard

import (
	"fmt"
	"testing"
)

func kibEvents(n int) []Event {
	es := make([]Event, n)
	for i := range es {
		es[i] = Event{Key: fmt.Sprintf("key-%d", i), Payload: make([]byte, 1024)}
	}
	return es
}

func BenchmarkApplyPublish(b *testing.B) {
	for _, n := range []int{1, 16} {
		b.Run(fmt.Sprintf("%dx1KiB", n), func(b *testing.B) {
			c := Command{Op: OpPublish, Time: 1.7e18, MaxQueueBytes: 1 << 40, Events: kibEvents(n)}
			b.SetBytes(int64(n) * 1024)
			b.ReportAllocs()
			s := New()
			var index uint64
			for b.Loop() {
				index++
				if index%(1<<16) == 0 {
					// Keep memory bounded: start over with an empty shard.
					b.StopTimer()
					s = New()
					b.StartTimer()
				}
				if r := s.Apply(index, &c); r.Err != nil {
					b.Fatal(r.Err)
				}
			}
		})
	}
}

// filledState returns a shard holding n pending events, published 1024 at
// a time.
func filledState(b *testing.B, n int) (*State, uint64) {
	b.Helper()
	s := New()
	batch := make([]Event, 1024)
	var index uint64
	for s.NextOffset() < uint64(n) {
		index++
		if r := s.Apply(index, &Command{Op: OpPublish, Events: batch}); r.Err != nil {
			b.Fatal(r.Err)
		}
	}
	return s, index
}

func BenchmarkApplyAck(b *testing.B) {
	b.Run("InOrder", func(b *testing.B) {
		s, index := filledState(b, b.N)
		c := Command{Op: OpAck, Offsets: make([]uint64, 1)}
		b.ReportAllocs()
		b.ResetTimer()
		for i := range b.N {
			c.Offsets[0] = uint64(i)
			index++
			if r := s.Apply(index, &c); r.Err != nil || r.Count != 1 {
				b.Fatal(r)
			}
		}
	})
	b.Run("SwappedPairs", func(b *testing.B) {
		// Every other ack arrives early, so the head advances by two on
		// every second command.
		s, index := filledState(b, b.N+1)
		c := Command{Op: OpAck, Offsets: make([]uint64, 1)}
		b.ReportAllocs()
		b.ResetTimer()
		for i := range b.N {
			c.Offsets[0] = uint64(i ^ 1)
			index++
			if r := s.Apply(index, &c); r.Err != nil || r.Count != 1 {
				b.Fatal(r)
			}
		}
	})
	b.Run("Batch64", func(b *testing.B) {
		// Reported per event, 64 events per command.
		s, index := filledState(b, b.N+64)
		c := Command{Op: OpAck, Offsets: make([]uint64, 64)}
		b.ReportAllocs()
		b.ResetTimer()
		for i := 0; i < b.N; i += 64 {
			for j := range c.Offsets {
				c.Offsets[j] = uint64(i + j)
			}
			index++
			if r := s.Apply(index, &c); r.Err != nil {
				b.Fatal(r)
			}
		}
	})
}

func benchCommands() map[string]Command {
	offsets := make([]uint64, 64)
	for i := range offsets {
		offsets[i] = 1_000_000 + uint64(i)
	}
	return map[string]Command{
		"Publish16x1KiB": {Op: OpPublish, Time: 1.7e18, MaxQueueBytes: 1 << 30, Events: kibEvents(16)},
		"Ack64":          {Op: OpAck, Time: 1.7e18, Offsets: offsets},
		"Reserve":        {Op: OpReserve, Time: 1.7e18, Bytes: 1 << 20, Count: 16, MaxQueueBytes: 1 << 30},
	}
}

func BenchmarkAppendBinary(b *testing.B) {
	for name, c := range benchCommands() {
		b.Run(name, func(b *testing.B) {
			buf := c.AppendBinary(nil)
			b.SetBytes(int64(len(buf)))
			b.ReportAllocs()
			for b.Loop() {
				buf = c.AppendBinary(buf[:0])
			}
		})
	}
}

func BenchmarkUnmarshalCommand(b *testing.B) {
	for name, c := range benchCommands() {
		b.Run(name, func(b *testing.B) {
			data := c.AppendBinary(nil)
			b.SetBytes(int64(len(data)))
			b.ReportAllocs()
			for b.Loop() {
				if _, err := UnmarshalCommand(data); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func BenchmarkEventAt(b *testing.B) {
	c := Command{Op: OpPublish, Events: kibEvents(16)}
	data := c.AppendBinary(nil)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := EventAt(data, 15); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkMarshalBinary(b *testing.B) {
	s, index := filledState(b, 100_000)
	offsets := make([]uint64, 0, 50_000)
	for o := uint64(1); o < 100_000; o += 2 {
		offsets = append(offsets, o)
	}
	s.Apply(index+1, &Command{Op: OpAck, Offsets: offsets})
	data, _ := s.MarshalBinary()
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := s.MarshalBinary(); err != nil {
			b.Fatal(err)
		}
	}
}
