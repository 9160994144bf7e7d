package backoff

import (
	"context"
	"errors"
	"math"
	"testing"
	"time"
)

func TestDelayDoublesUpToMax(t *testing.T) {
	p := Policy{Initial: time.Second, Max: 60 * time.Second}
	for n, want := range map[int]time.Duration{
		-1: time.Second, 0: time.Second, 1: time.Second, 2: 2 * time.Second, 3: 4 * time.Second,
		6: 32 * time.Second, 7: 60 * time.Second, 1 << 30: 60 * time.Second,
	} {
		if got := p.Delay(n); got != want {
			t.Errorf("Delay(%d) = %v, want %v", n, got, want)
		}
	}
}

func TestDelayDoesNotOverflow(t *testing.T) {
	p := Policy{Initial: math.MaxInt64 / 3, Max: math.MaxInt64}
	if got := p.Delay(5); got != math.MaxInt64 {
		t.Errorf("Delay(5) = %v, want the longest Duration", got)
	}
	if got := (Policy{Max: time.Second}).Delay(1 << 30); got != 0 {
		t.Errorf("Delay with no Initial = %v, want 0", got)
	}
	if got := (Policy{Initial: time.Minute, Max: time.Second}).Delay(1); got != time.Second {
		t.Errorf("Delay with Initial above Max = %v, want Max", got)
	}
}

func TestJitterShortensWithinItsFraction(t *testing.T) {
	for _, tc := range []struct {
		jitter, random float64
		want           time.Duration
	}{
		{0.2, 0, 4 * time.Second},
		{0.2, 0.5, 3600 * time.Millisecond},
		{0.2, 0.999999, 3200*time.Millisecond + 800*time.Nanosecond},
		{1, 0.5, 2 * time.Second},
		{3, 0.5, 2 * time.Second}, // more than 1 counts as 1
	} {
		p := Policy{Initial: time.Second, Max: time.Minute, Jitter: tc.jitter, Rand: func() float64 { return tc.random }}
		if got := p.Delay(3); got != tc.want {
			t.Errorf("jitter %v, random %v: Delay(3) = %v, want %v", tc.jitter, tc.random, got, tc.want)
		}
	}
}

func TestJitterDefaultRandStaysInRange(t *testing.T) {
	p := Policy{Initial: time.Second, Max: time.Second, Jitter: 0.5}
	for range 1000 {
		if d := p.Delay(1); d <= 500*time.Millisecond || d > time.Second {
			t.Fatalf("Delay(1) = %v, want (500ms, 1s]", d)
		}
	}
}

func TestBackoffNextAndReset(t *testing.T) {
	b := New(Policy{Initial: 50 * time.Millisecond, Max: 5 * time.Second})
	var got []time.Duration
	for range 9 {
		got = append(got, b.Next())
	}
	want := []time.Duration{50, 100, 200, 400, 800, 1600, 3200, 5000, 5000}
	for i := range want {
		if got[i] != want[i]*time.Millisecond {
			t.Fatalf("pauses %v, want %v ms", got, want)
		}
	}
	b.Reset()
	if d := b.Next(); d != 50*time.Millisecond {
		t.Errorf("after Reset, Next = %v, want 50ms", d)
	}
}

func TestSleepEndsWithContext(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := Sleep(ctx, 0); !errors.Is(err, context.Canceled) {
		t.Errorf("Sleep with a canceled context = %v, want context.Canceled", err)
	}
	ctx, cancel = context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- Sleep(ctx, time.Hour) }()
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Errorf("Sleep canceled midway = %v, want context.Canceled", err)
	}
	if err := Sleep(context.Background(), time.Millisecond); err != nil {
		t.Errorf("Sleep(1ms) = %v, want nil", err)
	}
}
