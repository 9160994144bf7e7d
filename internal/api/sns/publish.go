package sns

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	"herald/internal/node"
)

type publishResult struct {
	MessageID string `xml:"MessageId"`
}

// publish publishes Message as one event (see eventOf).
func (h *Handler) publish(ctx context.Context, r *request) (any, error) {
	name, err := h.topicName(r, "TopicArn", "TargetArn")
	if err != nil {
		return nil, err
	}
	ev, err := eventOf(r)
	if err != nil {
		return nil, err
	}
	ids, err := h.node.Publish(ctx, name, []node.Event{ev})
	if err != nil {
		return nil, nodeError(err)
	}
	return publishResult{MessageID: ids[0]}, nil
}

// eventOf reads the event a Publish, or an entry of a PublishBatch,
// describes: Message is its payload, MessageGroupId its key,
// MessageDeduplicationId its dedup id, Subject and the MessageAttributes
// its headers.
func eventOf(r *request) (node.Event, error) {
	msg, err := r.require("Message")
	if err != nil {
		return node.Event{}, err
	}
	headers, err := messageAttributes(r.form)
	if err != nil {
		return node.Event{}, &apiError{code: codeInvalidParameter, msg: err.Error()}
	}
	if s := r.get("Subject"); s != "" {
		headers["Subject"] = s
	}
	ev := node.Event{Key: r.get("MessageGroupId"), Payload: []byte(msg), DedupID: r.get("MessageDeduplicationId")}
	if len(headers) > 0 {
		ev.Headers = headers
	}
	return ev, nil
}

// messageAttributes reads MessageAttributes.entry.N.Name and
// .Value.StringValue (or .Value.BinaryValue, kept base64) as headers.
func messageAttributes(form map[string][]string) (map[string]string, error) {
	headers := map[string]string{}
	for param, values := range form {
		rest, ok := strings.CutPrefix(param, "MessageAttributes.entry.")
		if !ok {
			continue
		}
		n, field, ok := strings.Cut(rest, ".")
		if !ok || field != "Name" {
			continue
		}
		prefix := "MessageAttributes.entry." + n + ".Value."
		value, found := "", false
		for _, f := range []string{"StringValue", "BinaryValue"} {
			if v, ok := form[prefix+f]; ok {
				value, found = v[0], true
			}
		}
		if !found {
			return nil, fmt.Errorf("message attribute %s has no Value.StringValue or Value.BinaryValue", values[0])
		}
		headers[values[0]] = value
	}
	return headers, nil
}

// The limits of a PublishBatch, as in SNS but for the size.
const (
	maxBatchEntries = 10
	// MaxBatchBytes bounds the messages, subjects and message attributes
	// of a PublishBatch together; each message is bound by the node's
	// payload limit too. SNS's bound is a message's, 256 KiB by
	// default; herald's is larger, but small enough that a batch within it
	// fits in MaxRequestBytes even URL-encoded (three bytes a byte), so
	// that a batch too long gets SNS's error rather than an unreadable
	// request.
	MaxBatchBytes = 4 << 20
	// maxBatchIDLength is the longest entry Id SNS accepts.
	maxBatchIDLength = 80
)

// batchEntriesParam prefixes the parameters of PublishBatch's entries:
// PublishBatchRequestEntries.member.N.Message, ....
const batchEntriesParam = "PublishBatchRequestEntries.member."

// A batchEntry is one entry of a PublishBatch: its Id, and its event or
// why it has none.
type batchEntry struct {
	id    string
	event node.Event
	err   error
}

type batchSuccess struct {
	ID        string `xml:"Id"`
	MessageID string `xml:"MessageId"`
}

type batchFailure struct {
	ID          string `xml:"Id"`
	Code        string
	Message     string
	SenderFault bool
}

type publishBatchResult struct {
	Successful struct {
		Members []batchSuccess `xml:"member"`
	}
	Failed struct {
		Members []batchFailure `xml:"member"`
	}
}

