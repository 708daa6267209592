package nlip

// Message is one NLIP message (ECMA-430 §5): the first submessage's fields
// at the top level, plus an ordered list of submessages.
//
// Decoding normalises the enumerated values: Format is one of the Format
// constants and MessageType "control" (any case) becomes
// MessageTypeControl. Every other value, Subformat included, keeps the
// sender's spelling, because peers echo and compare it (the token echo rule
// wants the exact subformat back). Compare subformats with strings.EqualFold
// or the helpers in this package.
type Message struct {
	// MessageType is "" or "control" for the standard's two kinds; any
	// other value ("Request", "Error", ...) is kept and means a data
	// message.
	MessageType string
	Format      string
	Subformat   string
	Content     Content
	Submessages []Submessage
}

// Submessage is one element of Message.Submessages. Label is optional; the
// standard's examples use it for a role or a sequence number, AG2 for the
// kind of payload (ag2_context, INPUT_REQUIRED, ...).
type Submessage struct {
	Label     string
	Format    string
	Subformat string
	Content   Content
}

// IsControl reports whether m is a control message (ECMA-430 §6.3).
func (m *Message) IsControl() bool {
	return m != nil && equalFoldASCII(m.MessageType, MessageTypeControl)
}

// Equal reports whether two messages hold the same fields, submessages and
// content. Decoded messages are normalised, so any two encodings of one
// message (JSON or CBOR, any key case or order) decode to Equal values.
func (m *Message) Equal(o *Message) bool {
	if m == nil || o == nil {
		return m == o
	}
	if m.MessageType != o.MessageType || m.Format != o.Format ||
		m.Subformat != o.Subformat || m.Content != o.Content ||
		len(m.Submessages) != len(o.Submessages) {
		return false
	}
	for i := range m.Submessages {
		if m.Submessages[i] != o.Submessages[i] {
			return false
		}
	}
	return true
}

// Clone returns a copy of m that shares nothing mutable with it (Content is
// immutable, so only the submessage slice is copied).
func (m *Message) Clone() *Message {
	if m == nil {
		return nil
	}
	c := *m
	if m.Submessages != nil {
		c.Submessages = append([]Submessage(nil), m.Submessages...)
	}
	return &c
}

// first returns the top-level fields as a Submessage (without a label),
// which is how ECMA-430 describes them ("the first submessage"); the
// validation and token rules treat both alike through it.
func (m *Message) first() Submessage {
	return Submessage{Format: m.Format, Subformat: m.Subformat, Content: m.Content}
}

// allParts is the top level (as first returns it) and every submessage.
func (m *Message) allParts() []Submessage {
	return append([]Submessage{m.first()}, m.Submessages...)
}
