package tier

import (
	"testing"
	"time"
)

func TestParseCycle(t *testing.T) {
	line := `time=2026-11-26T19:23:12.953Z level=DEBUG msg="tiering cycle" shards=33 objects=1 bytes=5120 advanced=19 lro_phase=2.547783ms took=1.2s forgot=0 swept=0 failed=false`
	c, ok := ParseCycle(line)
	want := Cycle{Shards: 33, Objects: 1, Bytes: 5120, Advanced: 19, LROPhase: 2547783 * time.Nanosecond, Took: 1200 * time.Millisecond}
	if !ok || c != want {
		t.Errorf("ParseCycle = %+v, %v; want %+v", c, ok, want)
	}
	for _, bad := range []string{
		`time=... level=WARN msg="tiering cycle failed; the next one tries again" err=x`,
		`time=... level=DEBUG msg="tiering cycle" shards=33 objects=1 bytes=5120 advanced=19 lro_phase=soon took=1s`,
		`time=... level=DEBUG msg="tiering cycle" shards=33`,
	} {
		if c, ok := ParseCycle(bad); ok {
			t.Errorf("ParseCycle(%q) = %+v, want no cycle", bad, c)
		}
	}
}

func TestLineWriterSplitsWrites(t *testing.T) {
	var l cycleLog
	w := l.node(2)
	line := `level=DEBUG msg="tiering cycle" shards=4 objects=0 bytes=0 advanced=4 lro_phase=4ms took=5ms` + "\n"
	w.Write([]byte("level=INFO msg=other\n" + line[:20]))
	w.Write([]byte(line[20:] + line))
	if got := l.of(2); len(got) != 2 || got[0].Node != 2 || got[1].LROPhase != 4*time.Millisecond {
		t.Errorf("cycles %+v, want two of node 2", got)
	}
}

func TestSummarizeDropsCyclesThatAdvancedFew(t *testing.T) {
	ms := time.Millisecond
	s := summarize([]Cycle{
		{Shards: 10, Advanced: 10, LROPhase: 10 * ms, Took: 20 * ms},
		{Shards: 10, Advanced: 8, LROPhase: 40 * ms, Took: 50 * ms},
		{Shards: 10, Advanced: 6, LROPhase: 30 * ms, Took: 40 * ms},
		{Shards: 10, Advanced: 2, LROPhase: 1 * ms, Took: 2 * ms}, // too few
		{Shards: 0, Advanced: 0},                                  // none
	}, 0.5)
	want := Summary{Cycles: 3, Dropped: 2, MedianLRO: 30 * ms, MeanLRO: 80 * ms / 3, MaxLRO: 40 * ms,
		MedianPerLRO: 5 * ms, MedianAdvanced: 8, MedianCycle: 40 * ms}
	if s != want {
		t.Errorf("summary %+v, want %+v", s, want)
	}
}
