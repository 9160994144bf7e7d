package webhook

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"strings"
)

const signaturePrefix = "sha256="

// sign returns the X-Herald-Signature of a request sent at timestamp with
// body. The prefix names the algorithm, so that another can be added
// without receivers mistaking one for the other.
func sign(secret []byte, timestamp string, body []byte) string {
	return signaturePrefix + hex.EncodeToString(mac(secret, timestamp, body))
}

// Sign returns the X-Herald-Signature of a request whose X-Herald-Timestamp
// is timestamp (Unix seconds) and whose body is body, signed with secret:
// what herald's deliveries carry, for other requests herald sends to a
// receiver of the operator's (package alert), so that one [Verify] checks
// both. An empty secret signs nothing and returns "".
func Sign(secret string, timestamp string, body []byte) string {
	if secret == "" {
		return ""
	}
	return sign([]byte(secret), timestamp, body)
}

// mac is HMAC-SHA256(secret, timestamp + "." + body). The timestamp is
// digits only, so the '.' cannot be confused with part of it.
func mac(secret []byte, timestamp string, body []byte) []byte {
	h := hmac.New(sha256.New, secret)
	io.WriteString(h, timestamp)
	io.WriteString(h, ".")
	h.Write(body)
	return h.Sum(nil)
}

// Verify reports whether signature, the X-Herald-Signature header of a
// delivery, was made with secret (the topic's signing_secret) for
// timestamp, its X-Herald-Timestamp header, and body, the request body as
// received, before any parsing. It compares in constant time, so timing
// reveals nothing about the expected signature.
//
// An empty secret verifies nothing: herald does not sign without one, and
// a receiver whose secret is missing from its configuration must not
// accept signatures anyone could make.
//
// Verify does not look at the clock. A receiver must also reject a
// timestamp more than a few minutes from its own time, or a captured
// request could be replayed.
func Verify(secret string, timestamp string, body []byte, signature string) bool {
	if secret == "" {
		return false
	}
	digits, ok := strings.CutPrefix(signature, signaturePrefix)
	if !ok {
		return false
	}
	got, err := hex.DecodeString(digits)
	if err != nil {
		return false
	}
	return hmac.Equal(got, mac([]byte(secret), timestamp, body))
}
