package nlip

import (
	"errors"
	"strconv"
)

// DecodeJSON decodes and validates one NLIP message in JSON.
//
// Field names and enumerated values are matched without regard to case
// (ECMA-430 §5); a key given twice in any case is an error. Null optional
// fields count as absent, because the Python reference server sends them.
// Unknown keys are ignored, but their values must still be well-formed
// JSON within the nesting limit. The size limit is checked before parsing.
// Every rejection is an *Error.
func DecodeJSON(data []byte, lim Limits) (*Message, error) {
	m, _, e := decodeJSON(data, lim.withDefaults())
	if e != nil {
		return nil, e
	}
	return m, nil
}

// TokensOfJSON is the token parts of the JSON message data, so that a
// binding can echo them (ECMA-430 §6.2) even in the answer to a message it
// refuses: all of a valid message's Tokens; of an invalid one, those it
// read whole before the problem that are valid by themselves. Nothing for
// input over the size limit, which is not read.
func TokensOfJSON(data []byte, lim Limits) []Submessage {
	lim = lim.withDefaults()
	m, read, e := decodeJSON(data, lim)
	if e == nil {
		return m.Tokens()
	}
	return validTokens(read, lim)
}

// decodeJSON is DecodeJSON under complete limits. On failure, read is
// every part read whole before the problem, for TokensOfJSON.
func decodeJSON(data []byte, lim Limits) (m *Message, read []Submessage, e *Error) {
	if e := checkSize(len(data), lim); e != nil {
		return nil, nil, e
	}
	d := jsonDecoder{s: jsonScanner{data: data}, lim: lim}
	m, e = d.message()
	if e != nil {
		return nil, d.subs, e
	}
	if e := validateMessage(m, lim, true); e != nil {
		return nil, m.allParts(), e
	}
	return m, nil, nil
}

// jsonDecoder reads the message structure. It checks shape and types in
// document order; the format-dependent rules run afterwards in
// validateMessage, part by part.
type jsonDecoder struct {
	s   jsonScanner
	lim Limits
	cz  canonicalizer
	buf []byte // reused output buffer for canonical JSON content
	// subs are the submessages read whole so far.
	subs []Submessage
}

// wirePart collects one object's known fields as read. The top level uses
// all of them; a submessage only Submessage's.
type wirePart struct {
	Submessage
	messageType string
	submessages []Submessage
}

func (d *jsonDecoder) message() (*Message, *Error) {
	s := &d.s
	s.skipSpace()
	if s.peek() != '{' {
		if s.pos >= len(s.data) {
			return nil, newError(CodeMalformed, "", "empty input")
		}
		return nil, newError(CodeMalformed, "", "an NLIP message must be a JSON object")
	}
	var top wirePart
	if e := d.object(-1, true, &top); e != nil {
		return nil, e
	}
	s.skipSpace()
	if s.pos != len(s.data) {
		return nil, newError(CodeMalformed, "", "data after the JSON object at byte "+strconv.Itoa(s.pos))
	}
	return &Message{
		MessageType: top.messageType,
		Format:      top.Format,
		Subformat:   top.Subformat,
		Content:     top.Content,
		Submessages: top.submessages,
	}, nil
}

// object reads the object at the cursor into p. index is -1 for the top
// level, else the submessage's index (for pointers).
func (d *jsonDecoder) object(index int, top bool, p *wirePart) *Error {
	s := &d.s
	s.pos++ // '{'
	var seen seenKeys
	s.skipSpace()
	if s.peek() == '}' {
		s.pos++
		return nil
	}
	for {
		s.skipSpace()
		ks, ke, escaped, err := s.scanString()
		if err != nil {
			return malformed(err)
		}
		key := s.data[ks:ke]
		if escaped {
			key = appendUnescaped(nil, key)
		}
		f := lookupField(key, top)
		if !seen.add(f, key) {
			return newError(CodeDuplicateField, keyPointer(index, f, key),
				"key "+strconv.Quote(string(key))+" repeats a field (keys are case-insensitive)")
		}
		if err := s.expect(':', "':'"); err != nil {
			return malformed(err)
		}
		if e := d.fieldValue(index, f, key, p); e != nil {
			return e
		}
		s.skipSpace()
		switch s.peek() {
		case ',':
			s.pos++
		case '}':
			s.pos++
			return nil
		default:
			return malformed(s.syntaxError("',' or '}'"))
		}
	}
}

// fieldValue reads the value of one field into p.
func (d *jsonDecoder) fieldValue(index int, f field, key []byte, p *wirePart) *Error {
	var e *Error
	switch f {
	case fieldMessageType:
		p.messageType, e = d.stringValue(index, f)
	case fieldFormat:
		p.Format, e = d.stringValue(index, f)
	case fieldSubformat:
		p.Subformat, e = d.stringValue(index, f)
	case fieldLabel:
		// A top-level label (nlip_sdk allows one) is read for its type and
		// dropped: the model, like ECMA-430, has labels on submessages only.
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
		if err := d.s.skipValue(0, d.lim.MaxContentDepth); err != nil {
			return scanFailure(err, keyPointer(index, f, key), d.lim)
		}
	}
	return e
}

