package protocol

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
)

// The publish stream carries Publish calls over one long-lived connection,
// many at a time, each answered on its own: an HTTP/1.1 request per event
// costs the client and the server several times what storing the event
// does (see docs/decisions/0008-publish-stream.md).
//
// A client opens it with a GET of PublishStreamPath carrying
// "Connection: Upgrade", "Upgrade: " + PublishStreamUpgrade and its token,
// as for any call; the server answers 101 Switching Protocols, and from
// then on both sides send frames:
//
//	frame    = length id body      ; length (uvarint) counts id and body
//	request  = frame, body = a herald.v1.PublishRequest (protobuf)
//	response = frame, body = code (uvarint), flags (uvarint), then for
//	           code 0 a herald.v1.PublishResponse, else the error's
//	           message (UTF-8)
//
// id (uvarint) is the client's name for the call; the response to a
// request carries its id. code is a Connect error code (0: success).
// flags has ResponseForwarded set when the node passed some of the call
// to another node, as ForwardedHeader says of a request.
// Responses come in the order calls finish, not the order they were sent.
// Every request the server has read is answered before it closes the
// connection. When it stops reading for good (it is shutting down), it
// first sends a response with id 0 and code Unavailable: the requests
// still unanswered then were not read, and nothing of them was published.
const (
	PublishStreamPath    = "/stream/publish"
	PublishStreamUpgrade = "herald-publish/1"
)

// CodeOK is the code of a successful response on the publish stream.
const CodeOK = 0

// ResponseForwarded is the flag of a response to a call the node passed,
// in part, to the leader of a shard it does not lead.
const ResponseForwarded = 1

// ErrFrameTooLarge is returned by ReadFrame for a frame over its limit;
// the frame's id has been read and the rest of it skipped.
var ErrFrameTooLarge = errors.New("frame too large")

// AppendFrame appends a frame with id and body to dst, where frames wait
// to share one write.
func AppendFrame(dst []byte, id uint64, body []byte) []byte {
	n := uvarintLen(id) + len(body)
	dst = binary.AppendUvarint(dst, uint64(n))
	dst = binary.AppendUvarint(dst, id)
	return append(dst, body...)
}

// AppendResponse appends to dst the response frame to call id: code,
// flags and then payload, the encoded PublishResponse or the error's
// message.
func AppendResponse(dst []byte, id, code, flags uint64, payload []byte) []byte {
	n := uvarintLen(id) + uvarintLen(code) + uvarintLen(flags) + len(payload)
	dst = binary.AppendUvarint(dst, uint64(n))
	dst = binary.AppendUvarint(dst, id)
	dst = binary.AppendUvarint(dst, code)
	dst = binary.AppendUvarint(dst, flags)
	return append(dst, payload...)
}

// ParseResponse splits the body of a response frame into its code, flags
// and payload.
func ParseResponse(body []byte) (code, flags uint64, payload []byte, err error) {
	code, n := binary.Uvarint(body)
	if n <= 0 {
		return 0, 0, nil, errors.New("response frame without a code")
	}
	flags, m := binary.Uvarint(body[n:])
	if m <= 0 {
		return 0, 0, nil, errors.New("response frame without flags")
	}
	return code, flags, body[n+m:], nil
}

// FrameBuffered reports whether r's buffer holds a whole frame, so that
// ReadFrame would return without reading from the connection.
func FrameBuffered(r *bufio.Reader) bool {
	b, _ := r.Peek(r.Buffered())
	n, k := binary.Uvarint(b)
	return k > 0 && uint64(len(b)-k) >= n
}

// ReadFrame reads one frame from r and returns its id and body. A frame
// whose body is longer than max is skipped: ReadFrame returns its id,
// its length and ErrFrameTooLarge, and r is at the next frame. The body
// is valid until the next call.
func ReadFrame(r *bufio.Reader, max int, buf []byte) (id uint64, body []byte, err error) {
	n, err := binary.ReadUvarint(r)
	if err != nil {
		return 0, nil, err
	}
	id, err = binary.ReadUvarint(r)
	if err != nil {
		return 0, nil, unexpectedEOF(err)
	}
	idLen := uint64(uvarintLen(id))
	if n < idLen {
		return 0, nil, fmt.Errorf("frame of %d bytes is shorter than its id", n)
	}
	size := n - idLen
	if size > uint64(max) {
		if _, err := io.CopyN(io.Discard, r, int64(size)); err != nil {
			return 0, nil, unexpectedEOF(err)
		}
		return id, buf[:0], fmt.Errorf("%w: %d bytes, over the limit of %d", ErrFrameTooLarge, size, max)
	}
	if uint64(cap(buf)) < size {
		buf = make([]byte, size)
	}
	body = buf[:size]
	if _, err := io.ReadFull(r, body); err != nil {
		return 0, nil, unexpectedEOF(err)
	}
	return id, body, nil
}

func unexpectedEOF(err error) error {
	if err == io.EOF {
		return io.ErrUnexpectedEOF
	}
	return err
}

func uvarintLen(v uint64) int {
	var b [binary.MaxVarintLen64]byte
	return binary.PutUvarint(b[:], v)
}
