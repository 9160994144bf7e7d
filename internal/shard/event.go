package shard

// A Header is a name/value pair attached to an event.
type Header struct {
	Name, Value string
}

// An Event is one message in the queue.
type Event struct {
	Key     string
	Payload []byte
	Headers []Header
}

// Size reports the number of bytes the event counts for in the shard's
// byte accounting: the lengths of its key, payload and header names and
// values. Encoding overhead is deliberately left out, so that a size does
// not change with the wire format.
func (e *Event) Size() int64 {
	n := int64(len(e.Key)) + int64(len(e.Payload))
	for i := range e.Headers {
		n += int64(len(e.Headers[i].Name)) + int64(len(e.Headers[i].Value))
	}
	return n
}

// eventsSize returns the total Size of events.
func eventsSize(events []Event) int64 {
	var n int64
	for i := range events {
		n += events[i].Size()
	}
	return n
}

// HeaderMap returns the headers as a map (nil if there are none), the
// form endpoints and APIs carry them in.
func (e *Event) HeaderMap() map[string]string {
	if len(e.Headers) == 0 {
		return nil
	}
	m := make(map[string]string, len(e.Headers))
	for _, h := range e.Headers {
		m[h.Name] = h.Value
	}
	return m
}
