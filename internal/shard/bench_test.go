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
		"DeadLetter":     {Op: OpDeadLetter, Time: 1.7e18, Dead: []DeadInfo{{Offset: 1_000_000, Reason: "max_retries", LastError: "HTTP 503: Service Unavailable"}}},
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
	b.Run("100k-half-acked", func(b *testing.B) {
		s, index := filledState(b, 100_000)
		offsets := make([]uint64, 0, 50_000)
		for o := uint64(1); o < 100_000; o += 2 {
			offsets = append(offsets, o)
		}
		s.Apply(index+1, &Command{Op: OpAck, Offsets: offsets})
		benchMarshal(b, s)
	})
	for _, batch := range []int{16, 1} {
		b.Run(fmt.Sprintf("1M-batch%d", batch), func(b *testing.B) {
			s, _ := backlogState(b, 1_000_000, batch)
			benchMarshal(b, s)
		})
	}
}

// BenchmarkUnmarshalBinary restores the states of BenchmarkMarshalBinary.
func BenchmarkUnmarshalBinary(b *testing.B) {
	for _, batch := range []int{16, 1} {
		b.Run(fmt.Sprintf("1M-batch%d", batch), func(b *testing.B) {
			s, _ := backlogState(b, 1_000_000, batch)
			data, _ := s.MarshalBinary()
			b.SetBytes(int64(len(data)))
			b.ReportAllocs()
			for b.Loop() {
				var r State
				if err := r.UnmarshalBinary(data); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func benchMarshal(b *testing.B, s *State) {
	data, _ := s.MarshalBinary()
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := s.MarshalBinary(); err != nil {
			b.Fatal(err)
		}
	}
}

// backlogState returns a shard holding a backlog of exactly pending
// events of 1 KiB, published batch to a log entry, as a shard whose
// consumers have fallen far behind looks: besides the backlog, the first
// 100,000 offsets hold 10,000 events acknowledged out of order, and near
// the head 1,000 events have failed attempts and 1,000 more were given up
// on as dead letters.
func backlogState(b *testing.B, pending, batch int) (*State, uint64) {
	b.Helper()
	const acks, dead, tried = 10_000, 1_000, 1_000
	s := New()
	var index uint64
	apply := func(c *Command) {
		index++
		if r := s.Apply(index, c); r.Err != nil {
			b.Fatal(r.Err)
		}
	}
	events := make([]Event, batch)
	for i := range events {
		events[i] = Event{Payload: make([]byte, 1024)}
	}
	total := pending + acks + dead
	for s.NextOffset() < uint64(total) {
		c := Command{Op: OpPublish, Time: 1.7e18 + int64(index)*1e6, Events: events}
		if left := total - int(s.NextOffset()); left < batch {
			c.Events = events[:left]
		}
		apply(&c)
	}
	ack := Command{Op: OpAck}
	for o := uint64(5); len(ack.Offsets) < acks; o += 10 {
		ack.Offsets = append(ack.Offsets, o)
	}
	apply(&ack)
	attempt := Command{Op: OpAttempt}
	dl := Command{Op: OpDeadLetter, Time: 1.8e18}
	for o := uint64(1); len(dl.Dead) < dead; o++ {
		if o%10 == 5 {
			continue
		}
		if len(attempt.Offsets) < tried {
			attempt.Offsets = append(attempt.Offsets, o)
			continue
		}
		dl.Dead = append(dl.Dead, DeadInfo{Offset: o, Reason: "max_retries", LastError: "HTTP 503: Service Unavailable"})
	}
	apply(&attempt)
	apply(&attempt)
	apply(&dl)
	if st := s.Stats(); st.Events != int64(pending) || st.DeadLetters != dead {
		b.Fatalf("backlog of %d events and %d dead letters, want %d and %d", st.Events, st.DeadLetters, pending, dead)
	}
	return s, index
}

// BenchmarkApplyAckAfterAttempts acks events that each failed once, so
// every ack also drops an attempt count.
func BenchmarkApplyAckAfterAttempts(b *testing.B) {
	s, index := filledState(b, b.N)
	c := Command{Op: OpAck, Offsets: make([]uint64, 1)}
	a := Command{Op: OpAttempt, Offsets: make([]uint64, 1)}
	for i := range b.N {
		a.Offsets[0] = uint64(i)
		index++
		s.Apply(index, &a)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		c.Offsets[0] = uint64(i)
		index++
		if r := s.Apply(index, &c); r.Err != nil || r.Count != 1 {
			b.Fatal(r)
		}
	}
}

// BenchmarkApplyDeadLetter gives up on events at the head one at a time,
// as a dispatcher facing a dead endpoint does, purging now and then.
func BenchmarkApplyDeadLetter(b *testing.B) {
	s, index := filledState(b, b.N)
	c := Command{Op: OpDeadLetter, Time: 1.7e18, Dead: []DeadInfo{{Reason: "max_retries", LastError: "HTTP 503: Service Unavailable"}}}
	purge := Command{Op: OpPurgeDead}
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		c.Dead[0].Offset = uint64(i)
		index++
		if r := s.Apply(index, &c); r.Err != nil || r.Count != 1 {
			b.Fatal(r)
		}
		if i%4096 == 4095 {
			index++
			s.Apply(index, &purge)
		}
	}
}

// BenchmarkApplyReplayDead replays dead letters oldest first, 64 a command.
func BenchmarkApplyReplayDead(b *testing.B) {
	n := b.N + 64
	s, index := filledState(b, n)
	dead := make([]DeadInfo, n)
	for i := range dead {
		dead[i].Offset = uint64(i)
	}
	index++
	s.Apply(index, &Command{Op: OpDeadLetter, Dead: dead})
	c := Command{Op: OpReplayDead, Time: 1.7e18, Offsets: make([]uint64, 64), Events: make([]Event, 64)}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i += 64 {
		for j := range c.Offsets {
			c.Offsets[j] = uint64(i + j)
		}
		index++
		if r := s.Apply(index, &c); r.Err != nil {
			b.Fatal(r.Err)
		}
	}
}

func BenchmarkMarshalBinaryDeadLetters(b *testing.B) {
	s, index := filledState(b, 100_000)
	var dead []DeadInfo
	for o := uint64(0); o < 100_000; o += 10 {
		dead = append(dead, DeadInfo{Offset: o, Reason: "max_retries", LastError: "HTTP 503: Service Unavailable"})
	}
	s.Apply(index+1, &Command{Op: OpDeadLetter, Time: 1.7e18, Dead: dead})
	data, _ := s.MarshalBinary()
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := s.MarshalBinary(); err != nil {
			b.Fatal(err)
		}
	}
}
