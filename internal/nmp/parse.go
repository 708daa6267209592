package nmp

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"strconv"
	"strings"
	"unicode/utf8"
)

// ParseAgentHeader reads the NMP header an agent supplied, in the NMP
// README's form, either wrapped ({"nmp_message": {...}}) or bare ({"trust":
// ..., "signals": ..., "budget": ..., "trace": [...]}). It is strict, because
// this is untrusted input and a lenient reading could be exploited:
//
//   - keys are case-sensitive and lower-case as in the README; unknown and
//     duplicate keys are errors (a second "trust" must not override the
//     first unseen);
//   - trust.level is an integer 0..3; signals are JSON numbers within their
//     ranges (decimal text parsed by ParseMilli, more than three decimals
//     rounded half to even); max_tokens, tokens_used and trace tokens are
//     non-negative integers; system_mode is reflex, fast, standard or deep;
//   - every trace entry needs a non-empty "agent"; strings may not contain
//     control characters;
//   - the document, the trace, every string and every number are bounded by
//     lim (zero fields take DefaultLimits);
//   - null stands for an absent member (some serialisers write null for
//     unset fields; absence never grants anything);
//   - the input must be valid UTF-8 and hold exactly one JSON object.
//
// Every error is an *Error.
func ParseAgentHeader(data []byte, lim Limits) (*AgentHeader, error) {
	lim = lim.withDefaults()
	if len(data) > lim.MaxBytes {
		return nil, newError(CodeTooLarge, "", strconv.Itoa(len(data))+" bytes exceed the limit of "+strconv.Itoa(lim.MaxBytes))
	}
	if !utf8.Valid(data) {
		return nil, newError(CodeMalformed, "", "not valid UTF-8")
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	p := &parser{dec: dec, lim: lim, h: &AgentHeader{}}
	if err := p.top(); err != nil {
		return nil, err
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, newError(CodeMalformed, "", "unexpected data after the JSON object")
	}
	return p.h, nil
}

type parser struct {
	dec *json.Decoder
	lim Limits
	h   *AgentHeader
}

// next reads one token, turning decoder errors into *Error.
func (p *parser) next(field string) (json.Token, *Error) {
	tok, err := p.dec.Token()
	if err == nil {
		return tok, nil
	}
	if err == io.EOF {
		return nil, newError(CodeMalformed, field, "unexpected end of input")
	}
	var se *json.SyntaxError
	if errors.As(err, &se) {
		return nil, newError(CodeMalformed, field, "invalid JSON at byte "+strconv.FormatInt(se.Offset, 10)+": "+se.Error())
	}
	return nil, newError(CodeMalformed, field, "invalid JSON: "+err.Error())
}

// open reads the start of an object (or array when array is set) at field;
// present is false for null.
func (p *parser) open(field string, array bool) (present bool, err *Error) {
	tok, err := p.next(field)
	if err != nil {
		return false, err
	}
	if tok == nil {
		return false, nil
	}
	want, what := json.Delim('{'), "an object"
	if array {
		want, what = json.Delim('['), "an array"
	}
	if d, ok := tok.(json.Delim); !ok || d != want {
		return false, newError(CodeMalformed, field, "must be "+what)
	}
	return true, nil
}

// members reads the members of an object whose '{' was read, calling member
// for each key; unknown keys (member returns false) and duplicates are
// errors. known lists the keys for the unknown_field message.
func (p *parser) members(field string, known []string, member func(key, path string) (bool, *Error)) *Error {
	seen := map[string]bool{}
	for p.dec.More() {
		tok, err := p.next(field)
		if err != nil {
			return err
		}
		key, ok := tok.(string)
		if !ok {
			return newError(CodeMalformed, field, "expected an object key")
		}
		path := key
		if field != "" {
			path = field + "." + key
		}
		if seen[key] {
			return newError(CodeMalformed, path, "duplicate key")
		}
		seen[key] = true
		ok, err = member(key, path)
		if err != nil {
			return err
		}
		if !ok {
			return newError(CodeUnknownField, path, "unknown key "+strconv.Quote(clip(key))+
				" (keys are case-sensitive; expected one of "+strings.Join(known, ", ")+")")
		}
	}
	_, err := p.next(field) // the closing '}'; the decoder checks it matches
	return err
}

// top reads the outer object: either {"nmp_message": {...}} or the bare
// members. Mixing both is an error, so there is only one reading.
func (p *parser) top() *Error {
	present, err := p.open("", false)
	if err != nil {
		return err
	}
	if !present {
		return newError(CodeMalformed, "", "must be an object, not null")
	}
	var wrapped, bare bool
	err = p.members("", []string{"nmp_message", "trust", "signals", "budget", "trace"}, func(key, path string) (bool, *Error) {
		if key == "nmp_message" {
			wrapped = true
			present, err := p.open(path, false)
			if err != nil || !present {
				return true, err
			}
			return true, p.members("", []string{"trust", "signals", "budget", "trace"}, p.body)
		}
		ok, err := p.body(key, path)
		bare = bare || ok
		return ok, err
	})
	if err == nil && wrapped && bare {
		return newError(CodeMalformed, "", "nmp_message cannot be combined with bare trust, signals, budget or trace members")
	}
	return err
}

// body reads one member of the NMP object.
func (p *parser) body(key, path string) (bool, *Error) {
	switch key {
	case "trust":
		return true, p.trust(path)
	case "signals":
		return true, p.signals(path)
	case "budget":
		return true, p.budget(path)
	case "trace":
		return true, p.trace(path)
	}
	return false, nil
}

func (p *parser) trust(field string) *Error {
	present, err := p.open(field, false)
	if err != nil || !present {
		return err
	}
	return p.members(field, []string{"level"}, func(key, path string) (bool, *Error) {
		if key != "level" {
			return false, nil
		}
		text, present, err := p.number(path)
		if err != nil || !present {
			return true, err
		}
		v, ok := parseInt(text)
		if !ok {
			return true, newError(CodeInvalidTrust, path, clip(text)+" is not a trust level (an integer: 0 hostile, 1 untrusted, 2 verified, 3 trusted)")
		}
		level, e := TrustFromNMP(v)
		if e != nil {
			return true, atField(e.(*Error), path)
		}
		p.h.Trust = level
		return true, nil
	})
}

func (p *parser) signals(field string) *Error {
	present, err := p.open(field, false)
	if err != nil || !present {
		return err
	}
	names := make([]string, 0, 6)
	for _, s := range AllSignals() {
		names = append(names, s.String())
	}
	return p.members(field, names, func(key, path string) (bool, *Error) {
		for _, s := range AllSignals() {
			if key != s.String() {
				continue
			}
			text, present, err := p.number(path)
			if err != nil || !present {
				return true, err
			}
			v, e := ParseMilli(text)
			if e != nil {
				return true, atField(e.(*Error), path)
			}
			if e := CheckSignal(s, v); e != nil {
				return true, e.(*Error)
			}
			*p.h.Signals.slot(s) = &v
			return true, nil
		}
		return false, nil
	})
}

func (p *parser) budget(field string) *Error {
	present, err := p.open(field, false)
	if err != nil || !present {
		return err
	}
	b := &p.h.Budget
	return p.members(field, []string{"max_tokens", "tokens_used", "system_mode"}, func(key, path string) (bool, *Error) {
		switch key {
		case "max_tokens", "tokens_used":
			n, present, err := p.tokens(path)
			if err != nil || !present {
				return true, err
			}
			if key == "max_tokens" {
				b.MaxTokens = &n
			} else {
				b.TokensUsed = &n
			}
			return true, nil
		case "system_mode":
			s, present, err := p.str(path)
			if err != nil || !present {
				return true, err
			}
			m, e := ParseMode(s)
			if e != nil {
				return true, atField(e.(*Error), path)
			}
			b.SystemMode = m
			return true, nil
		}
		return false, nil
	})
}

func (p *parser) trace(field string) *Error {
	present, err := p.open(field, true)
	if err != nil || !present {
		return err
	}
	var entries []AgentTraceEntry
	for i := 0; p.dec.More(); i++ {
		path := field + "[" + strconv.Itoa(i) + "]"
		if i == p.lim.MaxTraceEntries {
			return newError(CodeTooLarge, field, "more than "+strconv.Itoa(p.lim.MaxTraceEntries)+" entries")
		}
		present, err := p.open(path, false)
		if err != nil {
			return err
		}
		if !present {
			return newError(CodeMalformed, path, "must be an object, not null")
		}
		var e AgentTraceEntry
		err = p.members(path, []string{"agent", "action", "tokens"}, func(key, kpath string) (bool, *Error) {
			switch key {
			case "agent", "action":
				s, _, err := p.str(kpath)
				if key == "agent" {
					e.Agent = s
				} else {
					e.Action = s
				}
				return true, err
			case "tokens":
				n, _, err := p.tokens(kpath)
				e.Tokens = n
				return true, err
			}
			return false, nil
		})
		if err != nil {
			return err
		}
		if e.Agent == "" {
			return newError(CodeMalformed, path+".agent", "required, a non-empty string")
		}
		entries = append(entries, e)
	}
	if _, err := p.next(field); err != nil {
		return err
	}
	p.h.Trace = entries
	return nil
}

// number reads a JSON number's text (present is false for null).
func (p *parser) number(field string) (text string, present bool, err *Error) {
	tok, err := p.next(field)
	if err != nil || tok == nil {
		return "", false, err
	}
	n, ok := tok.(json.Number)
	if !ok {
		return "", false, newError(CodeMalformed, field, "must be a JSON number")
	}
	if len(n) > p.lim.MaxNumberBytes {
		return "", false, newError(CodeTooLarge, field, "number longer than "+strconv.Itoa(p.lim.MaxNumberBytes)+" characters")
	}
	return string(n), true, nil
}

// tokens reads a token count: a non-negative integer that fits in uint64.
func (p *parser) tokens(field string) (n uint64, present bool, err *Error) {
	text, present, err := p.number(field)
	if err != nil || !present {
		return 0, present, err
	}
	if strings.HasPrefix(text, "-") {
		return 0, false, newError(CodeOutOfRange, field, clip(text)+" is negative; token counts are never below 0")
	}
	if strings.ContainsAny(text, ".eE") {
		return 0, false, newError(CodeMalformed, field, clip(text)+" is not a whole number of tokens")
	}
	n, e := strconv.ParseUint(text, 10, 64)
	if e != nil {
		return 0, false, newError(CodeOutOfRange, field, clip(text)+" is larger than 18446744073709551615")
	}
	return n, true, nil
}

// str reads a bounded string without control characters.
func (p *parser) str(field string) (s string, present bool, err *Error) {
	tok, err := p.next(field)
	if err != nil || tok == nil {
		return "", false, err
	}
	s, ok := tok.(string)
	if !ok {
		return "", false, newError(CodeMalformed, field, "must be a string")
	}
	if len(s) > p.lim.MaxStringBytes {
		return "", false, newError(CodeTooLarge, field, "longer than "+strconv.Itoa(p.lim.MaxStringBytes)+" bytes")
	}
	for _, r := range s {
		if r < 0x20 || (r >= 0x7f && r <= 0x9f) || r == utf8.RuneError {
			return "", false, newError(CodeMalformed, field, "contains a control or invalid character")
		}
	}
	return s, true, nil
}

// parseInt parses an integer in JSON syntax (no fraction, no exponent).
func parseInt(text string) (int64, bool) {
	if strings.ContainsAny(text, ".eE") {
		return 0, false
	}
	v, err := strconv.ParseInt(text, 10, 64)
	return v, err == nil
}
