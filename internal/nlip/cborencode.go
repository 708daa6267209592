package nlip

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
)

// EncodeCBOR validates m (under DefaultLimits) and writes it as CBOR for
// the WebSocket binding: a map with lowercase text keys, binary content as
// a raw byte string, other JSON content as the equivalent CBOR (integers
// that are exact as doubles become CBOR integers, other numbers float64).
// Keys are in RFC 8949 §4.2.1 deterministic order and empty optional
// fields are omitted, so the output depends only on the message.
func EncodeCBOR(m *Message) ([]byte, error) {
	return EncodeCBORWithLimits(m, DefaultLimits())
}

// EncodeCBORWithLimits is EncodeCBOR validating under lim.
func EncodeCBORWithLimits(m *Message, lim Limits) ([]byte, error) {
	if err := m.Validate(lim); err != nil {
		return nil, err
	}
	out := make([]byte, 0, encodedSizeHint(m))
	pairs := uint64(3)
	if m.MessageType != "" {
		pairs++
	}
	if len(m.Submessages) > 0 {
		pairs++
	}
	// Deterministic order sorts keys by their encoding: shorter first, then
	// bytewise, hence format, content, subformat, messagetype, submessages.
	out = appendCBORHead(out, majorMap, pairs)
	out = appendCBORText(out, "format")
	out = appendCBORText(out, lowerFormat(m.Format))
	out = appendCBORText(out, "content")
	out, err := appendCBORContent(out, m.Content)
	if err != nil {
		return nil, fmt.Errorf("nlip: encode content: %w", err)
	}
	out = appendCBORText(out, "subformat")
	out = appendCBORText(out, m.Subformat)
	if m.MessageType != "" {
		out = appendCBORText(out, "messagetype")
		out = appendCBORText(out, wireMessageType(m.MessageType))
	}
	if len(m.Submessages) > 0 {
		out = appendCBORText(out, "submessages")
		out = appendCBORHead(out, majorArray, uint64(len(m.Submessages)))
		for i, sub := range m.Submessages {
			if out, err = appendCBORSubmessage(out, sub); err != nil {
				return nil, fmt.Errorf("nlip: encode submessage %d: %w", i, err)
			}
		}
	}
	return out, nil
}

// appendCBORSubmessage writes label (when set), format, content, subformat.
func appendCBORSubmessage(out []byte, s Submessage) ([]byte, error) {
	pairs := uint64(3)
	if s.Label != "" {
		pairs++
	}
	out = appendCBORHead(out, majorMap, pairs)
	if s.Label != "" {
		out = appendCBORText(out, "label")
		out = appendCBORText(out, s.Label)
	}
	out = appendCBORText(out, "format")
	out = appendCBORText(out, lowerFormat(s.Format))
	out = appendCBORText(out, "content")
	out, err := appendCBORContent(out, s.Content)
	if err != nil {
		return nil, err
	}
	out = appendCBORText(out, "subformat")
	return appendCBORText(out, s.Subformat), nil
}

func appendCBORContent(out []byte, c Content) ([]byte, error) {
	switch c.kind {
	case KindText:
		return appendCBORText(out, c.data), nil
	case KindBinary:
		out = appendCBORHead(out, majorBytes, uint64(len(c.data)))
		return append(out, c.data...), nil
	}
	v, err := cborValueOfJSON(c.data)
	if err != nil {
		return nil, err
	}
	em, err := cborEncMode()
	if err != nil {
		return nil, err
	}
	b, err := em.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("marshal CBOR: %w", err)
	}
	return append(out, b...), nil
}

// cborValueOfJSON parses canonical JSON into values fxamacker encodes as
// the matching CBOR: json.Number becomes int64 when it is an integer
// that is exact as a double (so it round-trips through appendCanonicalAny
// unchanged), float64 otherwise.
func cborValueOfJSON(canonical string) (any, error) {
	dec := json.NewDecoder(strings.NewReader(canonical))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, fmt.Errorf("parse canonical JSON: %w", err)
	}
	return numbersForCBOR(v)
}

func numbersForCBOR(v any) (any, error) {
	switch x := v.(type) {
	case json.Number:
		if i, err := strconv.ParseInt(string(x), 10, 64); err == nil {
			return i, nil
		}
		f, err := strconv.ParseFloat(string(x), 64)
		if err != nil {
			return nil, fmt.Errorf("number %s: %w", x, err)
		}
		return f, nil
	case []any:
		for i := range x {
			var err error
			if x[i], err = numbersForCBOR(x[i]); err != nil {
				return nil, err
			}
		}
	case map[string]any:
		for k := range x {
			var err error
			if x[k], err = numbersForCBOR(x[k]); err != nil {
				return nil, err
			}
		}
	}
	return v, nil
}

func appendCBORText(out []byte, s string) []byte {
	out = appendCBORHead(out, majorText, uint64(len(s)))
	return append(out, s...)
}

// appendCBORHead writes the shortest head for major type and argument.
func appendCBORHead(out []byte, major byte, arg uint64) []byte {
	m := major << 5
	switch {
	case arg < 24:
		return append(out, m|byte(arg))
	case arg <= 0xff:
		return append(out, m|24, byte(arg))
	case arg <= 0xffff:
		return append(out, m|25, byte(arg>>8), byte(arg))
	case arg <= 0xffffffff:
		return append(out, m|26, byte(arg>>24), byte(arg>>16), byte(arg>>8), byte(arg))
	}
	out = append(out, m|27)
	for shift := 56; shift >= 0; shift -= 8 {
		out = append(out, byte(arg>>uint(shift)))
	}
	return out
}

// lowerFormat returns the canonical spelling of a validated format.
func lowerFormat(f string) string {
	if known, ok := normalizeFormat(f); ok {
		return known
	}
	return f
}
