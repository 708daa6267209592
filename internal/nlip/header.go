package nlip

import (
	"errors"
	"fmt"

	nlipv1 "github.com/alpd-project/alpd/gen/alp/nlip/v1"
)

// ToHeader maps m to the NLIP header of an ALP envelope: messagetype,
// format and subformat, the submessages' labels in order, and every
// content in parts. It is lossless (FromHeader gives back an Equal message)
// except that authentication tokens are dropped first (see
// WithoutAuthenticationTokens): the header is stored and forwarded, and
// credentials must be neither. m should be valid (decoded or validated);
// ToHeader does not check it. The deprecated conversation_token and
// sealed_parts (ingress seals parts on streams) are left unset.
func ToHeader(m *Message) *nlipv1.NlipHeader {
	if m == nil {
		return nil
	}
	kept, _ := m.WithoutAuthenticationTokens()
	h := &nlipv1.NlipHeader{
		Messagetype: wireMessageType(kept.MessageType),
		Format:      lowerFormat(kept.Format),
		Subformat:   kept.Subformat,
		Parts:       &nlipv1.NlipParts{Content: protoContent(kept.Content)},
	}
	if n := len(kept.Submessages); n > 0 {
		h.Labels = make([]string, n)
		h.Parts.Submessages = make([]*nlipv1.Submessage, n)
	}
	for i, s := range kept.Submessages {
		h.Labels[i] = s.Label
		h.Parts.Submessages[i] = &nlipv1.Submessage{
			Label:     s.Label,
			Format:    lowerFormat(s.Format),
			Subformat: s.Subformat,
			Content:   protoContent(s.Content),
		}
	}
	return h
}

// ContentResolver returns the content a sender moved out of a submessage
// into the envelope field named movedTo (for example "body"), so FromHeader
// can put it back. See MoveContent.
type ContentResolver func(movedTo string) (Content, error)

// MoveContent takes the content of submessage index out of h, leaving
// moved_to = movedTo in its place, and returns it for the caller to store
// in that envelope field. FromHeader restores it through a ContentResolver.
// This keeps a typed payload (an ALP send's body) in one place instead of
// two, without losing the NLIP rendering.
func MoveContent(h *nlipv1.NlipHeader, index int, movedTo string) (Content, error) {
	subs := h.GetParts().GetSubmessages()
	if index < 0 || index >= len(subs) {
		return Content{}, fmt.Errorf("nlip: move content: no submessage %d (header has %d)", index, len(subs))
	}
	if movedTo == "" {
		return Content{}, errors.New("nlip: move content: empty destination")
	}
	s := subs[index]
	if s.GetMovedTo() != "" {
		return Content{}, fmt.Errorf("nlip: move content: submessage %d already moved to %q", index, s.GetMovedTo())
	}
	c, err := contentOfProto(s.GetContent())
	if err != nil {
		return Content{}, fmt.Errorf("nlip: move content of submessage %d: %w", index, err)
	}
	s.Content, s.MovedTo = nil, movedTo
	return c, nil
}

// FromHeader rebuilds the message ToHeader mapped. A submessage whose
// content was moved (moved_to set) gets it from resolve; resolve may be nil
// when nothing was moved. Sealed parts must be unsealed into h.Parts first.
// The result is validated against the standard's rules (not against
// Limits, which the message already passed at ingress); a failure is an
// *Error, resolver and shape problems are wrapped errors.
func FromHeader(h *nlipv1.NlipHeader, resolve ContentResolver) (*Message, error) {
	if h == nil {
		return nil, errors.New("nlip: no NLIP header")
	}
	parts := h.GetParts()
	if parts == nil {
		if h.GetSealedParts() != nil {
			return nil, errors.New("nlip: NLIP header parts are sealed; unseal them into parts first")
		}
		return nil, errors.New("nlip: NLIP header has no parts")
	}
	subs := parts.GetSubmessages()
	if len(h.GetLabels()) != len(subs) {
		return nil, fmt.Errorf("nlip: NLIP header has %d labels for %d submessages", len(h.GetLabels()), len(subs))
	}
	top, err := contentOfProto(parts.GetContent())
	if err != nil {
		return nil, fmt.Errorf("nlip: NLIP header content: %w", err)
	}
	// Normalise as a decoder would, in case the header was written by
	// something other than ToHeader.
	m := &Message{
		MessageType: wireMessageType(h.GetMessagetype()),
		Format:      lowerFormat(h.GetFormat()),
		Subformat:   h.GetSubformat(),
		Content:     top,
	}
	if len(subs) > 0 {
		m.Submessages = make([]Submessage, len(subs))
	}
	for i, s := range subs {
		if s.GetLabel() != h.GetLabels()[i] {
			return nil, fmt.Errorf("nlip: NLIP header label %d is %q but submessage %d says %q",
				i, h.GetLabels()[i], i, s.GetLabel())
		}
		c, err := subContentOfProto(s, resolve)
		if err != nil {
			return nil, fmt.Errorf("nlip: NLIP header submessage %d: %w", i, err)
		}
		m.Submessages[i] = Submessage{Label: s.GetLabel(), Format: lowerFormat(s.GetFormat()), Subformat: s.GetSubformat(), Content: c}
	}
	if e := validateMessage(m, unlimited(), false); e != nil {
		return nil, e
	}
	return m, nil
}

func subContentOfProto(s *nlipv1.Submessage, resolve ContentResolver) (Content, error) {
	if s.GetMovedTo() == "" {
		return contentOfProto(s.GetContent())
	}
	if s.GetContent().GetValue() != nil {
		return Content{}, fmt.Errorf("content is both present and moved to %q", s.GetMovedTo())
	}
	if resolve == nil {
		return Content{}, fmt.Errorf("content was moved to %q and no resolver was given", s.GetMovedTo())
	}
	c, err := resolve(s.GetMovedTo())
	if err != nil {
		return Content{}, fmt.Errorf("restore content moved to %q: %w", s.GetMovedTo(), err)
	}
	return c, nil
}

func protoContent(c Content) *nlipv1.Content {
	switch c.kind {
	case KindText:
		return &nlipv1.Content{Value: &nlipv1.Content_Text{Text: c.data}}
	case KindBinary:
		return &nlipv1.Content{Value: &nlipv1.Content_Binary{Binary: []byte(c.data)}}
	case KindJSON:
		return &nlipv1.Content{Value: &nlipv1.Content_Json{Json: []byte(c.data)}}
	}
	return nil
}

// contentOfProto reads a proto Content; JSON is re-canonicalised, since the
// header may come from another broker.
func contentOfProto(c *nlipv1.Content) (Content, error) {
	switch v := c.GetValue().(type) {
	case *nlipv1.Content_Text:
		return TextContent(v.Text), nil
	case *nlipv1.Content_Binary:
		return BinaryContent(v.Binary), nil
	case *nlipv1.Content_Json:
		jc, err := contentFromJSON(v.Json, unlimited().MaxContentDepth)
		if err != nil {
			return Content{}, fmt.Errorf("json content: %w", err)
		}
		return jc, nil
	}
	return Content{}, nil
}