// publishBatch publishes each entry as Publish would, one after the other
// in order of N, so that one entry's failure is only its own: it is
// answered among the Failed, the others among the Successful. A batch
// that breaks SNS's limits is refused whole, with SNS's error codes.
func (h *Handler) publishBatch(ctx context.Context, r *request) (any, error) {
	name, err := h.topicName(r, "TopicArn")
	if err != nil {
		return nil, err
	}
	entries, err := batchEntries(r.form)
	if err != nil {
		return nil, err
	}
	if err := checkBatch(entries); err != nil {
		return nil, err
	}
	if _, err := h.node.GetTopic(name); err != nil {
		return nil, nodeError(err)
	}
	var res publishBatchResult
	for _, e := range entries {
		if e.err == nil {
			var ids []string
			if ids, e.err = h.node.Publish(ctx, name, []node.Event{e.event}); e.err == nil {
				res.Successful.Members = append(res.Successful.Members, batchSuccess{ID: e.id, MessageID: ids[0]})
				continue
			}
		}
		res.Failed.Members = append(res.Failed.Members, failureOf(e.id, e.err))
	}
	return res, nil
}

// batchEntries reads the entries of a PublishBatch, in order of N.
func batchEntries(form map[string][]string) ([]batchEntry, error) {
	forms := map[int]map[string][]string{}
	for param, values := range form {
		rest, ok := strings.CutPrefix(param, batchEntriesParam)
		if !ok {
			continue
		}
		num, field, ok := strings.Cut(rest, ".")
		n, err := strconv.Atoi(num)
		if !ok || err != nil || n < 1 {
			return nil, &apiError{code: codeInvalidParameter,
				msg: fmt.Sprintf("parameter %s: want %sN.<field>, N a positive integer", param, batchEntriesParam)}
		}
		if forms[n] == nil {
			forms[n] = map[string][]string{}
		}
		forms[n][field] = values
	}
	var entries []batchEntry
	for _, n := range slices.Sorted(maps.Keys(forms)) {
		r := &request{form: forms[n]}
		e := batchEntry{id: r.get("Id")}
		e.event, e.err = eventOf(r)
		entries = append(entries, e)
	}
	return entries, nil
}

// checkBatch checks a batch against SNS's limits.
func checkBatch(entries []batchEntry) error {
	switch {
	case len(entries) == 0:
		return &apiError{code: codeEmptyBatch,
			msg: "the batch has no entries; give PublishBatchRequestEntries.member.1.Id and .Message, and so on"}
	case len(entries) > maxBatchEntries:
		return &apiError{code: codeTooManyEntries,
			msg: fmt.Sprintf("the batch has %d entries, over the limit of %d; split it", len(entries), maxBatchEntries)}
	}
	ids := map[string]bool{}
	size := 0
	for _, e := range entries {
		if !validBatchID(e.id) {
			return &apiError{code: codeInvalidBatchEntryID,
				msg: fmt.Sprintf("entry Id %q: want 1 to %d letters, digits, hyphens and underscores", e.id, maxBatchIDLength)}
		}
		if ids[e.id] {
			return &apiError{code: codeBatchIDsNotDistinct, msg: fmt.Sprintf("two entries have the Id %q; give each its own", e.id)}
		}
		ids[e.id] = true
		size += eventSize(e.event)
	}
	if size > MaxBatchBytes {
		return &apiError{code: codeBatchTooLong,
			msg: fmt.Sprintf("the batch's messages and attributes have %d bytes, over the limit of %d; split it", size, MaxBatchBytes)}
	}
	return nil
}

// validBatchID reports whether an entry Id is as SNS wants it: 1 to
// maxBatchIDLength ASCII letters, digits, hyphens and underscores.
func validBatchID(id string) bool {
	if id == "" || len(id) > maxBatchIDLength {
		return false
	}
	for _, c := range []byte(id) {
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-' || c == '_') {
			return false
		}
	}
	return true
}

// eventSize is what an event counts towards MaxBatchBytes.
func eventSize(ev node.Event) int {
	size := len(ev.Payload)
	for name, value := range ev.Headers {
		size += len(name) + len(value)
	}
	return size
}

// failureOf is the Failed member of an entry that could not be
// published.
func failureOf(id string, err error) batchFailure {
	var ae *apiError
	errors.As(nodeError(err), &ae) // nodeError's are apiErrors
	return batchFailure{ID: id, Code: ae.code, Message: ae.msg, SenderFault: ae.httpStatus() < 500}
}
