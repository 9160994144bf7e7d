package topic

import (
	"strconv"
	"strings"
	"unicode/utf8"
)

// MaxNameLen is the longest topic name, in bytes (names are ASCII).
const MaxNameLen = 128

const nameRule = "use 1-128 characters from A-Z a-z 0-9 _ - (dots are reserved for shard names)"

// ValidateName reports whether name is a valid topic name: 1 to 128
// characters from A-Z, a-z, 0-9, '_' and '-'. Dots are excluded because
// shard names append ".<i>" to the topic name, and '/' because event ids
// join names with it.
func ValidateName(name string) error { return validateName("topic", name) }

// ValidateSubscriptionName reports whether name is a valid subscription
// name: the rules of topic names (ValidateName). DefaultSubscription is a
// valid name; it names the topic's default subscription.
func ValidateSubscriptionName(name string) error { return validateName("subscription", name) }

// validateName checks name by the rule of topic names, naming what it is
// the name of (kind) in errors.
func validateName(kind, name string) error {
	switch {
	case name == "":
		return invalidf("invalid %s name \"\": a name is required; %s", kind, nameRule)
	case len(name) > MaxNameLen:
		return invalidf("invalid %s name %s (%d characters): %s", kind, quoteShort(name), len(name), nameRule)
	}
	for i := 0; i < len(name); i++ {
		if !isNameByte(name[i]) {
			r, _ := utf8.DecodeRuneInString(name[i:])
			return invalidf("invalid %s name %s: %q is not allowed; %s", kind, quoteShort(name), r, nameRule)
		}
	}
	return nil
}

func isNameByte(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '_' || c == '-'
}

// quoteShort quotes s for an error message, eliding the middle of long
// strings so that one bad value cannot flood a log line.
func quoteShort(s string) string {
	const max = 64
	if len(s) <= max {
		return strconv.Quote(s)
	}
	return strconv.Quote(strings.ToValidUTF8(s[:max/2], "")) + "..." + strconv.Quote(strings.ToValidUTF8(s[len(s)-max/4:], ""))
}

// ShardName returns the name of shard i of topic: shard 0 is named like the
// topic itself, so that a one-shard topic looks like a plain queue, and
// shard i > 0 is "<topic>.<i>". i should be in [0, MaxShards).
func ShardName(topic string, i int) string {
	if i == 0 {
		return topic
	}
	return topic + "." + strconv.Itoa(i)
}

// ParseShardName is the inverse of ShardName. It accepts only the canonical
// form, so that every shard has exactly one name: "t.0" and "t.01" are
// rejected.
func ParseShardName(s string) (topic string, i int, err error) {
	topic, suffix, dotted := strings.Cut(s, ".")
	if err := ValidateName(topic); err != nil {
		return "", 0, invalidf("invalid shard name %s: %v; shard names are TOPIC for shard 0 and TOPIC.N for shard N", quoteShort(s), err)
	}
	if !dotted {
		return topic, 0, nil
	}
	n, ok := parseDecimal(suffix, MaxShards-1)
	if !ok || n == 0 {
		return "", 0, invalidf("invalid shard name %s: the shard number must be 1-%d without leading zeros; shard names are TOPIC for shard 0 and TOPIC.N for shard N", quoteShort(s), MaxShards-1)
	}
	return topic, int(n), nil
}

// EventID returns the id of the event at offset in shard of topic:
// "<topic>/<shard>/<offset>". Ids are stable for the life of the topic,
// which is what lets consumers de-duplicate redelivered events.
func EventID(topic string, shard int, offset uint64) string {
	return topic + "/" + strconv.Itoa(shard) + "/" + strconv.FormatUint(offset, 10)
}

// NonPersistentEventID returns the id of an event of a non-persistent
// topic, which is pushed and never stored, so has no offset:
// "<topic>/<shard>/np<epoch>.<n>", for the n-th such event a node pushed
// since it started for the epoch-th time. The epoch keeps ids unique
// across restarts, so that receivers can de-duplicate on them, and the
// "np" keeps them from being mistaken for the ids of stored events.
func NonPersistentEventID(topic string, shard int, epoch, n uint64) string {
	return topic + "/" + strconv.Itoa(shard) + "/np" + strconv.FormatUint(epoch, 10) + "." + strconv.FormatUint(n, 10)
}

