package shard

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

var updateSeeds = flag.Bool("update-seeds", false, "rewrite the fuzz seed corpora in testdata/fuzz")

// seedProgram builds inputs for FuzzStateMachine step by step, in the
// layout fuzzProgram reads: selector, index byte, clock byte, arguments.
// Every step uses the next log index and moves the clock forward by one.
type seedProgram struct {
	b    []byte
	last int // where the last step starts
}

func (p *seedProgram) step(sel byte, args ...byte) *seedProgram {
	p.last = len(p.b)
	p.b = append(p.b, sel, 128, 2)
	p.b = append(p.b, args...)
	return p
}

// eventArgs describes events with the given payload sizes (under 40), no
// key and no headers. fuzzProgram takes at most three events a command.
func eventArgs(sizes []byte) []byte {
	if len(sizes) > 3 {
		panic("more than three events in a seed command")
	}
	b := []byte{byte(len(sizes))}
	for _, n := range sizes {
		b = append(b, 0, n, 0)
	}
	return b
}

// limitArg encodes a max_queue_bytes of 64..254, or 0 for unlimited.
func limitArg(limit byte) byte { return limit }

func (p *seedProgram) reserve(bytes, count, limit byte) *seedProgram {
	return p.step(stepReserve, bytes+2, count, limitArg(limit))
}

func (p *seedProgram) publish(limit byte, sizes ...byte) *seedProgram {
	return p.step(stepPublish, append([]byte{limitArg(limit)}, eventArgs(sizes)...)...)
}

// commit commits into the reservation back places before the newest.
func (p *seedProgram) commit(back byte, sizes ...byte) *seedProgram {
	return p.step(stepCommit, append([]byte{back}, eventArgs(sizes)...)...)
}

func (p *seedProgram) abort(back byte) *seedProgram { return p.step(stepAbort, back) }

// ack acknowledges offsets given relative to the head.
func (p *seedProgram) ack(rel ...byte) *seedProgram {
	args := []byte{byte(len(rel))}
	for _, r := range rel {
		args = append(args, 40+r)
	}
	return p.step(stepAck, args...)
}

func (p *seedProgram) expire(back byte) *seedProgram { return p.step(stepExpire, back) }
func (p *seedProgram) snap() *seedProgram            { return p.step(stepSnapshot) }

// retain frees the retained events published more than b%32 ticks ago,
// starting retention if the shard does not retain; b below 16 stops
// retaining.
func (p *seedProgram) retain(b byte) *seedProgram { return p.step(stepRetain, b) }

// seek moves the cursor to offset from (0-111), or with time set to the
// first event from there published at most back ticks ago (0-31).
func (p *seedProgram) seek(from byte, time bool, back byte) *seedProgram {
	tb := byte(0)
	if time {
		tb = 128 + back
	}
	return p.step(stepSeek, 144+from, tb)
}

// tierAdvance advances the LRO to back log indexes (0-7) below the one
// after this step's: 1 is this step's own, 0 beyond it, which is refused.
func (p *seedProgram) tierAdvance(back byte) *seedProgram { return p.step(stepBad, 128, back) }

// capture captures a snapshot with SnapshotFunc before the last step.
func (p *seedProgram) capture() *seedProgram { p.b[p.last] |= selCapture; return p }

// check checks the oldest snapshot held before the last step.
func (p *seedProgram) check() *seedProgram { p.b[p.last] |= selCheck; return p }

// attempt records failed attempts of offsets given relative to the head.
func (p *seedProgram) attempt(rel ...byte) *seedProgram {
	args := []byte{byte(len(rel))}
	for _, r := range rel {
		args = append(args, 40+r)
	}
	return p.step(stepAttempt, args...)
}

// Text bytes for reasons and errors: 0-3 give that many letters, 250-255
// something just over MaxDeadLetterText with multi-byte runes at the cut.
const (
	shortText byte = 2
	longText  byte = 252
)

// dead dead-letters offsets given relative to the head, with short texts.
func (p *seedProgram) dead(rel ...byte) *seedProgram {
	args := []byte{byte(len(rel))}
	for _, r := range rel {
		args = append(args, 40+r, shortText, 1)
	}
	return p.step(stepDead, args...)
}

// deadHead dead-letters the event at the head.
func (p *seedProgram) deadHead(reason, lastErr byte) *seedProgram {
	return p.step(stepDeadHead, reason, lastErr)
}

