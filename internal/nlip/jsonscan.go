package nlip

import (
	"errors"
	"strconv"
	"unicode/utf16"
	"unicode/utf8"
)

// jsonScanner is a strict RFC 8259 reader over one byte slice. It exists
// instead of encoding/json because NLIP needs what the standard library
// cannot give cheaply: case-insensitive field names with duplicate
// detection, document-order error reporting, a nesting bound per content
// value, rejection of invalid UTF-8 and lone surrogates (RFC 7493), and raw
// spans of values so content can be canonicalised without a second decode.
//
// It never allocates while scanning; values are returned as spans of data.
type jsonScanner struct {
	data []byte
	pos  int
}

// errTooDeep is returned when nesting exceeds the caller's bound; callers
// turn it into CodeTooDeep with their pointer.
var errTooDeep = errors.New("nesting too deep")

func (s *jsonScanner) skipSpace() {
	for s.pos < len(s.data) {
		switch s.data[s.pos] {
		case ' ', '\t', '\n', '\r':
			s.pos++
		default:
			return
		}
	}
}

// peek returns the byte at the cursor, 0 at the end of input.
func (s *jsonScanner) peek() byte {
	if s.pos < len(s.data) {
		return s.data[s.pos]
	}
	return 0
}

func (s *jsonScanner) syntaxError(what string) error {
	if s.pos >= len(s.data) {
		return errors.New("unexpected end of JSON input, expected " + what)
	}
	return errors.New("invalid JSON at byte " + strconv.Itoa(s.pos) + ", expected " + what)
}

// expect consumes byte c after optional whitespace.
func (s *jsonScanner) expect(c byte, what string) error {
	s.skipSpace()
	if s.peek() != c {
		return s.syntaxError(what)
	}
	s.pos++
	return nil
}

// scanString reads a string at the cursor (which must be '"') and returns
// the span of its body, between the quotes, and whether it holds escapes.
// Escapes, control characters and UTF-8 are all checked here, so
// decodeJSONString can trust the span.
func (s *jsonScanner) scanString() (start, end int, escaped bool, err error) {
	if s.peek() != '"' {
		return 0, 0, false, s.syntaxError("a string")
	}
	s.pos++
	start = s.pos
	data := s.data
	for s.pos < len(data) {
		c := data[s.pos]
		switch {
		case c == '"':
			end = s.pos
			s.pos++
			return start, end, escaped, nil
		case c == '\\':
			escaped = true
			if err := s.scanEscape(); err != nil {
				return 0, 0, false, err
			}
		case c < 0x20:
			return 0, 0, false, errors.New("control character in JSON string at byte " + strconv.Itoa(s.pos))
		case c < utf8.RuneSelf:
			s.pos++
		default:
			r, size := utf8.DecodeRune(data[s.pos:])
			if r == utf8.RuneError && size == 1 {
				return 0, 0, false, errors.New("invalid UTF-8 in JSON string at byte " + strconv.Itoa(s.pos))
			}
			s.pos += size
		}
	}
	return 0, 0, false, errors.New("unterminated JSON string")
}

// scanEscape checks one escape sequence at the cursor ('\\'). A \u escape
// of a high surrogate must be followed by one of a low surrogate; a lone
// surrogate has no UTF-8 form, so accepting it would make the text lossy.
func (s *jsonScanner) scanEscape() error {
	if s.pos+1 >= len(s.data) {
		return errors.New("unterminated JSON string")
	}
	switch s.data[s.pos+1] {
	case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
		s.pos += 2
		return nil
	case 'u':
	default:
		return errors.New("invalid escape in JSON string at byte " + strconv.Itoa(s.pos))
	}
	r, ok := hex4(s.data, s.pos+2)
	if !ok {
		return errors.New("invalid \\u escape in JSON string at byte " + strconv.Itoa(s.pos))
	}
	s.pos += 6
	switch {
	case r >= 0xDC00 && r <= 0xDFFF:
		return errors.New("lone low surrogate in JSON string at byte " + strconv.Itoa(s.pos-6))
	case r >= 0xD800 && r <= 0xDBFF:
		if s.pos+1 >= len(s.data) || s.data[s.pos] != '\\' || s.data[s.pos+1] != 'u' {
			return errors.New("lone high surrogate in JSON string at byte " + strconv.Itoa(s.pos-6))
		}
		low, ok := hex4(s.data, s.pos+2)
		if !ok || low < 0xDC00 || low > 0xDFFF {
			return errors.New("invalid surrogate pair in JSON string at byte " + strconv.Itoa(s.pos-6))
		}
		s.pos += 6
	}
	return nil
}

