package webhook

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"io"
	"net/http"
	"strings"
	"time"

	"herald/internal/endpoint"
)

// The headers of a delivery signed per the Standard Webhooks specification
// (signature_scheme standard-webhooks).
const (
	HeaderWebhookID        = "webhook-id"        // the event id
	HeaderWebhookTimestamp = "webhook-timestamp" // Unix seconds of the attempt
	HeaderWebhookSignature = "webhook-signature" // "v1,<base64>" per secret, space-separated
)

// signStandard returns the webhook-signature of a delivery: for each key,
// "v1," and the base64 of HMAC-SHA256(key, id + "." + timestamp + "." +
// body), separated by spaces. A receiver accepts the request if any of
// them verifies with its secret, so a topic can carry the old and the new
// secret while receivers switch.
func signStandard(keys [][]byte, id, timestamp string, body []byte) string {
	sigs := make([]string, len(keys))
	for i, key := range keys {
		h := hmac.New(sha256.New, key)
		io.WriteString(h, id)
		io.WriteString(h, ".")
		io.WriteString(h, timestamp)
		io.WriteString(h, ".")
		h.Write(body)
		sigs[i] = "v1," + base64.StdEncoding.EncodeToString(h.Sum(nil))
	}
	return strings.Join(sigs, " ")
}

// retryAfter returns the pause asked for by the Retry-After header of a
// 429 or 503 response (delay-seconds or an HTTP date, counted from now),
// at most endpoint.MaxRetryAfter. Other statuses carry no such advice.
func retryAfter(resp *http.Response, now time.Time) (time.Duration, bool) {
	if resp.StatusCode != http.StatusTooManyRequests && resp.StatusCode != http.StatusServiceUnavailable {
		return 0, false
	}
	return endpoint.ParseRetryAfter(resp.Header.Get("Retry-After"), now)
}
