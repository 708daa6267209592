package nlip

import (
	"errors"
	"io"
	"strconv"

	"github.com/fxamacker/cbor/v2"
)

// DecodeCBOR decodes and validates one NLIP message in CBOR (RFC 8949), the
// WebSocket binding's binary form (ECMA-432). The rules are DecodeJSON's:
// the top level is a map with text keys, matched without regard to case;
// null optional fields are absent; binary content is a byte string (base64
// text is accepted too); any other content must have a JSON equivalent, so
// tags, undefined, NaN, infinities and non-string map keys are refused.
// The size limit is checked before parsing. Every rejection is an *Error.
func DecodeCBOR(data []byte, lim Limits) (*Message, error) {
	m, _, err := decodeCBOR(data, lim.withDefaults())
	if err != nil {
		return nil, err
	}
	return m, nil
}

// TokensOfCBOR is TokensOfJSON for a CBOR message.
func TokensOfCBOR(data []byte, lim Limits) []Submessage {
	lim = lim.withDefaults()
	m, read, err := decodeCBOR(data, lim)
	if err == nil {
		return m.Tokens()
	}
	return validTokens(read, lim)
}

// decodeCBOR is DecodeCBOR under complete limits. On failure, read is
// every part read whole before the problem, for TokensOfCBOR.
func decodeCBOR(data []byte, lim Limits) (m *Message, read []Submessage, err error) {
	if e := checkSize(len(data), lim); e != nil {
		return nil, nil, e
	}
	dm, err := cborContentMode(lim)
	if err != nil {
		return nil, nil, err
	}
	d := cborDecoder{r: cborReader{data: data}, lim: lim, dm: dm}
	m, e := d.message()
	if e != nil {
		return nil, d.subs, e
	}
	if e := validateMessage(m, lim, true); e != nil {
		return nil, m.allParts(), e
	}
	return m, nil, nil
}

type cborDecoder struct {
	r   cborReader
	lim Limits
	dm  cbor.DecMode
	// subs are the submessages read whole so far.
	subs []Submessage
}

func (d *cborDecoder) message() (*Message, *Error) {
	if len(d.r.data) == 0 {
		return nil, newError(CodeMalformed, "", "empty input")
	}
	if b, _ := d.r.peek(); b>>5 != majorMap {
		return nil, newError(CodeMalformed, "", "an NLIP message must be a CBOR map")
	}
	var top wirePart
	if e := d.object(-1, true, &top); e != nil {
		return nil, e
	}
	if d.r.pos != len(d.r.data) {
		return nil, newError(CodeMalformed, "", "data after the CBOR map at byte "+strconv.Itoa(d.r.pos))
	}
	return &Message{
		MessageType: top.messageType,
		Format:      top.Format,
		Subformat:   top.Subformat,
		Content:     top.Content,
		Submessages: top.submessages,
	}, nil
}

// object reads the map at the cursor into p (index -1 is the top level).
func (d *cborDecoder) object(index int, top bool, p *wirePart) *Error {
	_, arg, err := d.r.head()
	if err != nil {
		return malformed(err)
	}
	n, err := d.r.count(arg, 2)
	if err != nil {
		return malformed(err)
	}
	var seen seenKeys
	for range n {
		start := d.r.pos
		major, length, err := d.r.head()
		if err != nil {
			return malformed(err)
		}
		if major != majorText {
			return d.wrongType(start, partPointer(index), "map keys must be text strings")
		}
		key, err := d.r.text(length)
		if err != nil {
			return malformed(err)
		}
		f := lookupField(key, top)
		if !seen.add(f, key) {
			return newError(CodeDuplicateField, keyPointer(index, f, key),
				"key "+strconv.Quote(string(key))+" repeats a field (keys are case-insensitive)")
		}
		if e := d.fieldValue(index, f, key, p); e != nil {
			return e
		}
	}
	return nil
}

func (d *cborDecoder) fieldValue(index int, f field, key []byte, p *wirePart) *Error {
	var e *Error
	switch f {
	case fieldMessageType:
		p.messageType, e = d.stringValue(index, f)
	case fieldFormat:
		p.Format, e = d.stringValue(index, f)
	case fieldSubformat:
		p.Subformat, e = d.stringValue(index, f)
	case fieldLabel:
		var label string
		label, e = d.stringValue(index, f)
		if index >= 0 {
			p.Label = label
		}
	case fieldContent:
		p.Content, e = d.content(index)
	case fieldSubmessages:
		p.submessages, e = d.submessages()
	default:
		var raw cbor.RawMessage
		if err := d.decodeValue(&raw); err != nil {
			return cborFailure(err, keyPointer(index, f, key), d.lim)
		}
	}
	return e
}