// ParseEventID is the inverse of EventID. It rejects the ids of
// NonPersistentEventID, saying why: those events were never stored, so
// there is nothing to acknowledge or replay.
func ParseEventID(id string) (topic string, shard int, offset uint64, err error) {
	const form = `use TOPIC/SHARD/OFFSET as returned by publish, e.g. "orders/3/1042"`
	topic, shard, last, err := splitID(id, "event id", form)
	if err != nil {
		return "", 0, 0, err
	}
	if strings.HasPrefix(last, "np") {
		return "", 0, 0, invalidf("invalid event id %s: it is the id of an event of a non-persistent topic, which was pushed when published and never stored, so it cannot be acknowledged, handed back or replayed", quoteShort(id))
	}
	offset, ok := parseDecimal(last, ^uint64(0))
	if !ok {
		return "", 0, 0, invalidf("invalid event id %s: the offset must be a decimal number without leading zeros; %s", quoteShort(id), form)
	}
	return topic, shard, offset, nil
}

// Receipt returns the receipt of one delivery of an event: the event's id
// and the number of the lease it was handed out under,
// "<topic>/<shard>/<offset>.<lease>". Lease numbers are never 0. An ack or
// nack that names a receipt instead of the id acts only while that lease
// is the event's (internal/node), so that it cannot end the lease of a
// consumer the event was handed to since.
func Receipt(eventID string, lease uint64) string {
	return eventID + "." + strconv.FormatUint(lease, 10)
}

// SubscriptionReceipt returns the receipt of a delivery of an event to
// a pull consumer of subscription sub: Receipt's for the topic's default
// subscription (0), and "<topic>/<shard>/<offset>.<lease>.<sub>" for the
// others, so that an ack of the receipt goes to the subscription's cursor
// without being told which it is.
func SubscriptionReceipt(eventID string, lease, sub uint64) string {
	r := Receipt(eventID, lease)
	if sub == 0 {
		return r
	}
	return r + "." + strconv.FormatUint(sub, 10)
}

// DeliveryNames returns what names one delivery of the event at offset
// in shard of topic to a pull consumer of subscription sub under lease:
// its EventID and its SubscriptionReceipt. The id is the start of the
// receipt, so both take one allocation; a fetch names every event it
// hands out.
func DeliveryNames(topic string, shard int, offset, lease, sub uint64) (id, receipt string) {
	// Room for the longest topic name and three 20-digit numbers: the
	// buffer stays on the stack.
	var buf [MaxNameLen + 72]byte
	b := append(buf[:0], topic...)
	b = append(b, '/')
	b = strconv.AppendInt(b, int64(shard), 10)
	b = append(b, '/')
	b = strconv.AppendUint(b, offset, 10)
	n := len(b)
	b = append(b, '.')
	b = strconv.AppendUint(b, lease, 10)
	if sub != 0 {
		b = append(b, '.')
		b = strconv.AppendUint(b, sub, 10)
	}
	receipt = string(b)
	return receipt[:n], receipt
}

// An AckID is what an ack or a nack names: an event, and for a receipt
// the lease and the subscription of the delivery it names.
type AckID struct {
	Topic  string
	Shard  int
	Offset uint64
	// Lease is the number of the delivery's lease; 0 for an event id.
	Lease uint64
	// Subscription is the id of the subscription a receipt was delivered
	// for; 0 for the default subscription and for an event id, which
	// names no subscription.
	Subscription uint64
}

