package nlip

import (
	"cmp"
	"errors"
	"slices"
	"strconv"
	"unicode/utf8"

	"github.com/gowebpki/jcs"
)

// canonicalizer writes RFC 8785 (JCS) canonical JSON while it checks the
// input, in one pass. gowebpki/jcs gives the same bytes (the tests and
// FuzzCanonicalJSON compare the two) but builds a tree with several
// allocations per value; NLIP content is canonicalised on every decode, so
// this version reuses its buffers and keeps only jcs's number formatting.
//
// Objects are written in document order and, if their keys were not already
// sorted, their members are permuted in place afterwards. A byte is moved
// once per enclosing unsorted object, so the cost is bounded by the size
// times Limits.MaxContentDepth.
type canonicalizer struct {
	members []member // open objects' members, innermost last
	scratch []byte   // copy of an object's body while it is permuted
}

// member is one written `"key":value` segment of an object being built.
type member struct {
	key        []byte // unescaped, for ordering and duplicate detection
	start, end int    // the segment in the output
}

// duplicateKeyError reports an object key given twice, which RFC 8785
// forbids (it cannot choose between the values).
type duplicateKeyError struct{ key string }

func (e *duplicateKeyError) Error() string {
	return "duplicate key " + strconv.Quote(e.key) + " in a JSON object"
}

// value canonicalises the value at the cursor, appending it to out. depth
// is the nesting of the value's container, maxDepth the deepest allowed.
func (cz *canonicalizer) value(s *jsonScanner, out []byte, depth, maxDepth int) ([]byte, error) {
	s.skipSpace()
	switch c := s.peek(); {
	case c == '"':
		start, end, escaped, err := s.scanString()
		if err != nil {
			return nil, err
		}
		return appendCanonicalStringBody(out, s.data[start:end], escaped), nil
	case c == '{':
		return cz.object(s, out, depth+1, maxDepth)
	case c == '[':
		return cz.array(s, out, depth+1, maxDepth)
	case c == '-' || isDigit(c):
		start, end, err := s.scanNumber()
		if err != nil {
			return nil, err
		}
		return appendCanonicalNumber(out, s.data[start:end])
	default:
		start, end, err := s.scanLiteral()
		if err != nil {
			return nil, err
		}
		return append(out, s.data[start:end]...), nil
	}
}

func (cz *canonicalizer) array(s *jsonScanner, out []byte, depth, maxDepth int) ([]byte, error) {
	if depth > maxDepth {
		return nil, errTooDeep
	}
	s.pos++
	out = append(out, '[')
	s.skipSpace()
	if s.peek() == ']' {
		s.pos++
		return append(out, ']'), nil
	}
	for {
		var err error
		if out, err = cz.value(s, out, depth, maxDepth); err != nil {
			return nil, err
		}
		s.skipSpace()
		switch s.peek() {
		case ',':
			s.pos++
			out = append(out, ',')
		case ']':
			s.pos++
			return append(out, ']'), nil
		default:
			return nil, s.syntaxError("',' or ']'")
		}
	}
}

func (cz *canonicalizer) object(s *jsonScanner, out []byte, depth, maxDepth int) ([]byte, error) {
	if depth > maxDepth {
		return nil, errTooDeep
	}
	s.pos++
	out = append(out, '{')
	s.skipSpace()
	if s.peek() == '}' {
		s.pos++
		return append(out, '}'), nil
	}
	base := len(cz.members)
	bodyStart := len(out)
	for {
		s.skipSpace()
		ks, ke, escaped, err := s.scanString()
		if err != nil {
			return nil, err
		}
		key := s.data[ks:ke]
		if escaped {
			key = appendUnescaped(nil, key)
		}
		segStart := len(out)
		out = appendCanonicalStringBody(out, s.data[ks:ke], escaped)
		if err := s.expect(':', "':'"); err != nil {
			return nil, err
		}
		out = append(out, ':')
		if out, err = cz.value(s, out, depth, maxDepth); err != nil {
			return nil, err
		}
		cz.members = append(cz.members, member{key: key, start: segStart, end: len(out)})
		s.skipSpace()
		if s.peek() == ',' {
			s.pos++
			out = append(out, ',')
			continue
		}
		if s.peek() != '}' {
			return nil, s.syntaxError("',' or '}'")
		}
		s.pos++
		break
	}
	out, err := cz.sortMembers(out, bodyStart, cz.members[base:])
	cz.members = cz.members[:base]
	if err != nil {
		return nil, err
	}
	return append(out, '}'), nil
}

