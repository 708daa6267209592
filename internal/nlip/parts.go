package nlip

import (
	"fmt"
	"math"
)

// The constructors below build one part (a Submessage) with the format and
// subformat ECMA-430 Table 1 gives it. A part becomes the top level of a
// message with NewMessage, or a submessage with Message.Add; WithLabel
// labels it. They do not validate (Validate and the encoders do), so
// building never fails except where a value must be converted.

// NewMessage makes a message whose top level is first (its label, which
// the top level cannot carry, is dropped) followed by subs.
func NewMessage(first Submessage, subs ...Submessage) *Message {
	m := &Message{Format: first.Format, Subformat: first.Subformat, Content: first.Content}
	if len(subs) > 0 {
		m.Submessages = append([]Submessage(nil), subs...)
	}
	return m
}

// Add appends submessages to m.
func (m *Message) Add(subs ...Submessage) { m.Submessages = append(m.Submessages, subs...) }

// WithLabel returns p labelled.
func (p Submessage) WithLabel(label string) Submessage {
	p.Label = label
	return p
}

// Text is natural-language text in a language ("english", "en-US"). AG2
// and nlip_sdk only read text whose language is "english".
func Text(lang, s string) Submessage {
	return Submessage{Format: FormatText, Subformat: lang, Content: TextContent(s)}
}

// JSON is structured/json content holding v marshalled by encoding/json.
func JSON(v any) (Submessage, error) {
	c, err := JSONContent(v)
	if err != nil {
		return Submessage{}, err
	}
	return Structured("json", c), nil
}

// Structured is structured content with any subformat: json, uri, xml,
// html or a programming language.
func Structured(subformat string, c Content) Submessage {
	return Submessage{Format: FormatStructured, Subformat: subformat, Content: c}
}

// URI is a structured/uri part, e.g. the upload end-point of ECMA-430 §6.4.
func URI(uri string) Submessage { return Structured("uri", TextContent(uri)) }

// Binary is binary data with subformat kind/encoding, e.g. ("image",
// "png") or ("audio", ".wav").
func Binary(kind, encoding string, data []byte) Submessage {
	return Submessage{Format: FormatBinary, Subformat: kind + "/" + encoding, Content: BinaryContent(data)}
}

// Token is a token with a subformat of the form <prefix> or
// <prefix>_<suffix> (ECMA-430 §6.2).
func Token(subformat, value string) Submessage {
	return Submessage{Format: FormatToken, Subformat: subformat, Content: TextContent(value)}
}

// ConversationToken is a conversation token; creator, when not empty,
// names its creator as the standard's "conversation_<identity>" suffix.
func ConversationToken(creator, value string) Submessage {
	return Token(tokenSubformat(TokenConversation, creator), value)
}

// AuthenticationToken is an authentication token in the standard's
// spelling ("authentication", not nlip_sdk's "authorization").
func AuthenticationToken(creator, value string) Submessage {
	return Token(tokenSubformat(TokenAuthentication, creator), value)
}

func tokenSubformat(prefix, creator string) string {
	if creator == "" {
		return prefix
	}
	return prefix + "_" + creator
}

// LocationText is a location described in words.
func LocationText(s string) Submessage {
	return Submessage{Format: FormatLocation, Subformat: "text", Content: TextContent(s)}
}

// LocationGPS is a GPS position as {"lat":…,"lon":…} in decimal degrees.
func LocationGPS(lat, lon float64) (Submessage, error) {
	if math.IsNaN(lat) || math.IsNaN(lon) || math.Abs(lat) > 90 || math.Abs(lon) > 180 {
		return Submessage{}, fmt.Errorf("nlip: GPS position %v,%v is out of range", lat, lon)
	}
	c, err := JSONContent(map[string]float64{"lat": lat, "lon": lon})
	if err != nil {
		return Submessage{}, err
	}
	return Submessage{Format: FormatLocation, Subformat: "gps", Content: c}, nil
}

// Generic is a private extension the peers agreed on.
func Generic(ext string, c Content) Submessage {
	return Submessage{Format: FormatGeneric, Subformat: ext, Content: c}
}

// ErrorText is the legacy error/text part that AG2 reads, e.g.
// ErrorText(prompt).WithLabel("INPUT_REQUIRED") asks its user for input.
func ErrorText(s string) Submessage {
	return Submessage{Format: FormatError, Subformat: "text", Content: TextContent(s)}
}