// ParseAck parses what an ack or a nack names: an event id, or a receipt
// (Receipt, SubscriptionReceipt).
func ParseAck(id string) (AckID, error) {
	const form = `use an event id or a receipt as returned by fetch, e.g. "orders/3/1042" or "orders/3/1042.7"`
	topic, shard, last, err := splitID(id, "event id", form)
	if err != nil {
		return AckID{}, err
	}
	if offsetText, rest, ok := strings.Cut(last, "."); ok && !strings.HasPrefix(last, "np") {
		leaseText, subText, hasSub := strings.Cut(rest, ".")
		offset, okOffset := parseDecimal(offsetText, ^uint64(0))
		lease, okLease := parseDecimal(leaseText, ^uint64(0))
		sub, okSub := uint64(0), true
		if hasSub {
			// The default subscription's receipts name none: ".0" would
			// be a second spelling of the same receipt.
			sub, okSub = parseDecimal(subText, ^uint64(0))
			okSub = okSub && sub != 0
		}
		if !okOffset || !okLease || lease == 0 || !okSub {
			return AckID{}, invalidf("invalid receipt %s: want TOPIC/SHARD/OFFSET.LEASE or TOPIC/SHARD/OFFSET.LEASE.SUBSCRIPTION, decimal numbers without leading zeros, the lease not 0 and the subscription, if any, not 0; %s", quoteShort(id), form)
		}
		return AckID{Topic: topic, Shard: shard, Offset: offset, Lease: lease, Subscription: sub}, nil
	}
	topic, shard, offset, err := ParseEventID(id)
	if err != nil {
		return AckID{}, err
	}
	return AckID{Topic: topic, Shard: shard, Offset: offset}, nil
}

// ParseAckID parses what an ack or a nack names, as ParseAck does, but for
// the subscription of a receipt, which it does not return: it suits those
// who route an ack, not those who make it.
func ParseAckID(id string) (topic string, shard int, offset, lease uint64, err error) {
	a, err := ParseAck(id)
	return a.Topic, a.Shard, a.Offset, a.Lease, err
}

// ReservationID returns the id of reservation id in shard of topic:
// "<topic>/<shard>/r<id>". The "r" keeps reservation ids from being
// mistaken for event ids.
func ReservationID(topic string, shard int, id uint64) string {
	return topic + "/" + strconv.Itoa(shard) + "/r" + strconv.FormatUint(id, 10)
}

// ParseReservationID is the inverse of ReservationID.
func ParseReservationID(rid string) (topic string, shard int, id uint64, err error) {
	const form = `use TOPIC/SHARD/rN as returned by reserve, e.g. "orders/3/r17"`
	topic, shard, last, err := splitID(rid, "reservation id", form)
	if err != nil {
		return "", 0, 0, err
	}
	digits, ok := strings.CutPrefix(last, "r")
	if !ok {
		return "", 0, 0, invalidf("invalid reservation id %s: the last part must be 'r' followed by a number; %s", quoteShort(rid), form)
	}
	id, ok = parseDecimal(digits, ^uint64(0))
	if !ok {
		return "", 0, 0, invalidf("invalid reservation id %s: the number after 'r' must be decimal without leading zeros; %s", quoteShort(rid), form)
	}
	return topic, shard, id, nil
}

// splitID checks the "<topic>/<shard>/" prefix shared by event and
// reservation ids and returns the remaining part unchecked.
func splitID(id, what, form string) (topic string, shard int, last string, err error) {
	// Cut, not Split: an ack parses a hundred ids, and Split allocates
	// the slice of parts for each.
	name, rest, _ := strings.Cut(id, "/")
	shardText, last, _ := strings.Cut(rest, "/")
	if n := strings.Count(id, "/") + 1; n != 3 {
		return "", 0, "", invalidf("invalid %s %s: want 3 parts separated by '/', got %d; %s", what, quoteShort(id), n, form)
	}
	if err := ValidateName(name); err != nil {
		return "", 0, "", invalidf("invalid %s %s: %v", what, quoteShort(id), err)
	}
	n, ok := parseDecimal(shardText, MaxShards-1)
	if !ok {
		return "", 0, "", invalidf("invalid %s %s: the shard must be a number 0-%d without leading zeros; %s", what, quoteShort(id), MaxShards-1, form)
	}
	return name, int(n), last, nil
}

// parseDecimal parses the canonical decimal form of a number no greater
// than max: digits only, no sign, no leading zeros. Requiring one spelling
// per number keeps names and ids comparable as strings.
func parseDecimal(s string, max uint64) (uint64, bool) {
	if s == "" || len(s) > 1 && s[0] == '0' {
		return 0, false
	}
	// One pass, checking the digits and the bound together: an ack parses
	// three numbers of each of a hundred receipts.
	var n uint64
	for i := 0; i < len(s); i++ {
		d := uint64(s[i] - '0')
		if d > 9 || d > max || n > (max-d)/10 { // n*10+d > max
			return 0, false
		}
		n = n*10 + d
	}
	return n, true
}