// stringValue reads a string field; null means absent.
func (d *jsonDecoder) stringValue(index int, f field) (string, *Error) {
	s := &d.s
	s.skipSpace()
	switch s.peek() {
	case '"':
		start, end, escaped, err := s.scanString()
		if err != nil {
			return "", malformed(err)
		}
		return decodeJSONString(s.data[start:end], escaped), nil
	case 'n':
		if _, _, err := s.scanLiteral(); err != nil {
			return "", malformed(err)
		}
		return "", nil
	}
	return "", d.wrongType(fieldPointer(index, fieldNames[f]), fieldNames[f]+" must be a string")
}

// wrongType refuses the value at the cursor, of the wrong type for its
// field, as invalid_type once it is known to be JSON at all: a value that
// is not ({"format": x}, or the input ending there) is malformed, the
// first problem in document order. A value too deep to check whole is
// still of the wrong type.
func (d *jsonDecoder) wrongType(pointer, msg string) *Error {
	if err := d.s.skipValue(0, d.lim.MaxContentDepth); err != nil && !errors.Is(err, errTooDeep) {
		return malformed(err)
	}
	return newError(CodeInvalidType, pointer, msg)
}

// content reads a content value: a string as text, anything else (null
// included) as canonical JSON. Whether text is really base64 binary data
// depends on the format, which may come later; validateMessage decides.
func (d *jsonDecoder) content(index int) (Content, *Error) {
	s := &d.s
	s.skipSpace()
	if s.peek() == '"' {
		start, end, escaped, err := s.scanString()
		if err != nil {
			return Content{}, malformed(err)
		}
		return TextContent(decodeJSONString(s.data[start:end], escaped)), nil
	}
	out, err := d.cz.value(s, d.buf[:0], 0, d.lim.MaxContentDepth)
	if err != nil {
		return Content{}, scanFailure(err, fieldPointer(index, "content"), d.lim)
	}
	d.buf = out
	if len(out) > d.lim.MaxContentBytes {
		return Content{}, contentTooLarge(fieldPointer(index, "content"), len(out), d.lim)
	}
	return Content{kind: KindJSON, data: string(out)}, nil
}

// submessages reads the submessages array; null means none, and an empty
// array is accepted as none too (the schema wants at least one item, but
// nothing is lost and senders do emit []).
func (d *jsonDecoder) submessages() ([]Submessage, *Error) {
	s := &d.s
	s.skipSpace()
	switch s.peek() {
	case '[':
	case 'n':
		if _, _, err := s.scanLiteral(); err != nil {
			return nil, malformed(err)
		}
		return nil, nil
	default:
		return nil, d.wrongType("/submessages", "submessages must be an array")
	}
	s.pos++
	s.skipSpace()
	if s.peek() == ']' {
		s.pos++
		return nil, nil
	}
	for i := 0; ; i++ {
		if i == d.lim.MaxSubmessages {
			return nil, tooManySubmessages(i+1, d.lim)
		}
		s.skipSpace()
		if s.peek() != '{' {
			if s.pos >= len(s.data) {
				return nil, malformed(s.syntaxError("a submessage"))
			}
			return nil, d.wrongType(partPointer(i), "a submessage must be an object")
		}
		var p wirePart
		if e := d.object(i, false, &p); e != nil {
			return nil, e
		}
		d.subs = append(d.subs, p.Submessage)
		s.skipSpace()
		switch s.peek() {
		case ',':
			s.pos++
		case ']':
			s.pos++
			return d.subs, nil
		default:
			return nil, malformed(s.syntaxError("',' or ']'"))
		}
	}
}

// keyPointer is the pointer of a key: its lowercase field name when known,
// else the key itself, escaped.
func keyPointer(index int, f field, key []byte) string {
	if f != fieldUnknown {
		return fieldPointer(index, fieldNames[f])
	}
	return partPointer(index) + "/" + escapePointerToken(string(key))
}

func malformed(err error) *Error {
	return newError(CodeMalformed, "", err.Error())
}

// scanFailure classifies an error from scanning or canonicalising the value
// at pointer: nesting and content rules are reported there, syntax errors
// for the whole input.
func scanFailure(err error, pointer string, lim Limits) *Error {
	var (
		dup    *duplicateKeyError
		noJSON *noJSONError
	)
	switch {
	case errors.Is(err, errTooDeep):
		return newError(CodeTooDeep, pointer, "value nests deeper than "+
			strconv.Itoa(lim.MaxContentDepth)+" levels")
	case errors.As(err, &dup), errors.As(err, &noJSON), errors.Is(err, errNumberRange):
		return newError(CodeInvalidContent, pointer, err.Error())
	}
	return malformed(err)
}
