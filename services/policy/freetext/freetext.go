// Package freetext is the hard rule on free-text fields: off unless the
// recipient opted in, at most 280 characters, and always measured and
// scanned in one normal form so that the text a person reads, the text the
// cap counts and the text the DLP scanner sees are the same.
//
// The normal form is: invisible format characters removed (zero-width,
// bidirectional controls, tag characters and every other Unicode Cf
// character, plus variation selectors), then NFKC. Stripping comes first
// because a zero-width character between a letter and a combining mark
// would otherwise block composition; NFKC maps no character to a stripped
// one, so the order leaves nothing to strip afterwards (the fuzz test holds
// Normalize idempotent). NFKC folds fullwidth and mathematical digits and
// letters to ASCII, so "４１１１…" is scanned as "4111…".
//
// Characters are counted in Unicode code points, which is what JSON Schema's
// maxLength counts, so the schema cap and this cap agree.
package freetext

import (
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"

	"golang.org/x/text/unicode/norm"
)

// MaxRunes is the hard cap on a free-text field, in code points after
// normalization. A schema may set a lower maxLength, never a higher one.
const MaxRunes = 280

// Stripped counts what Normalize removed, by kind, so a decision or a ledger
// entry can say "3 zero-width characters removed" without the text.
type Stripped struct {
	ZeroWidth int `json:"zero_width,omitempty"` // U+200B–U+200D, U+2060, U+FEFF
	Bidi      int `json:"bidi,omitempty"`       // U+202A–U+202E, U+2066–U+2069, U+200E, U+200F, U+061C
	Tag       int `json:"tag,omitempty"`        // U+E0000–U+E007F
	// Other is every other Cf character (soft hyphen, U+180E, the Arabic
	// number signs, interlinear annotation, …) and variation selectors
	// (U+FE00–U+FE0F, U+E0100–U+E01EF): invisible, so they could pad the
	// cap's count or split a secret, and a reader loses nothing by them.
	Other int `json:"other,omitempty"`
}

// Total is the number of characters removed.
func (s Stripped) Total() int { return s.ZeroWidth + s.Bidi + s.Tag + s.Other }

// Normalized is free text in the normal form. Only Normalize builds one, so
// a function taking a Normalized (the DLP scanner does) cannot be handed
// raw text by mistake.
type Normalized struct {
	text     string
	runes    int
	stripped Stripped
	invalid  bool
}

// Text is the normalized text: what the cap counts, the scanner scans and
// the recipient receives.
func (n Normalized) Text() string { return n.text }

// Runes is the number of code points in Text.
func (n Normalized) Runes() int { return n.runes }

// Stripped says what was removed.
func (n Normalized) Stripped() Stripped { return n.stripped }

// InvalidUTF8 reports whether the input had bytes that are not UTF-8; they
// became U+FFFD in Text, and Check refuses such input.
func (n Normalized) InvalidUTF8() bool { return n.invalid }

// Normalize strips invisible format characters and applies NFKC.
func Normalize(s string) Normalized {
	var n Normalized
	if !utf8.ValidString(s) {
		n.invalid = true
		s = strings.ToValidUTF8(s, "\uFFFD")
	}
	var b strings.Builder
	b.Grow(len(s))
	for _, r := range s {
		if k := stripKind(r); k != keep {
			n.stripped.add(k)
			continue
		}
		b.WriteRune(r)
	}
	n.text = norm.NFKC.String(b.String())
	n.runes = utf8.RuneCountInString(n.text)
	return n
}

type kind int

const (
	keep kind = iota
	zeroWidth
	bidi
	tag
	other
)

func (s *Stripped) add(k kind) {
	switch k {
	case zeroWidth:
		s.ZeroWidth++
	case bidi:
		s.Bidi++
	case tag:
		s.Tag++
	case other:
		s.Other++
	}
}

func stripKind(r rune) kind {
	switch {
	case r < 0x00AD:
		return keep // fast path: ASCII and Latin-1 up to the soft hyphen
	case r >= 0x200B && r <= 0x200D, r == 0x2060, r == 0xFEFF:
		return zeroWidth
	case r >= 0x202A && r <= 0x202E, r >= 0x2066 && r <= 0x2069, r == 0x200E, r == 0x200F, r == 0x061C:
		return bidi
	case r >= 0xE0000 && r <= 0xE007F:
		return tag
	case r >= 0xFE00 && r <= 0xFE0F, r >= 0xE0100 && r <= 0xE01EF:
		return other
	case unicode.Is(unicode.Cf, r):
		return other
	}
	return keep
}

// Code is a machine-readable reason a free-text value is refused.
type Code string

const (
	// CodeNotOptedIn: the recipient has not opted in to free text.
	CodeNotOptedIn Code = "freetext_not_opted_in"
	// CodeTooLong: more code points than the cap after normalization.
	CodeTooLong Code = "freetext_too_long"
	// CodeInvalidUTF8: the value is not UTF-8.
	CodeInvalidUTF8 Code = "freetext_invalid_utf8"
	// CodeControl: a C0 or C1 control character other than tab, line feed
	// and carriage return. Such characters drive terminals (ESC sequences)
	// and have no place in a message a person reads.
	CodeControl Code = "freetext_control_character"
)

// Error says why a free-text value was refused. It never carries the text.
type Error struct {
	Code Code `json:"code"`
	// Message is for people: what was wrong, with numbers, never the text.
	Message string `json:"message"`
	// Offset is the byte offset into the normalized text where the problem
	// is (the first character past the cap, the control character), or -1.
	Offset int `json:"offset"`
}

func (e *Error) Error() string { return string(e.Code) + ": " + e.Message }

// Check normalizes s and applies the hard rule: refused unless optedIn,
// refused if not UTF-8, if it holds control characters, or if it is longer
// than max code points after normalization. max ≤ 0 or above MaxRunes means
// MaxRunes, so a schema can only lower the cap. The Normalized value is
// returned even on refusal, for Stripped and Runes in the decision.
func Check(s string, optedIn bool, max int) (Normalized, error) {
	if max <= 0 || max > MaxRunes {
		max = MaxRunes
	}
	n := Normalize(s)
	if !optedIn {
		return n, &Error{Code: CodeNotOptedIn, Message: "the recipient does not accept free text", Offset: -1}
	}
	if n.invalid {
		return n, &Error{Code: CodeInvalidUTF8, Message: "free text is not valid UTF-8", Offset: -1}
	}
	count := 0
	for i, r := range n.text {
		if isControl(r) {
			return n, &Error{Code: CodeControl, Message: fmt.Sprintf("control character U+%04X at character %d", r, count+1), Offset: i}
		}
		count++
		if count > max {
			return n, &Error{Code: CodeTooLong, Message: fmt.Sprintf("free text has %d characters after normalization, the limit is %d", n.runes, max), Offset: i}
		}
	}
	return n, nil
}

func isControl(r rune) bool {
	if r == '\t' || r == '\n' || r == '\r' {
		return false
	}
	return r < 0x20 || (r >= 0x7F && r <= 0x9F)
}