// sortMembers puts an object's members (written from bodyStart on) in
// RFC 8785 order and rejects duplicate keys.
func (cz *canonicalizer) sortMembers(out []byte, bodyStart int, members []member) ([]byte, error) {
	sorted := true
	for i := 1; i < len(members); i++ {
		switch c := compareUTF16(members[i-1].key, members[i].key); {
		case c == 0:
			return nil, &duplicateKeyError{key: string(members[i].key)}
		case c > 0:
			sorted = false
		}
	}
	if sorted {
		return out, nil
	}
	slices.SortFunc(members, func(a, b member) int { return compareUTF16(a.key, b.key) })
	for i := 1; i < len(members); i++ {
		if compareUTF16(members[i-1].key, members[i].key) == 0 {
			return nil, &duplicateKeyError{key: string(members[i].key)}
		}
	}
	cz.scratch = append(cz.scratch[:0], out[bodyStart:]...)
	out = out[:bodyStart]
	for i, m := range members {
		if i > 0 {
			out = append(out, ',')
		}
		out = append(out, cz.scratch[m.start-bodyStart:m.end-bodyStart]...)
	}
	return out, nil
}

// compareUTF16 orders keys by their UTF-16 code units, as RFC 8785 §3.2.3
// requires. UTF-8 byte order equals code point order, which differs from
// UTF-16 order only between a supplementary character (a surrogate pair,
// 0xD800..) and a BMP character from U+E000 up, so only the first
// differing character needs decoding.
func compareUTF16[T ~string | ~[]byte](a, b T) int {
	i := 0
	for i < len(a) && i < len(b) && a[i] == b[i] {
		i++
	}
	if i == len(a) || i == len(b) {
		return cmp.Compare(len(a), len(b))
	}
	if a[i] < utf8.RuneSelf && b[i] < utf8.RuneSelf {
		return cmp.Compare(a[i], b[i])
	}
	for i > 0 && !utf8.RuneStart(a[i]) {
		i--
	}
	ra, _ := utf8.DecodeRune([]byte(a[i:]))
	rb, _ := utf8.DecodeRune([]byte(b[i:]))
	return cmp.Compare(utf16Key(ra), utf16Key(rb))
}

// utf16Key maps a rune to a number ordered like its UTF-16 code units: a
// BMP rune r is (r, 0), a supplementary one is (high, low) surrogate.
func utf16Key(r rune) uint32 {
	if r < 0x10000 {
		return uint32(r) << 16
	}
	r -= 0x10000
	return uint32(0xD800+(r>>10))<<16 | uint32(0xDC00+(r&0x3FF))
}

// appendCanonicalStringBody writes a checked string body (see
// scanString) as an RFC 8785 string. Without escapes the body is already
// canonical: it cannot hold '"', '\\' or control characters.
func appendCanonicalStringBody(out, body []byte, escaped bool) []byte {
	out = append(out, '"')
	if !escaped {
		out = append(out, body...)
	} else {
		out = appendEscaped(out, appendUnescaped(nil, body))
	}
	return append(out, '"')
}

// appendJSONString writes s (valid UTF-8) as an RFC 8785 string, which is
// also what EncodeJSON sends: only '"', '\\' and control characters are
// escaped, with the short forms where JSON has them.
func appendJSONString(out []byte, s string) []byte {
	out = append(out, '"')
	out = appendEscaped(out, s)
	return append(out, '"')
}

func appendEscaped[T ~string | ~[]byte](out []byte, s T) []byte {
	const hex = "0123456789abcdef"
	last := 0
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 0x20 && c != '"' && c != '\\' {
			continue
		}
		out = append(out, s[last:i]...)
		last = i + 1
		switch c {
		case '"', '\\':
			out = append(out, '\\', c)
		case '\b':
			out = append(out, '\\', 'b')
		case '\f':
			out = append(out, '\\', 'f')
		case '\n':
			out = append(out, '\\', 'n')
		case '\r':
			out = append(out, '\\', 'r')
		case '\t':
			out = append(out, '\\', 't')
		default:
			out = append(out, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xF])
		}
	}
	return append(out, s[last:]...)
}

// errNumberRange: RFC 8785 numbers are IEEE-754 doubles; 1e400 has none.
var errNumberRange = errors.New("number outside the range of an IEEE-754 double")

// appendCanonicalNumber writes a number literal checked by scanNumber in
// its ECMAScript form. Integers of up to 15 digits are exact doubles that
// ECMAScript prints as written (except -0), which is most real content and
// skips the float conversion.
func appendCanonicalNumber(out, lit []byte) ([]byte, error) {
	digits := lit
	if len(digits) > 0 && digits[0] == '-' {
		digits = digits[1:]
	}
	if len(digits) <= 15 && allDigits(digits) {
		if string(lit) == "-0" {
			return append(out, '0'), nil
		}
		return append(out, lit...), nil
	}
	f, err := strconv.ParseFloat(string(lit), 64)
	if err != nil {
		return nil, errNumberRange
	}
	return appendFloat(out, f)
}

// appendFloat writes a double in its ECMAScript (RFC 8785 §3.2.2.3) form.
func appendFloat(out []byte, f float64) ([]byte, error) {
	text, err := jcs.NumberToJSON(f)
	if err != nil {
		return nil, errNumberRange
	}
	return append(out, text...), nil
}

func allDigits(b []byte) bool {
	for _, c := range b {
		if !isDigit(c) {
			return false
		}
	}
	return len(b) > 0
}
