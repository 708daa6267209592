package nlip

import "strings"

// The helpers here implement ECMA-430 §6.2. They look at the top level too,
// because the standard calls it the first submessage and nlip_sdk can make
// a whole message out of one token.

// IsToken reports whether p has format token.
func IsToken(p Submessage) bool { return equalFoldASCII(p.Format, FormatToken) }

// IsConversationToken reports whether p is a conversation token: its
// subformat starts with "conversation", in any case (nlip_sdk matches by
// prefix too, so "conversation-id" counts).
func IsConversationToken(p Submessage) bool {
	return IsToken(p) && hasPrefixFoldASCII(p.Subformat, TokenConversation)
}

// IsAuthenticationToken reports whether p is an authentication token: its
// subformat starts with "authentication" (ECMA-430) or "authorization"
// (nlip_sdk), in any case. Such tokens are credentials: never persist,
// log or forward them.
func IsAuthenticationToken(p Submessage) bool {
	return IsToken(p) && (hasPrefixFoldASCII(p.Subformat, TokenAuthentication) ||
		hasPrefixFoldASCII(p.Subformat, TokenAuthorization))
}

// Tokens returns the token parts of m in order, the top level first.
func (m *Message) Tokens() []Submessage { return m.parts(IsToken) }

// ConversationTokens returns m's conversation tokens in order.
func (m *Message) ConversationTokens() []Submessage { return m.parts(IsConversationToken) }

// AuthenticationTokens returns m's authentication tokens in order.
func (m *Message) AuthenticationTokens() []Submessage { return m.parts(IsAuthenticationToken) }

func (m *Message) parts(match func(Submessage) bool) []Submessage {
	if m == nil {
		return nil
	}
	var out []Submessage
	if top := m.first(); match(top) {
		out = append(out, top)
	}
	for _, s := range m.Submessages {
		if match(s) {
			out = append(out, s)
		}
	}
	return out
}

// WithoutAuthenticationTokens returns a copy of m without its
// authentication tokens, and the tokens removed. It is what may be stored
// or forwarded. A top level that is itself an authentication token cannot
// be removed (a message must have one), so its content is blanked and the
// original is returned among the removed tokens.
func (m *Message) WithoutAuthenticationTokens() (*Message, []Submessage) {
	if m == nil {
		return nil, nil
	}
	out := m.Clone()
	var removed []Submessage
	if top := m.first(); IsAuthenticationToken(top) {
		removed = append(removed, top)
		out.Content = TextContent("")
	}
	kept := out.Submessages[:0]
	for _, s := range out.Submessages {
		if IsAuthenticationToken(s) {
			removed = append(removed, s)
			continue
		}
		kept = append(kept, s)
	}
	if len(kept) == 0 {
		kept = nil
	}
	out.Submessages = kept
	return out, removed
}

// EchoTokens adds to resp every token of req that resp does not already
// carry with the same format, subformat and content: the echo rule of
// ECMA-430 §6.2 ("the same submessage with the exact same format,
// subformat and content"). Skipping tokens this end-point created itself,
// which the rule exempts, is the caller's business.
func EchoTokens(req, resp *Message) {
	if req == nil {
		return
	}
	EchoTokenParts(req.Tokens(), resp)
}

// EchoTokenParts is EchoTokens for tokens already taken from a request
// (Tokens, TokensOfJSON, TokensOfCBOR); parts that are not tokens are
// skipped.
func EchoTokenParts(tokens []Submessage, resp *Message) {
	if resp == nil {
		return
	}
	for _, t := range tokens {
		if IsToken(t) && !resp.hasToken(t) {
			resp.Submessages = append(resp.Submessages, t)
		}
	}
}

// validTokens are the parts of read that are tokens and valid by
// themselves, with their format normalised.
func validTokens(read []Submessage, lim Limits) []Submessage {
	var out []Submessage
	for _, p := range read {
		if !IsToken(p) || checkField(p.Label, "", lim) != nil || checkPart(&p, 0, lim, false) != nil {
			continue
		}
		out = append(out, p)
	}
	return out
}

func (m *Message) hasToken(t Submessage) bool {
	for _, p := range m.Tokens() {
		if p.Subformat == t.Subformat && p.Content == t.Content {
			return true
		}
	}
	return false
}

// FindLabel returns the first submessage whose label matches, without
// regard to case (ECMA-430 §5 makes case irrelevant to field values).
func (m *Message) FindLabel(label string) (Submessage, bool) {
	if m == nil {
		return Submessage{}, false
	}
	for _, s := range m.Submessages {
		if strings.EqualFold(s.Label, label) {
			return s, true
		}
	}
	return Submessage{}, false
}

// ExtractText joins, with single spaces, the text content of every text
// part in language lang (compared without regard to case), the top level
// first; "" when there is none. It is nlip_sdk's extract_text, which AG2
// uses to read a reply: note that "english" does not match "en-US".
func (m *Message) ExtractText(lang string) string {
	var texts []string
	for _, p := range m.parts(func(p Submessage) bool {
		return equalFoldASCII(p.Format, FormatText) && strings.EqualFold(p.Subformat, lang)
	}) {
		if s, ok := p.Content.Text(); ok {
			texts = append(texts, s)
		}
	}
	return strings.Join(texts, " ")
}
