package tier

import "fmt"

// CorruptError reports an object, or a run read from one, that fails a
// check: a checksum, a bound, a magic number, an index out of sequence.
type CorruptError struct {
	Object string // the object's name in the store
	Offset int64  // where in the object the damage is, as near as known
	Reason string // what is wrong, and what to do about it
}

func (e *CorruptError) Error() string {
	return fmt.Sprintf("tier object %s offset %d: %s", e.Object, e.Offset, e.Reason)
}

// Remedies end a CorruptError's Reason. Damage found by a checksum is the
// store's (or the network's); a sound run that does not match its
// reference means the manifest and the object disagree.
const (
	remedyDamaged  = "the object store returned damaged data: read the shard from a replica or restore the object"
	remedyMismatch = "the manifest and the object disagree: check that the manifest entry names this object, or restore the object"
)

func corrupt(object string, off int64, remedy, format string, args ...any) *CorruptError {
	return &CorruptError{Object: object, Offset: off, Reason: fmt.Sprintf(format, args...) + "; " + remedy}
}
