package nlip

import (
	"encoding/base64"
	"strconv"
	"strings"
	"unicode/utf8"
)

// Validate checks m against ECMA-430 and lim and returns the first problem
// as an *Error (nil when m is valid). The decoders apply exactly these
// rules, so a decoded message always validates under the same limits.
//
// Format and messagetype are compared without regard to case, as the
// standard says; EncodeJSON, EncodeCBOR and ToHeader write them lowercase.
func (m *Message) Validate(lim Limits) error {
	if m == nil {
		return newError(CodeMalformed, "", "no message")
	}
	if e := validateMessage(m, lim.withDefaults(), false); e != nil {
		return e
	}
	return nil
}

// validateMessage checks every part in order, top level first. With
// fromWire set (a decoder calling), it also normalises format and turns
// base64 text of binary parts into bytes, in place; the checks that the
// decoder already made while scanning (UTF-8 of text, nesting) are skipped.
func validateMessage(m *Message, lim Limits, fromWire bool) *Error {
	if e := checkField(m.MessageType, "/messagetype", lim); e != nil {
		return e
	}
	if fromWire && equalFoldASCII(m.MessageType, MessageTypeControl) {
		m.MessageType = MessageTypeControl
	}
	if len(m.Submessages) > lim.MaxSubmessages {
		return tooManySubmessages(len(m.Submessages), lim)
	}
	top := m.first()
	if e := checkPart(&top, -1, lim, fromWire); e != nil {
		return e
	}
	if fromWire {
		m.Format, m.Content = top.Format, top.Content
	}
	for i := range m.Submessages {
		p := &m.Submessages[i]
		if !fromWire {
			cp := *p
			p = &cp
		}
		if e := checkField(p.Label, fieldPointer(i, "label"), lim); e != nil {
			return e
		}
		if e := checkPart(p, i, lim, fromWire); e != nil {
			return e
		}
	}
	return nil
}

// checkFieldSize bounds format and subformat, whose content rules report
// bad UTF-8 themselves.
func checkFieldSize(v, pointer string, lim Limits) *Error {
	if len(v) > lim.MaxFieldBytes {
		return newError(CodeTooLarge, pointer, "field is "+strconv.Itoa(len(v))+
			" bytes, the limit is "+strconv.Itoa(lim.MaxFieldBytes))
	}
	return nil
}

func tooManySubmessages(n int, lim Limits) *Error {
	return newError(CodeTooManySubmessages, "/submessages",
		strconv.Itoa(n)+" submessages or more, the limit is "+strconv.Itoa(lim.MaxSubmessages))
}

// checkField bounds a header-like string field (messagetype, label) and
// requires UTF-8 (decoded fields always are; Go values may not be).
func checkField(v, pointer string, lim Limits) *Error {
	if e := checkFieldSize(v, pointer, lim); e != nil {
		return e
	}
	if !utf8.ValidString(v) {
		return newError(CodeInvalidType, pointer, "field is not valid UTF-8")
	}
	return nil
}

// checkPart checks one part (index -1 is the top level) in field order:
// format, subformat, content. p.Format is normalised and, from the wire,
// base64 text of a binary part is decoded into bytes.
func checkPart(p *Submessage, index int, lim Limits, fromWire bool) *Error {
	if p.Format == "" {
		return newError(CodeMissingField, fieldPointer(index, "format"), "format is missing")
	}
	if e := checkFieldSize(p.Format, fieldPointer(index, "format"), lim); e != nil {
		return e
	}
	format, ok := normalizeFormat(p.Format)
	if !ok {
		return newError(CodeUnknownFormat, fieldPointer(index, "format"), "format "+strconv.Quote(p.Format)+
			" is not one of text, token, structured, binary, location, generic, error")
	}
	p.Format = format

	subPtr := fieldPointer(index, "subformat")
	if p.Subformat == "" {
		return newError(CodeMissingField, subPtr, "subformat is missing or empty")
	}
	if e := checkFieldSize(p.Subformat, subPtr, lim); e != nil {
		return e
	}
	if why := checkSubformat(format, p.Subformat); why != "" {
		return newError(CodeInvalidSubformat, subPtr, why)
	}

	contentPtr := fieldPointer(index, "content")
	if p.Content.kind == KindNone {
		return newError(CodeMissingField, contentPtr, "content is missing")
	}
	if fromWire && format == FormatBinary && p.Content.kind == KindText {
		bin, why := decodeBase64(p.Content.data, lim)
		if why != nil {
			return newError(why.Code, contentPtr, why.Message)
		}
		p.Content = bin
	}
	if p.Content.Len() > lim.MaxContentBytes {
		return contentTooLarge(contentPtr, p.Content.Len(), lim)
	}
	if !fromWire {
		if p.Content.kind == KindText && !utf8.ValidString(p.Content.data) {
			return newError(CodeInvalidContent, contentPtr, "text content is not valid UTF-8")
		}
		if p.Content.kind == KindJSON && jsonDepth(p.Content.data) > lim.MaxContentDepth {
			return contentTooDeep(contentPtr, lim)
		}
	}
	if why := checkContent(format, p.Subformat, p.Content); why != "" {
		return newError(CodeInvalidContent, contentPtr, why)
	}
	return nil
}

func contentTooLarge(pointer string, n int, lim Limits) *Error {
	return newError(CodeTooLarge, pointer, "content is "+strconv.Itoa(n)+
		" bytes, the limit is "+strconv.Itoa(lim.MaxContentBytes))
}

func contentTooDeep(pointer string, lim Limits) *Error {
	return newError(CodeTooDeep, pointer, "content nests deeper than "+
		strconv.Itoa(lim.MaxContentDepth)+" levels")
}

// decodeBase64 reads binary content sent as a JSON (or CBOR text) string.
// Senders differ: Python's b64encode pads, browsers and JWT-style code use
// the URL-safe alphabet without padding, so all four forms are accepted;
// the alphabet is chosen by the characters present, and padding is
// optional. Mixing both alphabets is an error.
func decodeBase64(s string, lim Limits) (Content, *Error) {
	if base64.RawStdEncoding.DecodedLen(len(s)) > lim.MaxContentBytes+2 {
		return Content{}, newError(CodeTooLarge, "", "binary content is larger than "+
			strconv.Itoa(lim.MaxContentBytes)+" bytes")
	}
	body := strings.TrimRight(s, "=")
	if len(s)-len(body) > 2 {
		return Content{}, newError(CodeInvalidContent, "", "binary content has too much base64 padding")
	}
	enc := base64.RawStdEncoding
	if strings.ContainsAny(body, "-_") {
		enc = base64.RawURLEncoding
	}
	out, err := enc.DecodeString(body)
	if err != nil {
		return Content{}, newError(CodeInvalidContent, "", "binary content is not valid base64")
	}
	return BinaryContent(out), nil
}

// jsonDepth is the array/object nesting of a canonical JSON text.
func jsonDepth(canonical string) int {
	depth, deepest := 0, 0
	inString := false
	for i := 0; i < len(canonical); i++ {
		c := canonical[i]
		switch {
		case inString:
			if c == '\\' {
				i++
			} else if c == '"' {
				inString = false
			}
		case c == '"':
			inString = true
		case c == '[' || c == '{':
			depth++
			deepest = max(deepest, depth)
		case c == ']' || c == '}':
			depth--
		}
	}
	return deepest
}
