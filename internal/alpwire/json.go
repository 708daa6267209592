package alpwire

import (
	"strconv"
	"unicode/utf16"
	"unicode/utf8"
)

// MaxDepth bounds how deeply arrays and objects nest in any wire object
// (the body of an envelope included), so a parse never recurses without
// bound.
const MaxDepth = 32

// MaxSafeInteger is 2^53−1, the largest integer every JSON implementation
// (an IEEE double) holds exactly.
const MaxSafeInteger = 1<<53 - 1

// A strict JSON reader. encoding/json accepts duplicate keys (last wins),
// replaces invalid UTF-8 and lone surrogates with U+FFFD and reads 1e3 as
// an integer; each of those would let two implementations see different
// values under one signature, so the wire format refuses them, and only a
// parser of its own can tell where (pointer) and why (code).

type kind byte

const (
	kindObject kind = iota + 1
	kindArray
	kindString
	kindNumber
	kindBool
	kindNull
)

func (k kind) String() string {
	switch k {
	case kindObject:
		return "an object"
	case kindArray:
		return "an array"
	case kindString:
		return "a string"
	case kindNumber:
		return "a number"
	case kindBool:
		return "a boolean"
	default:
		return "null"
	}
}

// node is one parsed value with its span in the input, so signing input
// can be cut from the received bytes.
type node struct {
	kind       kind
	start, end int
	str        string // kindString
	num        int64  // kindNumber
	boolean    bool   // kindBool
	members    []member
	elems      []*node
}

type member struct {
	key   string
	start int // offset of the key's opening quote
	val   *node
}

// get returns the member named key, or nil.
func (n *node) get(key string) *node {
	for i := range n.members {
		if n.members[i].key == key {
			return n.members[i].val
		}
	}
	return nil
}

type parser struct {
	data []byte
	pos  int
}

// parseObject reads data as one JSON object under the wire rules. limit is
// the largest input accepted.
func parseObject(data []byte, limit int) (*node, *Error) {
	if len(data) > limit {
		return nil, newErr(CodeTooLarge, "", "input of "+strconv.Itoa(len(data))+" bytes is larger than "+strconv.Itoa(limit))
	}
	p := &parser{data: data}
	p.space()
	n, err := p.value("", 0)
	if err != nil {
		return nil, err
	}
	p.space()
	if p.pos != len(p.data) {
		return nil, p.syntax("", "data after the top-level value")
	}
	if n.kind != kindObject {
		return nil, newErr(CodeWrongType, "", "the top level is "+n.kind.String()+", not an object")
	}
	return n, nil
}

func (p *parser) syntax(ptr, what string) *Error {
	return newErr(CodeInvalidJSON, ptr, "malformed JSON at byte "+strconv.Itoa(p.pos)+": "+what)
}

func (p *parser) space() {
	for p.pos < len(p.data) {
		switch p.data[p.pos] {
		case ' ', '\t', '\n', '\r':
			p.pos++
		default:
			return
		}
	}
}

func (p *parser) value(ptr string, depth int) (*node, *Error) {
	if p.pos >= len(p.data) {
		return nil, p.syntax(ptr, "unexpected end of input")
	}
	start := p.pos
	switch c := p.data[p.pos]; {
	case c == '{':
		if depth >= MaxDepth {
			return nil, newErr(CodeTooDeep, ptr, "nested deeper than "+strconv.Itoa(MaxDepth))
		}
		return p.object(ptr, depth)
	case c == '[':
		if depth >= MaxDepth {
			return nil, newErr(CodeTooDeep, ptr, "nested deeper than "+strconv.Itoa(MaxDepth))
		}
		return p.array(ptr, depth)
	case c == '"':
		s, err := p.string(ptr)
		if err != nil {
			return nil, err
		}
		return &node{kind: kindString, start: start, end: p.pos, str: s}, nil
	case c == '-' || c >= '0' && c <= '9':
		return p.number(ptr)
	default:
		for _, lit := range [...]struct {
			text string
			n    node
		}{{"true", node{kind: kindBool, boolean: true}}, {"false", node{kind: kindBool}}, {"null", node{kind: kindNull}}} {
			if len(p.data)-p.pos >= len(lit.text) && string(p.data[p.pos:p.pos+len(lit.text)]) == lit.text {
				p.pos += len(lit.text)
				n := lit.n
				n.start, n.end = start, p.pos
				return &n, nil
			}
		}
		return nil, p.syntax(ptr, "not a JSON value")
	}
}

