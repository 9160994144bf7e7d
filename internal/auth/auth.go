// Package auth holds herald's API tokens: their scopes, the tokens file that
// stores them, and the check of a token presented with a request.
//
// A token is "hrld_" + an id of 16 hex digits + "_" + a secret of 64 hex
// digits. The id names the token (in the audit log, and as the access key
// id of the SNS API's signatures); the secret proves it. The server keeps
// only the SHA-256 of the whole token, so the tokens file does not give
// the tokens away, and compares in constant time. A token never appears in
// a log or an error: only its id and name do.
//
// The tokens file has one token a line:
//
//	# id             name  scopes          sha256 of the token                                               expires (optional)
//	3f2a9c0e4b7d1a65 ci    publish,consume 5e8f...64 hex digits...                                           2027-01-31T00:00:00Z
//
// Blank lines and lines starting with # are ignored.
package auth

import (
	"bufio"
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync/atomic"
	"time"
)

// Scope is what a token may do.
type Scope string

// The scopes. A token may have several.
const (
	// ScopeAdmin: create, change and delete topics; list, replay and
	// purge dead letters.
	ScopeAdmin Scope = "admin"
	// ScopePublish: publish, reserve, commit and abort.
	ScopePublish Scope = "publish"
	// ScopeConsume: fetch, ack and nack.
	ScopeConsume Scope = "consume"
)

// Scopes are every scope, in the order messages list them.
var Scopes = []Scope{ScopeAdmin, ScopePublish, ScopeConsume}

// ParseScopes parses a comma-separated list of scopes.
func ParseScopes(s string) ([]Scope, error) {
	var out []Scope
	for name := range strings.SplitSeq(s, ",") {
		sc := Scope(strings.TrimSpace(name))
		if !slices.Contains(Scopes, sc) {
			return nil, fmt.Errorf("unknown scope %q; use admin, publish or consume (several separated by commas)", sc)
		}
		if !slices.Contains(out, sc) {
			out = append(out, sc)
		}
	}
	return out, nil
}

const (
	prefix    = "hrld_"
	idLen     = 16 // hex digits
	secretLen = 64 // hex digits
)

// Token is a token as the server knows it: without its secret.
type Token struct {
	ID      string
	Name    string
	Scopes  []Scope
	Hash    [sha256.Size]byte // of the whole token
	Expires time.Time         // zero: never
}

// Has reports whether the token has scope s.
func (t Token) Has(s Scope) bool { return slices.Contains(t.Scopes, s) }

// Line is the token's line in a tokens file.
func (t Token) Line() string {
	var scopes []string
	for _, s := range t.Scopes {
		scopes = append(scopes, string(s))
	}
	line := fmt.Sprintf("%s %s %s %x", t.ID, t.Name, strings.Join(scopes, ","), t.Hash)
	if !t.Expires.IsZero() {
		line += " " + t.Expires.UTC().Format(time.RFC3339)
	}
	return line
}

// New makes a token with a fresh random id and secret; it returns the
// token to give to its user, shown only this once, and what the server
// keeps of it. A zero expires means the token never expires.
func New(name string, scopes []Scope, expires time.Time) (secret string, t Token, err error) {
	if !validName(name) {
		return "", Token{}, fmt.Errorf("token name %q: use 1-64 characters from A-Z a-z 0-9 . _ - (it names the token in the audit log)", name)
	}
	if len(scopes) == 0 {
		return "", Token{}, errors.New("a token needs at least one scope: admin, publish or consume")
	}
	raw := make([]byte, (idLen+secretLen)/2)
	rand.Read(raw) // never fails (crypto/rand)
	enc := hex.EncodeToString(raw)
	secret = prefix + enc[:idLen] + "_" + enc[idLen:]
	return secret, Token{ID: enc[:idLen], Name: name, Scopes: scopes, Hash: sha256.Sum256([]byte(secret)), Expires: expires}, nil
}

