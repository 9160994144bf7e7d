package topic

import (
	"errors"
	"net/url"
	"strconv"
	"strings"
)

// redacted is what RedactEndpoint shows in place of a secret, as
// url.URL.Redacted does for a password.
const redacted = "xxxxx"

// RedactEndpoint returns a push endpoint URI fit to be shown: in messages,
// errors, logs and attribute listings. The password of the userinfo and
// every value of the query string become "xxxxx", since a query often
// holds a token (?token=..., ?sig=...) as good as a password. A user name
// without a password becomes "xxxxx" too: NATS and many HTTP services take
// a token there (nats://TOKEN@host). The user name before a password, the
// host, the path and the query keys stay, so the endpoint is still
// recognisable. The rest is kept byte for byte, and redacting twice
// changes nothing, so the result can serve as a placeholder (see
// setEndpoint).
//
// A URI that does not parse, or has no //authority, is redacted more
// widely: whatever follows the user name up to the last '@' is hidden,
// even where a valid URI would have a path, and so is every value after
// the first '?'; a fragment after the query is left out.
func RedactEndpoint(uri string) string {
	u, err := url.Parse(uri)
	if err != nil || u.Opaque != "" {
		return redactLoosely(uri)
	}
	rest, fragment, hasFragment := strings.Cut(uri, "#")
	rest, query, hasQuery := strings.Cut(rest, "?")
	out := redactAuthority(rest, u)
	if hasQuery {
		out += "?" + redactQuery(query)
	}
	if hasFragment {
		out += "#" + fragment
	}
	return out
}

// redactAuthority hides the password in s, the text of u without query or
// fragment. url.Parse found a userinfo only after "scheme://" or, without
// a scheme, a leading "//"; it ends at the last '@' before the next '/'.
func redactAuthority(s string, u *url.URL) string {
	if u.User == nil {
		return s
	}
	start := len("//")
	if u.Scheme != "" {
		start += len(u.Scheme) + len(":")
	}
	authority := s[start:]
	if i := strings.IndexByte(authority, '/'); i >= 0 {
		authority = authority[:i]
	}
	at := strings.LastIndexByte(authority, '@')
	return s[:start] + redactUserinfo(authority[:at], ":") + s[start+at:]
}

// redactUserinfo hides the password in userinfo, which ends where any of
// the characters in seps starts it, or the whole userinfo if it is a user
// name alone.
func redactUserinfo(userinfo, seps string) string {
	i := strings.IndexAny(userinfo, seps)
	switch {
	case i >= 0 && i < len(userinfo)-1:
		return userinfo[:i] + ":" + redacted
	case userinfo != "":
		return redacted
	}
	return userinfo
}

// redactLoosely redacts a URI that url.Parse does not understand, where
// the boundaries of the userinfo and the query cannot be trusted: a
// password may hold a '/', '?' or '#' that was not percent-encoded.
func redactLoosely(uri string) string {
	start := 0
	if i := strings.Index(uri, "://"); i >= 0 && !strings.ContainsAny(uri[:i], "/?#@") {
		start = i + len("://") // after what looks like a scheme
	}
	out, rest := uri[:start], uri[start:]
	if at := strings.LastIndexByte(rest, '@'); at >= 0 {
		out += redactUserinfo(rest[:at], ":/?#") + "@"
		rest = rest[at+1:]
	}
	head, query, ok := strings.Cut(rest, "?")
	if !ok {
		return out + rest
	}
	// What follows a '#' in the query is left out: it may be the rest of
	// a value, or a fragment, which redactQuery would not redact the same.
	query, _, _ = strings.Cut(query, "#")
	return out + head + "?" + redactQuery(query)
}

// redactQuery replaces every value of a raw query string by "xxxxx",
// keeping the keys. A part without '=' may be a bare token, and is
// replaced whole.
func redactQuery(query string) string {
	parts := strings.Split(query, "&")
	for i, p := range parts {
		key, value, ok := strings.Cut(p, "=")
		switch {
		case ok && value != "":
			parts[i] = key + "=" + redacted
		case !ok && p != "":
			parts[i] = redacted
		}
	}
	return strings.Join(parts, "&")
}

// ParseEndpoint parses a push endpoint URI as url.Parse does. Its error
// wraps ErrInvalid and, unlike url.Parse's, quotes no part of the URI,
// which may hold a password or a token: it only says what is wrong.
// Callers that name the endpoint in a message show it with RedactEndpoint.
func ParseEndpoint(uri string) (*url.URL, error) {
	u, err := url.Parse(uri)
	if err == nil {
		return u, nil
	}
	var ue *url.Error
	if errors.As(err, &ue) {
		err = ue.Err
	}
	return nil, &invalidError{msg: withoutQuotes(err.Error())}
}

// withoutQuotes removes the quoted strings from an error message of
// net/url, such as `invalid port ":se" after host`, where the quoted part
// can be a piece of a password ("u:se/cret@h").
func withoutQuotes(msg string) string {
	var b strings.Builder
	for {
		i := strings.IndexByte(msg, '"')
		if i < 0 {
			break
		}
		q, err := strconv.QuotedPrefix(msg[i:])
		if err != nil {
			// Not a Go-quoted string: drop everything from the quote on.
			msg = msg[:i]
			break
		}
		b.WriteString(strings.TrimRight(msg[:i], " "))
		msg = msg[i+len(q):]
	}
	b.WriteString(msg)
	return b.String()
}