// hex4 parses the four hex digits at data[i:].
func hex4(data []byte, i int) (rune, bool) {
	if i+4 > len(data) {
		return 0, false
	}
	var r rune
	for _, c := range data[i : i+4] {
		switch {
		case c >= '0' && c <= '9':
			r = r<<4 | rune(c-'0')
		case c >= 'a' && c <= 'f':
			r = r<<4 | rune(c-'a'+10)
		case c >= 'A' && c <= 'F':
			r = r<<4 | rune(c-'A'+10)
		default:
			return 0, false
		}
	}
	return r, true
}

// decodeJSONString turns a span checked by scanString into its text.
func decodeJSONString(body []byte, escaped bool) string {
	if !escaped {
		return string(body)
	}
	return string(appendUnescaped(make([]byte, 0, len(body)), body))
}

// appendUnescaped appends the text of a checked string body.
func appendUnescaped(out, body []byte) []byte {
	for i := 0; i < len(body); {
		c := body[i]
		if c != '\\' {
			out = append(out, c)
			i++
			continue
		}
		switch body[i+1] {
		case 'b':
			out = append(out, '\b')
		case 'f':
			out = append(out, '\f')
		case 'n':
			out = append(out, '\n')
		case 'r':
			out = append(out, '\r')
		case 't':
			out = append(out, '\t')
		case 'u':
			r, _ := hex4(body, i+2)
			if utf16.IsSurrogate(r) {
				low, _ := hex4(body, i+8)
				r = utf16.DecodeRune(r, low)
				i += 6
			}
			out = utf8.AppendRune(out, r)
			i += 6
			continue
		default: // '"', '\\', '/'
			out = append(out, body[i+1])
		}
		i += 2
	}
	return out
}

// scanNumber reads a number at the cursor and returns its span.
func (s *jsonScanner) scanNumber() (start, end int, err error) {
	data := s.data
	start = s.pos
	i := s.pos
	if i < len(data) && data[i] == '-' {
		i++
	}
	switch {
	case i < len(data) && data[i] == '0':
		i++
	case i < len(data) && data[i] >= '1' && data[i] <= '9':
		for i < len(data) && isDigit(data[i]) {
			i++
		}
	default:
		s.pos = i
		return 0, 0, s.syntaxError("a digit")
	}
	if i < len(data) && data[i] == '.' {
		i++
		if i >= len(data) || !isDigit(data[i]) {
			s.pos = i
			return 0, 0, s.syntaxError("a digit after the decimal point")
		}
		for i < len(data) && isDigit(data[i]) {
			i++
		}
	}
	if i < len(data) && (data[i] == 'e' || data[i] == 'E') {
		i++
		if i < len(data) && (data[i] == '+' || data[i] == '-') {
			i++
		}
		if i >= len(data) || !isDigit(data[i]) {
			s.pos = i
			return 0, 0, s.syntaxError("a digit in the exponent")
		}
		for i < len(data) && isDigit(data[i]) {
			i++
		}
	}
	s.pos = i
	return start, i, nil
}

func isDigit(c byte) bool { return c >= '0' && c <= '9' }

// scanLiteral reads true, false or null at the cursor.
func (s *jsonScanner) scanLiteral() (start, end int, err error) {
	rest := s.data[s.pos:]
	for _, lit := range [...]string{"true", "false", "null"} {
		if len(rest) >= len(lit) && string(rest[:len(lit)]) == lit {
			start = s.pos
			s.pos += len(lit)
			return start, s.pos, nil
		}
	}
	return 0, 0, s.syntaxError("a JSON value")
}

// skipValue checks and skips one value at the cursor; depth is the nesting
// of the value's container (0 for a field value), maxDepth the deepest
// array/object level allowed.
func (s *jsonScanner) skipValue(depth, maxDepth int) error {
	s.skipSpace()
	switch c := s.peek(); {
	case c == '"':
		_, _, _, err := s.scanString()
		return err
	case c == '{':
		return s.skipContainer('}', depth+1, maxDepth)
	case c == '[':
		return s.skipContainer(']', depth+1, maxDepth)
	case c == '-' || isDigit(c):
		_, _, err := s.scanNumber()
		return err
	default:
		_, _, err := s.scanLiteral()
		return err
	}
}

// skipContainer skips an object (closer '}') or array (closer ']').
func (s *jsonScanner) skipContainer(closer byte, depth, maxDepth int) error {
	if depth > maxDepth {
		return errTooDeep
	}
	s.pos++ // '{' or '['
	s.skipSpace()
	if s.peek() == closer {
		s.pos++
		return nil
	}
	for {
		if closer == '}' {
			s.skipSpace()
			if _, _, _, err := s.scanString(); err != nil {
				return err
			}
			if err := s.expect(':', "':'"); err != nil {
				return err
			}
		}
		if err := s.skipValue(depth, maxDepth); err != nil {
			return err
		}
		s.skipSpace()
		switch s.peek() {
		case ',':
			s.pos++
		case closer:
			s.pos++
			return nil
		default:
			return s.syntaxError("',' or '" + string(closer) + "'")
		}
	}
}