func validName(s string) bool {
	if s == "" || len(s) > 64 {
		return false
	}
	for _, c := range s {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}

// splitToken returns the id of a presented token, or false if it does not
// have the shape of one.
func splitToken(s string) (id string, ok bool) {
	rest, ok := strings.CutPrefix(s, prefix)
	if !ok || len(rest) != idLen+1+secretLen || rest[idLen] != '_' || !isHex(rest[:idLen]) || !isHex(rest[idLen+1:]) {
		return "", false
	}
	return rest[:idLen], true
}

func isHex(s string) bool {
	_, err := hex.DecodeString(s)
	return err == nil && strings.ToLower(s) == s
}

// Parse reads a tokens file's content; name is the file's name, for
// errors.
func Parse(name string, data []byte) ([]Token, error) {
	var out []Token
	sc := bufio.NewScanner(bytes.NewReader(data))
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		t, err := parseLine(line)
		if err != nil {
			return nil, fmt.Errorf("tokens file %s, line %d: %w; lines are \"ID NAME SCOPES SHA256 [EXPIRES]\" as herald token create prints them", name, n, err)
		}
		if slices.ContainsFunc(out, func(o Token) bool { return o.ID == t.ID }) {
			return nil, fmt.Errorf("tokens file %s, line %d: token id %s is listed twice; remove one of the lines", name, n, t.ID)
		}
		out = append(out, t)
	}
	return out, sc.Err()
}

func parseLine(line string) (Token, error) {
	f := strings.Fields(line)
	if len(f) < 4 || len(f) > 5 {
		return Token{}, fmt.Errorf("%d fields, want 4 or 5", len(f))
	}
	t := Token{ID: f[0], Name: f[1]}
	if len(t.ID) != idLen || !isHex(t.ID) {
		return Token{}, fmt.Errorf("id %q is not %d lower-case hex digits", t.ID, idLen)
	}
	if !validName(t.Name) {
		return Token{}, fmt.Errorf("name %q: use 1-64 characters from A-Z a-z 0-9 . _ -", t.Name)
	}
	var err error
	if t.Scopes, err = ParseScopes(f[2]); err != nil {
		return Token{}, err
	}
	h, err := hex.DecodeString(f[3])
	if err != nil || len(h) != sha256.Size {
		return Token{}, errors.New("the hash is not 64 hex digits (the SHA-256 of the token)")
	}
	copy(t.Hash[:], h)
	if len(f) == 5 {
		if t.Expires, err = time.Parse(time.RFC3339, f[4]); err != nil {
			return Token{}, fmt.Errorf("expiry %q is not an RFC 3339 time such as 2027-01-31T00:00:00Z", f[4])
		}
	}
	return t, nil
}

// ReadFile reads a tokens file.
func ReadFile(name string) ([]Token, error) {
	data, err := os.ReadFile(name)
	if err != nil {
		return nil, fmt.Errorf("read tokens file: %w", err)
	}
	return Parse(name, data)
}

// Errors of Authenticate. Their messages never contain the token.
var (
	ErrMissing   = errors.New("no token: send one as \"Authorization: Bearer <token>\"")
	ErrMalformed = errors.New("malformed token: a herald token is hrld_ followed by 16 and 64 hex digits, as herald token create prints it")
	ErrUnknown   = errors.New("unknown or wrong token")
	ErrExpired   = errors.New("expired token")
)

// Store holds the tokens a server accepts. Replace swaps them all at once
// (on SIGHUP), while requests are checked. It is safe for concurrent use.
type Store struct {
	tokens atomic.Pointer[map[string]Token] // by id
}

// NewStore returns a store holding tokens.
func NewStore(tokens []Token) *Store {
	s := &Store{}
	s.Replace(tokens)
	return s
}

// Replace makes tokens the only ones accepted.
func (s *Store) Replace(tokens []Token) {
	m := make(map[string]Token, len(tokens))
	for _, t := range tokens {
		m[t.ID] = t
	}
	s.tokens.Store(&m)
}

// Len returns how many tokens the store holds.
func (s *Store) Len() int { return len(*s.tokens.Load()) }

// Lookup returns the token with the given id.
func (s *Store) Lookup(id string) (Token, bool) {
	t, ok := (*s.tokens.Load())[id]
	return t, ok
}

// Authenticate returns the token whose secret presented is, if it is known
// and has not expired at now.
func (s *Store) Authenticate(presented string, now time.Time) (Token, error) {
	if presented == "" {
		return Token{}, ErrMissing
	}
	id, ok := splitToken(presented)
	if !ok {
		return Token{}, ErrMalformed
	}
	t, ok := s.Lookup(id)
	h := sha256.Sum256([]byte(presented))
	// Compare even for an unknown id, so that the time taken does not
	// tell which ids exist.
	if subtle.ConstantTimeCompare(h[:], t.Hash[:]) != 1 || !ok {
		return Token{}, ErrUnknown
	}
	if !t.Expires.IsZero() && !now.Before(t.Expires) {
		return Token{}, fmt.Errorf("%w: token %s (%s) expired at %s; create a new one with herald token create", ErrExpired, t.ID, t.Name, t.Expires.UTC().Format(time.RFC3339))
	}
	return t, nil
}
