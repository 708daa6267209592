package nlip

import (
	"errors"
	"strconv"
	"unicode/utf8"
)

// CBOR major types (RFC 8949 §3.1).
const (
	majorUint   = 0
	majorNegInt = 1
	majorBytes  = 2
	majorText   = 3
	majorArray  = 4
	majorMap    = 5
	majorTag    = 6
	majorSimple = 7

	cborNull = 0xf6
)

// cborReader walks the message's own structure (the top-level map, the
// submessages array and its maps) by hand, so keys are seen in document
// order and compared without regard to case, like the JSON decoder.
// Values that are not ours to interpret (content, unknown fields) are
// handed to fxamacker with strict options.
type cborReader struct {
	data []byte
	pos  int
}

var errCBOREnd = errors.New("unexpected end of CBOR input")

// peek returns the initial byte of the next item.
func (r *cborReader) peek() (byte, bool) {
	if r.pos >= len(r.data) {
		return 0, false
	}
	return r.data[r.pos], true
}

// head reads an item head: major type and argument. Indefinite lengths and
// the reserved additional information values are refused.
func (r *cborReader) head() (major byte, arg uint64, err error) {
	if r.pos >= len(r.data) {
		return 0, 0, errCBOREnd
	}
	b := r.data[r.pos]
	r.pos++
	major, ai := b>>5, b&0x1f
	var n int
	switch {
	case ai < 24:
		return major, uint64(ai), nil
	case ai == 24:
		n = 1
	case ai == 25:
		n = 2
	case ai == 26:
		n = 4
	case ai == 27:
		n = 8
	case ai == 31:
		return 0, 0, errors.New("indefinite-length CBOR items are not allowed")
	default:
		return 0, 0, errors.New("reserved CBOR additional information " + strconv.Itoa(int(ai)))
	}
	if len(r.data)-r.pos < n {
		return 0, 0, errCBOREnd
	}
	for _, c := range r.data[r.pos : r.pos+n] {
		arg = arg<<8 | uint64(c)
	}
	r.pos += n
	return major, arg, nil
}

// text reads the body of a text string whose head was read, checking UTF-8.
func (r *cborReader) text(length uint64) ([]byte, error) {
	if length > uint64(len(r.data)-r.pos) {
		return nil, errCBOREnd
	}
	b := r.data[r.pos : r.pos+int(length)]
	r.pos += int(length)
	if !utf8.Valid(b) {
		return nil, errors.New("invalid UTF-8 in a CBOR text string")
	}
	return b, nil
}

// bytes reads the body of a byte string whose head was read.
func (r *cborReader) bytes(length uint64) ([]byte, error) {
	if length > uint64(len(r.data)-r.pos) {
		return nil, errCBOREnd
	}
	b := r.data[r.pos : r.pos+int(length)]
	r.pos += int(length)
	return b, nil
}

// count checks an array or map length against what the input could hold
// (each element takes a byte at least), before anything loops on it.
func (r *cborReader) count(arg uint64, perItem int) (int, error) {
	if arg > uint64(len(r.data)-r.pos)/uint64(perItem) {
		return 0, errCBOREnd
	}
	return int(arg), nil
}