// replay replays n dead letters (1-4) from position start among them;
// spoil 0-3 spoils the command as fuzzProgram.replay describes, 4 leaves
// it alone.
func (p *seedProgram) replay(n, start, spoil byte) *seedProgram {
	args := []byte{spoil<<5 | (n-1)%4, start}
	if spoil == 1 {
		args = append(args, 200) // the extra offset
	}
	return p.step(stepReplay, args...)
}

// purge purges dead letters at positions among them (32 and up), or
// anywhere (below 32).
func (p *seedProgram) purge(which ...byte) *seedProgram {
	return p.step(stepPurge, append([]byte{byte(len(which) - 1)}, which...)...)
}

func stateMachineSeeds() map[string][]byte {
	seeds := map[string][]byte{
		"publish-ack-out-of-order": new(seedProgram).
			publish(0, 1, 2, 3).publish(0, 4, 5).publish(0, 6).
			ack(2).ack(1, 4).ack(0).snap().ack(0, 1, 2).b,
		"reserve-commit-abort": new(seedProgram).
			reserve(30, 2, 100).commit(0, 10, 10).
			reserve(20, 0, 0).reserve(5, 1, 0).commit(0, 3, 3).commit(0, 6).
			abort(0).abort(0).commit(1, 1).snap().b,
		"queue-full": new(seedProgram).
			publish(100, 39).publish(100, 39).publish(100, 39).
			reserve(30, 0, 100).reserve(22, 0, 100).ack(0).reserve(22, 0, 100).
			commit(0, 20).b,
		"expire": new(seedProgram).
			reserve(1, 0, 0).reserve(2, 0, 0).reserve(3, 0, 0).
			expire(2).snap().expire(0).commit(0, 1).b,
		"fit-newest-reservation": new(seedProgram).
			reserve(40, 1, 200).step(stepCommit2).reserve(0, 0, 0).step(stepCommit2).b,
		"stale-index-and-bad-ops": append(new(seedProgram).publish(0, 1).ack(0).b,
			stepPublish, 0, 2, 0, 1, 0, 1, 0, // stale index
			stepBad, 128, 2, 0, // nil command
			stepBad, 128, 2, 1, // op 0
			stepBad, 250, 2, 2, // op > OpExpire, after a gap in indexes
			stepAckHead, 128, 2),
	}
	seeds["dead-letter-head"] = new(seedProgram).
		publish(0, 5, 6, 7).publish(0, 8).attempt(0, 0, 1).dead(1).ack(2).
		deadHead(shortText, 3).snap().replay(2, 0, 4).
		step(stepAckDead, 200).step(stepAttemptHead).deadHead(0, 0).snap().
		step(stepPurgeAll).b
	seeds["dead-letter-queue-full"] = new(seedProgram).
		publish(100, 39).publish(100, 39).deadHead(1, 1).deadHead(1, 1).
		publish(100, 30).reserve(30, 0, 100).purge(32).publish(100, 30).
		step(stepPurgeAll).publish(100, 30).b
	seeds["replay-rejections"] = new(seedProgram).
		publish(0, 1, 2, 3).publish(0, 4).deadHead(1, 1).deadHead(1, 1).deadHead(1, 1).
		replay(2, 0, 0).replay(1, 0, 1).replay(3, 0, 2).replay(2, 1, 3).snap().
		replay(4, 1, 4).replay(1, 0, 4).snap().b
	seeds["long-texts"] = new(seedProgram).
		publish(0, 1, 1, 1).deadHead(longText, 250).deadHead(255, longText).
		dead(0).snap().b
	seeds["purge-some"] = new(seedProgram).
		publish(0, 1, 2, 3).publish(0, 4, 5, 6).dead(1, 3, 5).ack(2).deadHead(1, 0).
		purge(33).purge(32, 34, 7).snap().purge(0, 1).b
	// A longer mixed run with snapshots throughout.
	p := new(seedProgram)
	for i := range byte(30) {
		p.publish(0, i%7, i%3).reserve(i, i%3, 0).ack(i%2, 1+i%3).attempt(0, i%4)
		switch i % 5 {
		case 0:
			p.commit(1, i%4).snap().expire(3)
		case 1:
			p.dead(i%3, 1)
		case 2:
			p.deadHead(i, 1)
		case 3:
			p.replay(i%3+1, i, 4)
		case 4:
			p.purge(32 + i)
		}
	}
	seeds["mixed-with-snapshots"] = p.b
	// Snapshots captured with SnapshotFunc, held while every kind of
	// command changes the shard, across a restore, and checked later.
	p = new(seedProgram)
	p.publish(0, 1, 2, 3).publish(0, 4, 5, 6).reserve(10, 0, 0).capture().
		ack(1).check().attempt(0, 2).capture().dead(2).capture().
		replay(1, 0, 4).capture().commit(0, 7).expire(0).capture().
		purge(32).check().snap().capture().reserve(5, 0, 0).abort(0).
		deadHead(1, 1).capture().step(stepPurgeAll).check()
	for i := range byte(40) {
		p.publish(0, i%5, 3).ack(1 + i%3).attempt(i % 2)
		if i%4 == 0 {
			p.capture()
		}
		if i%5 == 0 {
			p.deadHead(1, 1).check()
		}
	}
	seeds["snapshot-funcs"] = p.b
	// Retention: events kept past their acks, trimmed, sought back to
	// and forward over, across snapshots and captures, and stopped.
	p = new(seedProgram)
	p.publish(0, 1, 2).ack(0).retain(16).publish(0, 3, 4, 5).publish(0, 6).
		ack(0, 1, 2, 3).capture().seek(0, false, 0).check().snap().
		deadHead(1, 1).seek(1, false, 0).retain(18).capture().seek(3, true, 1).
		ack(0).replay(1, 0, 4).seek(0, false, 0).snap().check().retain(0).seek(0, false, 0)
	for i := range byte(30) {
		p.publish(0, i%5, 2).ack(i%3, 1).attempt(0)
		switch i % 6 {
		case 0:
			p.retain(16 + i%32).capture()
		case 1:
			p.seek(i*3, i%2 == 0, i%8)
		case 2:
			p.deadHead(1, 1).check()
		case 3:
			p.seek(100+i, false, 0).snap()
		case 4:
			p.replay(1, 0, 4)
		case 5:
			p.retain(0)
		}
	}
	seeds["retain-seek"] = p.b
	p = new(seedProgram).publish(0, 1, 2).tierAdvance(3).tierAdvance(0).capture().
		tierAdvance(2).tierAdvance(5).snap().check().publish(0, 3).tierAdvance(1).capture()
	for i := range byte(20) {
		p.publish(0, i%5).ack(0).tierAdvance(i % 8)
		if i%4 == 0 {
			p.snap().check()
		}
	}
	seeds["tier-advance"] = p.b
	return seeds
}