// stringValue reads a text field; null means absent.
func (d *cborDecoder) stringValue(index int, f field) (string, *Error) {
	if b, ok := d.r.peek(); ok && b == cborNull {
		d.r.pos++
		return "", nil
	}
	start := d.r.pos
	major, length, err := d.r.head()
	if err != nil {
		return "", malformed(err)
	}
	if major != majorText {
		return "", d.wrongType(start, fieldPointer(index, fieldNames[f]), fieldNames[f]+" must be a text string")
	}
	b, err := d.r.text(length)
	if err != nil {
		return "", malformed(err)
	}
	return string(b), nil
}

// content reads a content value: text as text, a byte string as binary,
// anything else as canonical JSON.
func (d *cborDecoder) content(index int) (Content, *Error) {
	ptr := fieldPointer(index, "content")
	start := d.r.pos
	major, length, err := d.r.head()
	if err != nil {
		return Content{}, malformed(err)
	}
	switch major {
	case majorText:
		b, err := d.r.text(length)
		if err != nil {
			return Content{}, malformed(err)
		}
		return TextContent(string(b)), nil
	case majorBytes:
		b, err := d.r.bytes(length)
		if err != nil {
			return Content{}, malformed(err)
		}
		if len(b) > d.lim.MaxContentBytes {
			return Content{}, contentTooLarge(ptr, len(b), d.lim)
		}
		return BinaryContent(b), nil
	}
	d.r.pos = start
	var v any
	if err := d.decodeValue(&v); err != nil {
		return Content{}, cborFailure(err, ptr, d.lim)
	}
	out, err := appendCanonicalAny(nil, v, 0, d.lim.MaxContentDepth)
	if err != nil {
		return Content{}, scanFailure(err, ptr, d.lim)
	}
	if len(out) > d.lim.MaxContentBytes {
		return Content{}, contentTooLarge(ptr, len(out), d.lim)
	}
	return Content{kind: KindJSON, data: string(out)}, nil
}

// decodeValue decodes the item at the cursor with fxamacker's strict mode
// and moves past it.
func (d *cborDecoder) decodeValue(v any) error {
	rest, err := d.dm.UnmarshalFirst(d.r.data[d.r.pos:], v)
	if err != nil {
		return err
	}
	d.r.pos = len(d.r.data) - len(rest)
	return nil
}

func (d *cborDecoder) submessages() ([]Submessage, *Error) {
	if b, ok := d.r.peek(); ok && b == cborNull {
		d.r.pos++
		return nil, nil
	}
	start := d.r.pos
	major, arg, err := d.r.head()
	if err != nil {
		return nil, malformed(err)
	}
	if major != majorArray {
		return nil, d.wrongType(start, "/submessages", "submessages must be an array")
	}
	if arg > uint64(d.lim.MaxSubmessages) {
		return nil, tooManySubmessages(int(min(arg, uint64(1)<<31)), d.lim)
	}
	n, err := d.r.count(arg, 1)
	if err != nil {
		return nil, malformed(err)
	}
	if n == 0 {
		return nil, nil
	}
	d.subs = make([]Submessage, 0, n)
	for i := range n {
		if b, ok := d.r.peek(); !ok || b>>5 != majorMap {
			if !ok {
				return nil, malformed(errCBOREnd)
			}
			return nil, d.wrongType(d.r.pos, partPointer(i), "a submessage must be a map")
		}
		var p wirePart
		if e := d.object(i, false, &p); e != nil {
			return nil, e
		}
		d.subs = append(d.subs, p.Submessage)
	}
	return d.subs, nil
}

// wrongType refuses the item at start, of the wrong type for its place, as
// invalid_type once it is known to be well-formed CBOR: an ill-formed or
// truncated item is malformed, as in JSON (jsonDecoder.wrongType).
func (d *cborDecoder) wrongType(start int, pointer, msg string) *Error {
	d.r.pos = start
	var raw cbor.RawMessage
	if err := d.decodeValue(&raw); err != nil {
		if e := cborFailure(err, pointer, d.lim); e.Code == CodeMalformed {
			return e
		}
	}
	return newError(CodeInvalidType, pointer, msg)
}

// cborFailure classifies an fxamacker error for the value at pointer:
// truncated or ill-formed input is malformed; a well-formed value we refuse
// (too deep, a tag, a duplicate key, no JSON equivalent) is reported there.
func cborFailure(err error, pointer string, lim Limits) *Error {
	var (
		syntax *cbor.SyntaxError
		deep   *cbor.MaxNestedLevelError
		indef  *cbor.IndefiniteLengthError
	)
	switch {
	case errors.As(err, &deep):
		return newError(CodeTooDeep, pointer, "value nests deeper than "+
			strconv.Itoa(lim.MaxContentDepth)+" levels")
	case errors.As(err, &syntax), errors.As(err, &indef),
		errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return malformed(err)
	}
	return newError(CodeInvalidContent, pointer, "value has no JSON equivalent: "+err.Error())
}
