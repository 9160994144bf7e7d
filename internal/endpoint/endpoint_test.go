package endpoint

import (
	"errors"
	"fmt"
	"net/http"
	"testing"
	"time"
)

func TestParseRetryAfter(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	for _, c := range []struct {
		value string
		want  time.Duration
		ok    bool
	}{
		{"7", 7 * time.Second, true},
		{" 7 ", 7 * time.Second, true},
		{"0", 0, true},
		{"3600", time.Hour, true},
		{"3601", MaxRetryAfter, true},                    // capped
		{"99999999999999999999999", MaxRetryAfter, true}, // past uint64: still a long pause
		{now.Add(90 * time.Second).Format(http.TimeFormat), 90 * time.Second, true},
		{now.Add(-time.Minute).Format(http.TimeFormat), 0, true}, // past: at once
		{now.Add(48 * time.Hour).Format(http.TimeFormat), MaxRetryAfter, true},
		{"Sat, 02 Jan 2026 03:05:05 GMT", 60 * time.Second, true},
		{"Saturday, 02-Jan-26 03:05:05 GMT", 60 * time.Second, true}, // RFC 850, which RFC 9110 says to accept
		{"-5", 0, false},
		{"1.5", 0, false},
		{"soon", 0, false},
		{"", 0, false},
		{"7 seconds", 0, false},
	} {
		got, ok := ParseRetryAfter(c.value, now)
		if got != c.want || ok != c.ok {
			t.Errorf("ParseRetryAfter(%q) = %v, %v; want %v, %v", c.value, got, ok, c.want, c.ok)
		}
	}
}

func TestRetryAfterThroughWrapping(t *testing.T) {
	err := fmt.Errorf("shard 3: %w", &RetryAfterError{Err: errors.New("429 Too Many Requests"), After: 5 * time.Second})
	if d, ok := RetryAfter(err); !ok || d != 5*time.Second {
		t.Fatalf("RetryAfter = %v, %v; want 5s, true", d, ok)
	}
	if IsPermanent(err) {
		t.Fatal("a Retry-After error is permanent")
	}
	if _, ok := RetryAfter(errors.New("503")); ok {
		t.Fatal("RetryAfter found advice in a plain error")
	}
}

func TestGone(t *testing.T) {
	cause := errors.New("endpoint answered 410 Gone")
	err := fmt.Errorf("deliver t/0/1: %w", Gone(cause))
	if !errors.Is(err, ErrGone) {
		t.Fatal("a Gone error is not ErrGone")
	}
	if !errors.Is(err, cause) {
		t.Fatal("a Gone error lost its cause")
	}
	if !IsPermanent(err) {
		t.Fatal("a Gone error is not permanent; callers that cannot disable endpoints would retry it forever")
	}
	if err.Error() != "deliver t/0/1: endpoint answered 410 Gone" {
		t.Fatalf("message %q: Gone should add nothing to its cause's", err)
	}
	if errors.Is(Permanent(cause), ErrGone) {
		t.Fatal("a permanent error is ErrGone")
	}
}