// subscriptionHistory is a shard whose default subscription was deleted
// and whose two others are at different places, with attempts, skips and
// dead letters of their own.
func subscriptionHistory(t *testing.T) *harness {
	h := newHarness(t)
	h.ok(Command{Op: OpSubscribe, Subscription: 2})
	h.ok(Command{Op: OpSubscribe, Subscription: 9})
	for i := range 12 {
		h.ok(Command{Op: OpPublish, Time: int64(i + 1), Events: events(i%4, 3)})
	}
	h.ok(Command{Op: OpUnsubscribe})
	h.ok(Command{Op: OpAck, Subscription: 2, Offsets: []uint64{0, 1, 2, 5}})
	h.ok(Command{Op: OpSkip, Subscription: 2, Offsets: []uint64{3, 7}})
	h.ok(Command{Op: OpAttempt, Subscription: 2, Offsets: []uint64{4, 4, 8}})
	h.ok(Command{Op: OpDeadLetter, Subscription: 9, Time: 50, Dead: []DeadInfo{{Offset: 0, Reason: "gone"}}})
	h.ok(Command{Op: OpAck, Subscription: 9, Offsets: []uint64{1, 2, 3}})
	return h
}

func unmarshalCommandSeeds() map[string][]byte {
	seeds := make(map[string][]byte)
	for i, c := range sampleCommands() {
		seeds[fmt.Sprintf("%02d-%v", i, c.Op)] = c.AppendBinary(nil)
	}
	dedup := Command{Op: OpPublish, Time: 5, DedupWindow: 120e9, DedupIDs: []string{"a", "", "c"}, Events: events(1, 2, 3)}
	seeds["dedup-publish"] = dedup.AppendBinary(nil)
	seeds["bad-trailing-byte"] = []byte{1, 3, 0, 0}
	seeds["bad-non-minimal"] = []byte{1, 3, byte(fieldReservationID), 0x81, 0x00}
	return seeds
}

