package nlip

import (
	"fmt"
	"io"
	"strconv"
)

// Limits bound the resources one decoded message may use. The decoders take
// them explicitly (no package-level settings) so each binding can choose its
// own, e.g. a larger MaxMessageBytes on an upload path.
//
// A field that is zero or negative takes its DefaultLimits value: limits can
// be raised or lowered but never switched off.
type Limits struct {
	// MaxMessageBytes bounds the encoded message. It is checked before any
	// parsing; use ReadLimited to enforce it while reading a stream.
	MaxMessageBytes int
	// MaxSubmessages bounds the number of submessages.
	MaxSubmessages int
	// MaxContentDepth bounds how deeply arrays and objects nest inside one
	// content value: a scalar has depth 0, [] or {} depth 1, [[1]] depth 2.
	MaxContentDepth int
	// MaxContentBytes bounds one content value: the UTF-8 length of text,
	// the decoded length of binary data, the length of canonical JSON.
	MaxContentBytes int
	// MaxFieldBytes bounds messagetype, format, subformat and label, which
	// travel in the clear in the protobuf header and in logs.
	MaxFieldBytes int
}

// Default limits. 1 MiB matches the default NATS max_payload the envelope
// must fit in; 64 levels is far above real NLIP content (AG2's deepest
// shapes, tool JSON schemas, nest about 10) yet keeps recursion shallow.
const (
	defaultMaxMessageBytes = 1 << 20
	defaultMaxSubmessages  = 256
	defaultMaxContentDepth = 64
	defaultMaxContentBytes = 1 << 20
	defaultMaxFieldBytes   = 1024
)

// DefaultLimits returns the limits used for a zero Limits field.
func DefaultLimits() Limits {
	return Limits{
		MaxMessageBytes: defaultMaxMessageBytes,
		MaxSubmessages:  defaultMaxSubmessages,
		MaxContentDepth: defaultMaxContentDepth,
		MaxContentBytes: defaultMaxContentBytes,
		MaxFieldBytes:   defaultMaxFieldBytes,
	}
}

// withDefaults fills every unset field from DefaultLimits.
func (l Limits) withDefaults() Limits {
	d := DefaultLimits()
	if l.MaxMessageBytes <= 0 {
		l.MaxMessageBytes = d.MaxMessageBytes
	}
	if l.MaxSubmessages <= 0 {
		l.MaxSubmessages = d.MaxSubmessages
	}
	if l.MaxContentDepth <= 0 {
		l.MaxContentDepth = d.MaxContentDepth
	}
	if l.MaxContentBytes <= 0 {
		l.MaxContentBytes = d.MaxContentBytes
	}
	if l.MaxFieldBytes <= 0 {
		l.MaxFieldBytes = d.MaxFieldBytes
	}
	return l
}

// unlimited is used where the message was already accepted under limits we
// do not know (FromHeader, RawJSONContent): only the rules of the standard
// apply there. Nesting keeps a bound, encoding/json's 10000, because the
// canonicalizer recurses once per level.
func unlimited() Limits {
	const huge = int(^uint(0) >> 2)
	return Limits{
		MaxMessageBytes: huge,
		MaxSubmessages:  huge,
		MaxContentDepth: 10000,
		MaxContentBytes: huge,
		MaxFieldBytes:   huge,
	}
}

// checkSize rejects an encoded message larger than the limit. It is the
// first thing every decoder does, so an oversized input costs no parsing.
func checkSize(n int, lim Limits) *Error {
	if n > lim.MaxMessageBytes {
		return newError(CodeTooLarge, "", "message is "+strconv.Itoa(n)+
			" bytes, the limit is "+strconv.Itoa(lim.MaxMessageBytes))
	}
	return nil
}

// ReadLimited reads a whole message from r, stopping one byte past
// lim.MaxMessageBytes so an oversized body is rejected with CodeTooLarge
// without being buffered. Read errors are returned wrapped, not as *Error.
func ReadLimited(r io.Reader, lim Limits) ([]byte, error) {
	lim = lim.withDefaults()
	data, err := io.ReadAll(io.LimitReader(r, int64(lim.MaxMessageBytes)+1))
	if err != nil {
		return nil, fmt.Errorf("nlip: read message: %w", err)
	}
	if e := checkSize(len(data), lim); e != nil {
		e.Message = "message exceeds the limit of " + strconv.Itoa(lim.MaxMessageBytes) + " bytes"
		return nil, e
	}
	return data, nil
}
