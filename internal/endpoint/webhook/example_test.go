package webhook_test

import (
	"io"
	"log"
	"net/http"
	"strconv"
	"time"

	"herald/internal/endpoint"
	"herald/internal/endpoint/webhook"
)

// A receiver that accepts only deliveries signed with the topic's
// signing_secret, and only recent ones, so that a captured request cannot
// be replayed.
func ExampleVerify() {
	const secret = "s3cr3t" // the topic's signing_secret
	const maxAge = 5 * time.Minute

	mux := http.NewServeMux()
	mux.HandleFunc("POST /events", func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, 2<<20))
		if err != nil {
			http.Error(w, "body too large", http.StatusRequestEntityTooLarge)
			return
		}
		ts := r.Header.Get(webhook.HeaderTimestamp)
		if !webhook.Verify(secret, ts, body, r.Header.Get(webhook.HeaderSignature)) {
			http.Error(w, "bad signature", http.StatusUnauthorized)
			return
		}
		sec, _ := strconv.ParseInt(ts, 10, 64)
		if age := time.Since(time.Unix(sec, 0)); age > maxAge || age < -maxAge {
			http.Error(w, "stale timestamp", http.StatusUnauthorized)
			return
		}
		// Delivery is at least once: de-duplicate on the event id, then
		// handle body.
		log.Printf("event %s", r.Header.Get(endpoint.HeaderEventID))
		w.WriteHeader(http.StatusNoContent)
	})
	log.Fatal(http.ListenAndServe("localhost:8080", mux))
}
