package shard

// OpOf returns the Op of an encoded command without decoding the rest of
// it, for appliers that act on one kind of command only and must not pay
// a decode for every other entry. ok is false when data does not start
// like a command of this encoding; UnmarshalCommand says what is wrong.
func OpOf(data []byte) (op Op, ok bool) {
	if len(data) < 2 || data[0] != commandVersion {
		return 0, false
	}
	op = Op(data[1])
	return op, op.valid()
}
