package topic

import (
	"encoding/base64"
	"strings"
)

// The values of signature_scheme.
const (
	SignatureHerald           = "herald"
	SignatureStandardWebhooks = "standard-webhooks"
)

// The Standard Webhooks specification's secrets: "whsec_" and the base64
// of 24 to 64 random bytes.
const (
	whsecPrefix    = "whsec_"
	minWhsecKeyLen = 24
	maxWhsecKeyLen = 64
)

// StandardWebhooksKeys returns the HMAC keys of a signing_secret used with
// signature_scheme standard-webhooks: one or more whsec_ secrets separated
// by spaces, so that a receiver can move to a new secret while herald signs
// with both.
func StandardWebhooksKeys(secret string) ([][]byte, error) {
	var keys [][]byte
	for i, s := range strings.Fields(secret) {
		b64, ok := strings.CutPrefix(s, whsecPrefix)
		if !ok {
			return nil, invalidf("signing_secret: secret %d does not start with %s; standard-webhooks secrets are whsec_ and the base64 of %d to %d random bytes, separated by spaces",
				i+1, whsecPrefix, minWhsecKeyLen, maxWhsecKeyLen)
		}
		key, err := base64.StdEncoding.DecodeString(b64)
		if err != nil {
			return nil, invalidf("signing_secret: secret %d is not whsec_ and standard base64: %v", i+1, err)
		}
		if len(key) < minWhsecKeyLen || len(key) > maxWhsecKeyLen {
			return nil, invalidf("signing_secret: secret %d holds %d bytes; standard-webhooks secrets hold %d to %d (for example whsec_ and the base64 of 32 random bytes: openssl rand -base64 32)",
				i+1, len(key), minWhsecKeyLen, maxWhsecKeyLen)
		}
		keys = append(keys, key)
	}
	if len(keys) == 0 {
		return nil, invalidf("signing_secret is blank; give one or more whsec_ secrets, or leave it empty for unsigned deliveries")
	}
	return keys, nil
}