func (p *parser) object(ptr string, depth int) (*node, *Error) {
	n := &node{kind: kindObject, start: p.pos}
	p.pos++ // {
	p.space()
	if p.pos < len(p.data) && p.data[p.pos] == '}' {
		p.pos++
		n.end = p.pos
		return n, nil
	}
	for {
		p.space()
		if p.pos >= len(p.data) || p.data[p.pos] != '"' {
			return nil, p.syntax(ptr, "expected a member name")
		}
		kstart := p.pos
		key, err := p.string(ptr)
		if err != nil {
			return nil, err
		}
		kptr := child(ptr, key)
		if n.get(key) != nil {
			return nil, newErr(CodeDuplicateKey, kptr, "the key "+strconv.Quote(key)+" appears twice")
		}
		p.space()
		if p.pos >= len(p.data) || p.data[p.pos] != ':' {
			return nil, p.syntax(kptr, "expected ':'")
		}
		p.pos++
		p.space()
		v, err := p.value(kptr, depth+1)
		if err != nil {
			return nil, err
		}
		n.members = append(n.members, member{key: key, start: kstart, val: v})
		p.space()
		if p.pos >= len(p.data) {
			return nil, p.syntax(ptr, "unterminated object")
		}
		switch p.data[p.pos] {
		case ',':
			p.pos++
		case '}':
			p.pos++
			n.end = p.pos
			return n, nil
		default:
			return nil, p.syntax(ptr, "expected ',' or '}'")
		}
	}
}

func (p *parser) array(ptr string, depth int) (*node, *Error) {
	n := &node{kind: kindArray, start: p.pos}
	p.pos++ // [
	p.space()
	if p.pos < len(p.data) && p.data[p.pos] == ']' {
		p.pos++
		n.end = p.pos
		return n, nil
	}
	for {
		p.space()
		v, err := p.value(index(ptr, len(n.elems)), depth+1)
		if err != nil {
			return nil, err
		}
		n.elems = append(n.elems, v)
		p.space()
		if p.pos >= len(p.data) {
			return nil, p.syntax(ptr, "unterminated array")
		}
		switch p.data[p.pos] {
		case ',':
			p.pos++
		case ']':
			p.pos++
			n.end = p.pos
			return n, nil
		default:
			return nil, p.syntax(ptr, "expected ',' or ']'")
		}
	}
}

// string reads a JSON string starting at its opening quote and returns its
// value; invalid UTF-8 and lone surrogate escapes are refused.
func (p *parser) string(ptr string) (string, *Error) {
	p.pos++ // "
	start := p.pos
	var out []byte // nil until the first escape
	for {
		if p.pos >= len(p.data) {
			return "", p.syntax(ptr, "unterminated string")
		}
		c := p.data[p.pos]
		switch {
		case c == '"':
			var s string
			if out == nil {
				s = string(p.data[start:p.pos])
			} else {
				s = string(append(out, p.data[start:p.pos]...))
			}
			p.pos++
			return s, nil
		case c < 0x20:
			return "", p.syntax(ptr, "control character in a string")
		case c == '\\':
			out = append(out, p.data[start:p.pos]...)
			var err *Error
			if out, err = p.escape(ptr, out); err != nil {
				return "", err
			}
			start = p.pos
		case c < utf8.RuneSelf:
			p.pos++
		default:
			r, size := utf8.DecodeRune(p.data[p.pos:])
			if r == utf8.RuneError && size == 1 {
				return "", newErr(CodeInvalidUTF8, ptr, "invalid UTF-8 at byte "+strconv.Itoa(p.pos))
			}
			p.pos += size
		}
	}
}