func unmarshalBinarySeeds(t *testing.T) map[string][]byte {
	seeds := map[string][]byte{
		"empty":   snapshot(t, New()),
		"history": snapshot(t, history(t).s),
	}
	h := newHarness(t)
	for i := range 40 {
		h.apply(Command{Op: OpPublish, Time: int64(i), Events: events(i%5, 1)})
		h.apply(Command{Op: OpReserve, Time: int64(i), Bytes: int64(i)})
		h.apply(Command{Op: OpAck, Offsets: []uint64{uint64(i * 3 / 2)}})
		h.apply(Command{Op: OpAttempt, Offsets: []uint64{uint64(i*3/2 + 1), uint64(i * 2)}})
		if i%3 == 0 {
			h.apply(Command{Op: OpDeadLetter, Time: int64(100 + i), Dead: []DeadInfo{{Offset: uint64(i + 1), Reason: "r"}}})
		}
	}
	seeds["busy"] = snapshot(t, h.s)
	seeds["dedup"] = snapshot(t, dedupHistory(t).s)
	seeds["subscriptions"] = snapshot(t, subscriptionHistory(t).s)
	seeds["retention"] = snapshot(t, retentionHistory(t).s)
	seeds["tiered"] = snapshot(t, tieredHistory(t).s)
	// The same history without its key hashes, which holds nothing
	// versions 4 to 7 added and so is written as version 3, as written
	// before the dedup table (version 2) and as versions 4 to 7 would have
	// it. Version 3 appended one byte, the empty table's count; version 4
	// four, all zero with the default subscription alone; version 5 two,
	// zero with no replays and no retention; version 6 one, the zero LRO;
	// version 7 one, the count of no key hashes.
	seeds["keys"] = snapshot(t, history(t).s)
	old := snapshot(t, keyless(history(t).s))
	if old[0] != snapshotVersionV3 {
		t.Fatalf("history written as version %d, want %d", old[0], snapshotVersionV3)
	}
	seeds["v3-history"] = old
	seeds["v2-history"] = append([]byte{snapshotVersionV2}, old[1:len(old)-1]...)
	seeds["v4-history"] = append(append([]byte{snapshotVersionV4}, old[1:]...), 0, 0, 0, 0)
	seeds["v5-history"] = append(append([]byte{snapshotVersionV5}, old[1:]...), 0, 0, 0, 0, 0, 0)
	seeds["v6-history"] = append(append([]byte{snapshotVersionV6}, old[1:]...), 0, 0, 0, 0, 0, 0, 0)
	seeds["v7-history"] = append(append([]byte{snapshotVersion}, old[1:]...), 0, 0, 0, 0, 0, 0, 0, 0)
	return seeds
}

// TestFuzzSeeds checks that the seed corpora under testdata/fuzz match the
// generators above; run with -update-seeds to rewrite them. Other files in
// those directories, such as failures found by fuzzing, are left alone.
func TestFuzzSeeds(t *testing.T) {
	corpora := map[string]map[string][]byte{
		"FuzzStateMachine":     stateMachineSeeds(),
		"FuzzUnmarshalCommand": unmarshalCommandSeeds(),
		"FuzzUnmarshalBinary":  unmarshalBinarySeeds(t),
	}
	for fuzzer, seeds := range corpora {
		dir := filepath.Join("testdata", "fuzz", fuzzer)
		for name, data := range seeds {
			path := filepath.Join(dir, "seed-"+name)
			want := []byte(fmt.Sprintf("go test fuzz v1\n[]byte(%q)\n", data))
			if *updateSeeds {
				if err := os.MkdirAll(dir, 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(path, want, 0o644); err != nil {
					t.Fatal(err)
				}
				continue
			}
			got, err := os.ReadFile(path)
			if err != nil {
				t.Errorf("%v (run go test -run TestFuzzSeeds -update-seeds)", err)
				continue
			}
			if !bytes.Equal(got, want) {
				t.Errorf("%s is out of date (run go test -run TestFuzzSeeds -update-seeds)", path)
			}
		}
	}
}
