package auth

import (
	"errors"
	"strings"
	"testing"
	"time"
)

func TestNewTokenRoundTripsThroughTheFile(t *testing.T) {
	now := time.Now()
	expires := now.Add(time.Hour).Truncate(time.Second)
	secret, tok, err := New("ci", []Scope{ScopePublish, ScopeConsume}, expires)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(secret, "hrld_"+tok.ID+"_") || len(secret) != len("hrld_")+16+1+64 {
		t.Fatalf("token %q does not have the documented shape", secret)
	}
	line := tok.Line()
	if strings.Contains(line, secret[len("hrld_")+17:]) {
		t.Fatalf("the file line %q holds the secret", line)
	}
	parsed, err := Parse("tokens", []byte("# a comment\n\n"+line+"\n"))
	if err != nil {
		t.Fatal(err)
	}
	s := NewStore(parsed)
	got, err := s.Authenticate(secret, now)
	if err != nil {
		t.Fatal(err)
	}
	if got.Name != "ci" || !got.Has(ScopePublish) || !got.Has(ScopeConsume) || got.Has(ScopeAdmin) || !got.Expires.Equal(expires) {
		t.Errorf("authenticated %+v", got)
	}
	if _, err := s.Authenticate(secret, expires); !errors.Is(err, ErrExpired) || strings.Contains(err.Error(), secret) {
		t.Errorf("at its expiry: %v, want ErrExpired without the token", err)
	}
	for _, bad := range []string{"", "hrld_", "Bearer " + secret, strings.ToUpper(secret), secret + "0"} {
		if _, err := s.Authenticate(bad, now); err == nil {
			t.Errorf("Authenticate(%q) succeeded", bad)
		}
	}
	other, _, _ := New("other", []Scope{ScopeAdmin}, time.Time{})
	if _, err := s.Authenticate(other, now); !errors.Is(err, ErrUnknown) {
		t.Errorf("a token not in the store: %v, want ErrUnknown", err)
	}
	s.Replace(nil)
	if _, err := s.Authenticate(secret, now); !errors.Is(err, ErrUnknown) {
		t.Errorf("after Replace(nil): %v, want ErrUnknown", err)
	}
}

func TestNewRefusesBadInput(t *testing.T) {
	if _, _, err := New("has space", []Scope{ScopeAdmin}, time.Time{}); err == nil || !strings.Contains(err.Error(), "token name") {
		t.Errorf("bad name: %v", err)
	}
	if _, _, err := New("ci", nil, time.Time{}); err == nil || !strings.Contains(err.Error(), "at least one scope") {
		t.Errorf("no scope: %v", err)
	}
	if _, err := ParseScopes("publish,root"); err == nil || !strings.Contains(err.Error(), `unknown scope "root"`) {
		t.Errorf("bad scope: %v", err)
	}
}

func TestParseReportsTheBadLine(t *testing.T) {
	_, tok, _ := New("ci", []Scope{ScopeAdmin}, time.Time{})
	good := tok.Line()
	hash := strings.Fields(good)[3]
	for _, tc := range []struct{ content, want string }{
		{"# c\nabc\n", "line 2: 1 fields, want 4 or 5"},
		{"0123456789abcdeX ci admin " + hash, "line 1: id \"0123456789abcdeX\""},
		{"0123456789abcdef c/i admin " + hash, "line 1: name \"c/i\""},
		{"0123456789abcdef ci root " + hash, "unknown scope \"root\""},
		{"0123456789abcdef ci admin abc", "the hash is not 64 hex digits"},
		{"0123456789abcdef ci admin " + hash + " tomorrow", "expiry \"tomorrow\""},
		{good + "\n" + good, "line 2: token id " + tok.ID + " is listed twice"},
	} {
		_, err := Parse("tokens.txt", []byte(tc.content))
		if err == nil || !strings.Contains(err.Error(), "tokens file tokens.txt, ") || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Parse(%q) = %v, want an error saying %q", tc.content, err, tc.want)
		}
	}
}
