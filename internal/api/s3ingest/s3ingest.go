// Package s3ingest takes the event notifications that S3-compatible object
// stores (Ceph RGW, MinIO, AWS S3) send to a webhook target, and publishes
// each record to a herald topic, so that a bucket's notifications can point
// at herald:
//
//	POST /s3/<topic>   {"Records": [{"eventSource": "ceph:s3", "eventName": ..., "s3": {...}}, ...]}
//
// Each record becomes one event whose payload is {"Records": [record]} and
// whose key is "<bucket>:<object key>", as Ceph keys its own
// notifications, so the events of one object keep their order. A push
// endpoint of the topic receives the records back as the store sent them,
// with each record's opaqueData set to the topic's opaque_data.
//
// A request is all or nothing at validation: if any record lacks its
// eventSource, eventName, bucket name or object key, the whole request is
// refused with 400 and nothing is published. Errors have the shape of
// the rest of the API's, Connect's {"code": ..., "message": ...}. Each event's dedup id is a
// digest of its record, so a store that sends a notification again (after
// a timeout, say) within the dedup window does not publish it twice.
//
// The handler needs the publish scope of the token check around it.
package s3ingest

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"

	"connectrpc.com/connect"

	"herald/internal/node"
)

// MaxRequestBytes bounds a notification request.
const MaxRequestBytes = 16 << 20

// Handler serves POST /s3/{topic}.
type Handler struct {
	node      *node.Node
	toConnect func(error) *connect.Error
	errors    *connect.ErrorWriter
}

// New returns a Handler publishing to n's topics. toConnect gives the
// node's errors their codes, as the rest of the API does. Mount it on a
// pattern with a {topic} wildcard, such as "POST /s3/{topic}".
func New(n *node.Node, toConnect func(error) *connect.Error) *Handler {
	return &Handler{node: n, toConnect: toConnect, errors: connect.NewErrorWriter()}
}

// A notification is the body an object store sends. MinIO adds EventName
// and Key at the top; AWS's test event has Event and no Records.
type notification struct {
	Records []json.RawMessage `json:"Records"`
	Event   string            `json:"Event"`
}

// record holds the fields of an S3 event record that herald needs.
type record struct {
	EventSource *string `json:"eventSource"`
	EventName   *string `json:"eventName"`
	S3          *struct {
		Bucket *struct {
			Name *string `json:"name"`
		} `json:"bucket"`
		Object *struct {
			Key *string `json:"key"`
		} `json:"object"`
	} `json:"s3"`
}

func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	topicName := r.PathValue("topic")
	events, err := parse(http.MaxBytesReader(w, r.Body, MaxRequestBytes))
	if err != nil {
		h.fail(w, r, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("%w; nothing was published", err)))
		return
	}
	if len(events) == 0 {
		// A store's test event: it checks that the target answers.
		writeJSON(w, http.StatusOK, map[string][]string{"ids": {}})
		return
	}
	ids, err := h.node.Publish(r.Context(), topicName, events)
	if err != nil {
		h.fail(w, r, h.toConnect(err))
		return
	}
	writeJSON(w, http.StatusOK, map[string][]string{"ids": ids})
}

// parse reads a notification and returns one event per record.
func parse(body io.Reader) ([]node.Event, error) {
	var n notification
	dec := json.NewDecoder(body)
	if err := dec.Decode(&n); err != nil {
		if _, ok := errors.AsType[*http.MaxBytesError](err); ok {
			return nil, fmt.Errorf("the notification is larger than the limit of %d bytes (16 MiB); have the store send fewer records per notification", MaxRequestBytes)
		}
		return nil, fmt.Errorf("the body is not an S3 event notification (JSON with a Records list): %w", err)
	}
	if n.Records == nil && n.Event == "s3:TestEvent" {
		return nil, nil
	}
	if len(n.Records) == 0 {
		return nil, errors.New(`the notification has no records; send {"Records": [...]} with at least one S3 event record`)
	}
	events := make([]node.Event, len(n.Records))
	seen := make(map[string]int, len(n.Records))
	for i, raw := range n.Records {
		key, err := recordKey(raw)
		if err != nil {
			return nil, fmt.Errorf("record %d: %w", i, err)
		}
		payload, err := json.Marshal(struct {
			Records []json.RawMessage `json:"Records"`
		}{[]json.RawMessage{raw}})
		if err != nil {
			return nil, fmt.Errorf("record %d: %w", i, err)
		}
		sum := sha256.Sum256(raw)
		dedup := "s3:" + hex.EncodeToString(sum[:16])
		if j, ok := seen[dedup]; ok {
			return nil, fmt.Errorf("record %d repeats record %d exactly; send each event once", i, j)
		}
		seen[dedup] = i
		events[i] = node.Event{Key: key, Payload: payload, DedupID: dedup}
	}
	return events, nil
}

// recordKey checks a record and returns its key, "<bucket>:<object key>".
func recordKey(raw json.RawMessage) (string, error) {
	var rec record
	if err := json.Unmarshal(raw, &rec); err != nil {
		return "", fmt.Errorf("not an S3 event record: %w", err)
	}
	switch {
	case rec.EventSource == nil || !strings.HasSuffix(*rec.EventSource, ":s3"):
		return "", errors.New(`eventSource is missing or not an S3 source such as "aws:s3", "ceph:s3" or "minio:s3"`)
	case rec.EventName == nil || *rec.EventName == "":
		return "", errors.New("eventName is missing")
	case rec.S3 == nil || rec.S3.Bucket == nil || rec.S3.Bucket.Name == nil || *rec.S3.Bucket.Name == "":
		return "", errors.New("s3.bucket.name is missing")
	case rec.S3.Object == nil || rec.S3.Object.Key == nil || *rec.S3.Object.Key == "":
		return "", errors.New("s3.object.key is missing")
	}
	return *rec.S3.Bucket.Name + ":" + *rec.S3.Object.Key, nil
}

// fail answers err as the rest of the API does: a JSON body with its code
// and message, the HTTP status of the code, and its metadata (Retry-After).
// (The status of resource_exhausted is api's: 503.)
func (h *Handler) fail(w http.ResponseWriter, r *http.Request, err *connect.Error) {
	h.errors.Write(w, r, err) // fails only if the client is gone: nobody to tell
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(v)
}
