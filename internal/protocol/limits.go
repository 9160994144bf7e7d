package protocol

// MaxRequestBytes is the largest request a herald node reads: the body of
// an API call as sent and, when it is compressed, once decompressed; a
// publish stream's frame. The Go client and herald publish split a batch
// of events into requests under it; other clients must do the same.
const MaxRequestBytes = 64 << 20
