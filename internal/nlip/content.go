package nlip

import (
	"encoding/json"
	"errors"
	"fmt"
)

// ContentKind says how a content value is held.
type ContentKind uint8

const (
	// KindNone is the zero Content: no content at all. It is never valid in
	// a message (content is required) but lets a missing field be told
	// apart from an empty string.
	KindNone ContentKind = iota
	// KindText is a JSON string (CBOR text string).
	KindText
	// KindBinary is raw bytes: base64 in JSON, a byte string in CBOR. Only
	// format "binary" carries it.
	KindBinary
	// KindJSON is any other JSON value (number, object, array, boolean,
	// null), held as its RFC 8785 canonical text.
	KindJSON
)

func (k ContentKind) String() string {
	switch k {
	case KindText:
		return "text"
	case KindBinary:
		return "binary"
	case KindJSON:
		return "json"
	default:
		return "none"
	}
}

// Content is one NLIP content value, kept exactly.
//
// It is immutable and comparable with ==: the value lives in a string, so
// two Contents are equal exactly when they hold the same kind and bytes,
// which (because JSON values are canonical) means the same value. Build one
// with TextContent, BinaryContent, JSONContent or RawJSONContent.
type Content struct {
	kind ContentKind
	data string
}

// TextContent is a text (JSON string) content.
func TextContent(s string) Content { return Content{kind: KindText, data: s} }

// BinaryContent is a binary content; b is copied.
func BinaryContent(b []byte) Content { return Content{kind: KindBinary, data: string(b)} }

// NullContent is the JSON null content, which the schema allows.
func NullContent() Content { return Content{kind: KindJSON, data: "null"} }

// JSONContent marshals v with encoding/json and keeps its canonical form. A
// v that marshals to a JSON string becomes text content, because a JSON
// string is text in NLIP; use BinaryContent for bytes.
func JSONContent(v any) (Content, error) {
	raw, err := json.Marshal(v)
	if err != nil {
		return Content{}, fmt.Errorf("nlip: marshal JSON content: %w", err)
	}
	return RawJSONContent(raw)
}

// RawJSONContent parses one JSON value and keeps its canonical form (a JSON
// string becomes text content). Objects with duplicate keys and numbers
// outside the IEEE-754 double range are rejected, as RFC 8785 requires.
func RawJSONContent(raw []byte) (Content, error) {
	c, err := contentFromJSON(raw, unlimited().MaxContentDepth)
	if err != nil {
		return Content{}, fmt.Errorf("nlip: JSON content: %w", err)
	}
	return c, nil
}

// contentFromJSON turns one complete JSON text into a Content.
func contentFromJSON(raw []byte, maxDepth int) (Content, error) {
	s := jsonScanner{data: raw}
	s.skipSpace()
	var c Content
	if s.peek() == '"' {
		start, end, escaped, err := s.scanString()
		if err != nil {
			return Content{}, err
		}
		c = TextContent(decodeJSONString(raw[start:end], escaped))
	} else {
		var cz canonicalizer
		out, err := cz.value(&s, nil, 0, maxDepth)
		if err != nil {
			return Content{}, err
		}
		c = Content{kind: KindJSON, data: string(out)}
	}
	s.skipSpace()
	if s.pos != len(raw) {
		return Content{}, errors.New("data after the JSON value")
	}
	return c, nil
}

// Kind says how the content is held.
func (c Content) Kind() ContentKind { return c.kind }

// IsZero reports whether there is no content (KindNone).
func (c Content) IsZero() bool { return c.kind == KindNone }

// IsNull reports whether the content is JSON null.
func (c Content) IsNull() bool { return c.kind == KindJSON && c.data == "null" }

// Text returns text content.
func (c Content) Text() (string, bool) {
	if c.kind != KindText {
		return "", false
	}
	return c.data, true
}

// Binary returns a copy of binary content.
func (c Content) Binary() ([]byte, bool) {
	if c.kind != KindBinary {
		return nil, false
	}
	return []byte(c.data), true
}

// JSON returns a copy of the canonical JSON of a non-string JSON value.
func (c Content) JSON() ([]byte, bool) {
	if c.kind != KindJSON {
		return nil, false
	}
	return []byte(c.data), true
}

// Len is the size the content limits apply to: text bytes, binary bytes,
// or canonical JSON bytes.
func (c Content) Len() int { return len(c.data) }

// Unmarshal decodes text or JSON content into v with encoding/json, so an
// object content can be read straight into a struct. Binary content is an
// error: decode it with Binary.
func (c Content) Unmarshal(v any) error {
	var raw []byte
	switch c.kind {
	case KindJSON:
		raw = []byte(c.data)
	case KindText:
		raw = appendJSONString(nil, c.data)
	default:
		return fmt.Errorf("nlip: cannot unmarshal %s content as JSON", c.kind)
	}
	if err := json.Unmarshal(raw, v); err != nil {
		return fmt.Errorf("nlip: unmarshal content: %w", err)
	}
	return nil
}
