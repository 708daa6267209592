package nlip

import "encoding/base64"

// EncodeJSON validates m (under DefaultLimits, so nothing the peers' default
// decoders would refuse is sent) and writes it as JSON with lowercase keys,
// in the order nlip_sdk writes them, omitting empty optional fields (no
// nulls: AG2 and nlip_sdk accept absent fields, not every peer accepts
// null). Format and a control messagetype are written lowercase. The output
// is deterministic; binary content is standard padded base64.
func EncodeJSON(m *Message) ([]byte, error) {
	return EncodeJSONWithLimits(m, DefaultLimits())
}

// EncodeJSONWithLimits is EncodeJSON validating under lim, for bindings
// that accept larger messages than the defaults.
func EncodeJSONWithLimits(m *Message, lim Limits) ([]byte, error) {
	if err := m.Validate(lim); err != nil {
		return nil, err
	}
	out := make([]byte, 0, encodedSizeHint(m))
	out = append(out, '{')
	if m.MessageType != "" {
		out = appendJSONKey(out, "messagetype")
		out = appendJSONString(out, wireMessageType(m.MessageType))
		out = append(out, ',')
	}
	out = appendJSONPart(out, m.first())
	if len(m.Submessages) > 0 {
		out = append(out, ',')
		out = appendJSONKey(out, "submessages")
		out = append(out, '[')
		for i, sub := range m.Submessages {
			if i > 0 {
				out = append(out, ',')
			}
			out = append(out, '{')
			out = appendJSONPart(out, sub)
			out = append(out, '}')
		}
		out = append(out, ']')
	}
	return append(out, '}'), nil
}

// appendJSONPart writes format, subformat, content and, when set, label.
func appendJSONPart(out []byte, p Submessage) []byte {
	out = appendJSONKey(out, "format")
	out = appendJSONString(out, lowerFormat(p.Format))
	out = append(out, ',')
	out = appendJSONKey(out, "subformat")
	out = appendJSONString(out, p.Subformat)
	out = append(out, ',')
	out = appendJSONKey(out, "content")
	out = appendJSONContent(out, p.Content)
	if p.Label != "" {
		out = append(out, ',')
		out = appendJSONKey(out, "label")
		out = appendJSONString(out, p.Label)
	}
	return out
}

func appendJSONKey(out []byte, key string) []byte {
	out = append(out, '"')
	out = append(out, key...)
	return append(out, '"', ':')
}

// appendJSONContent writes content as its JSON value.
func appendJSONContent(out []byte, c Content) []byte {
	switch c.kind {
	case KindText:
		return appendJSONString(out, c.data)
	case KindBinary:
		out = append(out, '"')
		out = base64.StdEncoding.AppendEncode(out, []byte(c.data))
		return append(out, '"')
	default:
		return append(out, c.data...)
	}
}

// wireMessageType writes the reserved value in its canonical spelling and
// any other value as given.
func wireMessageType(mt string) string {
	if equalFoldASCII(mt, MessageTypeControl) {
		return MessageTypeControl
	}
	return mt
}

// encodedSizeHint guesses the output size to allocate once.
func encodedSizeHint(m *Message) int {
	n := 64 + len(m.MessageType) + len(m.Subformat) + m.Content.Len()*4/3
	for _, s := range m.Submessages {
		n += 64 + len(s.Label) + len(s.Subformat) + s.Content.Len()*4/3
	}
	return n
}