// escape reads one escape sequence at p.pos (the backslash) and appends
// what it stands for to out.
func (p *parser) escape(ptr string, out []byte) ([]byte, *Error) {
	if p.pos+1 >= len(p.data) {
		return nil, p.syntax(ptr, "unterminated escape")
	}
	c := p.data[p.pos+1]
	p.pos += 2
	switch c {
	case '"', '\\', '/':
		return append(out, c), nil
	case 'b':
		return append(out, '\b'), nil
	case 'f':
		return append(out, '\f'), nil
	case 'n':
		return append(out, '\n'), nil
	case 'r':
		return append(out, '\r'), nil
	case 't':
		return append(out, '\t'), nil
	case 'u':
	default:
		return nil, p.syntax(ptr, "invalid escape")
	}
	r, ok := p.hex4()
	if !ok {
		return nil, p.syntax(ptr, "invalid \\u escape")
	}
	if utf16.IsSurrogate(r) {
		var r2 rune = -1
		if r < 0xdc00 && p.pos+1 < len(p.data) && p.data[p.pos] == '\\' && p.data[p.pos+1] == 'u' {
			save := p.pos
			p.pos += 2
			var ok2 bool
			if r2, ok2 = p.hex4(); !ok2 {
				return nil, p.syntax(ptr, "invalid \\u escape")
			}
			if r2 < 0xdc00 || r2 > 0xdfff {
				p.pos = save
				r2 = -1
			}
		}
		if r2 < 0 {
			return nil, newErr(CodeInvalidUTF8, ptr, "a lone surrogate escape (no UTF-8 text holds it)")
		}
		r = utf16.DecodeRune(r, r2)
	}
	return utf8.AppendRune(out, r), nil
}

func (p *parser) hex4() (rune, bool) {
	if len(p.data)-p.pos < 4 {
		return 0, false
	}
	var r rune
	for _, c := range p.data[p.pos : p.pos+4] {
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
	p.pos += 4
	return r, true
}

// number reads a JSON number; only integers within ±MaxSafeInteger pass.
func (p *parser) number(ptr string) (*node, *Error) {
	start := p.pos
	if p.data[p.pos] == '-' {
		p.pos++
	}
	switch {
	case p.pos < len(p.data) && p.data[p.pos] == '0':
		p.pos++
	case p.pos < len(p.data) && p.data[p.pos] >= '1' && p.data[p.pos] <= '9':
		for p.pos < len(p.data) && p.data[p.pos] >= '0' && p.data[p.pos] <= '9' {
			p.pos++
		}
	default:
		return nil, p.syntax(ptr, "invalid number")
	}
	intEnd := p.pos
	fraction := false
	if p.pos < len(p.data) && p.data[p.pos] == '.' {
		p.pos++
		if !p.digits() {
			return nil, p.syntax(ptr, "invalid number")
		}
		fraction = true
	}
	if p.pos < len(p.data) && (p.data[p.pos] == 'e' || p.data[p.pos] == 'E') {
		p.pos++
		if p.pos < len(p.data) && (p.data[p.pos] == '+' || p.data[p.pos] == '-') {
			p.pos++
		}
		if !p.digits() {
			return nil, p.syntax(ptr, "invalid number")
		}
		fraction = true
	}
	text := string(p.data[start:p.pos])
	if fraction {
		return nil, newErr(CodeNotInteger, ptr, text+" is not an integer (wire numbers have no fraction or exponent)")
	}
	if text == "-0" {
		return nil, newErr(CodeNotInteger, ptr, "-0 is not an integer on the wire (write 0)")
	}
	v, err := strconv.ParseInt(string(p.data[start:intEnd]), 10, 64)
	if err != nil || v > MaxSafeInteger || v < -MaxSafeInteger {
		return nil, newErr(CodeOutOfRange, ptr, text+" is outside ±(2^53−1)")
	}
	return &node{kind: kindNumber, start: start, end: p.pos, num: v}, nil
}

func (p *parser) digits() bool {
	s := p.pos
	for p.pos < len(p.data) && p.data[p.pos] >= '0' && p.data[p.pos] <= '9' {
		p.pos++
	}
	return p.pos > s
}
