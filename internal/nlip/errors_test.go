package nlip

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/fxamacker/cbor/v2"
)

// valid wraps submessages in a valid top level.
func withSubs(subs string) string {
	return `{"format":"text","subformat":"english","content":"hi","submessages":[` + subs + `]}`
}

func TestJSONErrorCodesAndPointers(t *testing.T) {
	cases := []struct {
		name, input, code, pointer string
	}{
		{"empty input", ``, CodeMalformed, ""},
		{"only spaces", `   `, CodeMalformed, ""},
		{"top level array", `[{"format":"text"}]`, CodeMalformed, ""},
		{"top level string", `"hi"`, CodeMalformed, ""},
		{"unterminated object", `{"format":"text"`, CodeMalformed, ""},
		{"trailing data", `{"format":"text","subformat":"en","content":"x"} {}`, CodeMalformed, ""},
		{"trailing comma", `{"format":"text","subformat":"en","content":"x",}`, CodeMalformed, ""},
		{"single quotes", `{'format':'text'}`, CodeMalformed, ""},
		{"bad literal", `{"format":"text","subformat":"en","content":nul}`, CodeMalformed, ""},
		{"leading zero", `{"format":"generic","subformat":"x","content":01}`, CodeMalformed, ""},
		{"bad escape", `{"format":"text","subformat":"en","content":"\x"}`, CodeMalformed, ""},
		{"lone high surrogate", `{"format":"text","subformat":"en","content":"\ud800"}`, CodeMalformed, ""},
		{"lone low surrogate", `{"format":"text","subformat":"en","content":"\udc00x"}`, CodeMalformed, ""},
		{"raw control character", "{\"format\":\"text\",\"subformat\":\"en\",\"content\":\"a\nb\"}", CodeMalformed, ""},
		{"invalid UTF-8", "{\"format\":\"text\",\"subformat\":\"en\",\"content\":\"\xff\"}", CodeMalformed, ""},
		{"byte order mark", "\ufeff{\"format\":\"text\",\"subformat\":\"en\",\"content\":\"x\"}", CodeMalformed, ""},
		{"bad unknown value", `{"format":"text","subformat":"en","content":"x","extra":[1,}`, CodeMalformed, ""},
		// A value that is not JSON where a string belongs is malformed, not
		// of the wrong type (issue 13: nlip-project's clients sent these).
		{"bare word format", `{"format": x}`, CodeMalformed, ""},
		{"input ends at format", `{"format":`, CodeMalformed, ""},
		{"bad literal subformat", `{"format":"text","subformat":tru,"content":"x"}`, CodeMalformed, ""},
		{"broken array messagetype", `{"messagetype":[1,],"format":"text","subformat":"en","content":"x"}`, CodeMalformed, ""},
		{"bare word label", withSubs(`{"label":x,"format":"text","subformat":"en","content":"x"}`), CodeMalformed, ""},
		{"bare word submessages", `{"format":"text","subformat":"en","content":"x","submessages":x}`, CodeMalformed, ""},
		{"bare word submessage", withSubs(`x`), CodeMalformed, ""},

		{"no format", `{"subformat":"en","content":"x"}`, CodeMissingField, "/format"},
		{"empty format", `{"format":"","subformat":"en","content":"x"}`, CodeMissingField, "/format"},
		{"no subformat", `{"format":"text","content":"x"}`, CodeMissingField, "/subformat"},
		{"empty subformat", `{"format":"text","subformat":"","content":"x"}`, CodeMissingField, "/subformat"},
		{"no content", `{"format":"text","subformat":"en"}`, CodeMissingField, "/content"},
		{"empty object", `{}`, CodeMissingField, "/format"},
		{"submessage without format", withSubs(`{"subformat":"en","content":"x"}`), CodeMissingField, "/submessages/0/format"},
		{"second submessage without content", withSubs(`{"format":"text","subformat":"en","content":"x"},{"format":"text","subformat":"en"}`), CodeMissingField, "/submessages/1/content"},

		{"numeric format", `{"format":1,"subformat":"en","content":"x"}`, CodeInvalidType, "/format"},
		{"object subformat", `{"format":"text","subformat":{},"content":"x"}`, CodeInvalidType, "/subformat"},
		{"boolean messagetype", `{"messagetype":true,"format":"text","subformat":"en","content":"x"}`, CodeInvalidType, "/messagetype"},
		{"numeric top label", `{"label":1,"format":"text","subformat":"en","content":"x"}`, CodeInvalidType, "/label"},
		{"submessages object", `{"format":"text","subformat":"en","content":"x","submessages":{}}`, CodeInvalidType, "/submessages"},
		{"submessage string", withSubs(`{"format":"text","subformat":"en","content":"x"},"y"`), CodeInvalidType, "/submessages/1"},
		{"submessage label array", withSubs(`{"label":["a"],"format":"text","subformat":"en","content":"x"}`), CodeInvalidType, "/submessages/0/label"},
		// Problems are reported in document order: the wrong type comes
		// before the syntax error after it.
		{"numeric format then bad syntax", `{"format":1,"x":}`, CodeInvalidType, "/format"},
		{"format nested too deep to check", `{"format":` + repeat("[", 65) + repeat("]", 65) + `,"subformat":"en","content":"x"}`, CodeInvalidType, "/format"},

		{"unknown format", `{"format":"foo","subformat":"x","content":"x"}`, CodeUnknownFormat, "/format"},
		{"removed authentication format", withSubs(`{"format":"authentication","subformat":"x","content":"x"}`), CodeUnknownFormat, "/submessages/0/format"},

		{"text subformat digits", `{"format":"text","subformat":"123","content":"x"}`, CodeInvalidSubformat, "/subformat"},
		{"text subformat with slash", `{"format":"text","subformat":"en/US","content":"x"}`, CodeInvalidSubformat, "/subformat"},
		{"token subformat starts with _", withSubs(`{"format":"token","subformat":"_x","content":"t"}`), CodeInvalidSubformat, "/submessages/0/subformat"},
		{"token subformat empty suffix", withSubs(`{"format":"token","subformat":"conversation_","content":"t"}`), CodeInvalidSubformat, "/submessages/0/subformat"},
		{"token subformat with space", withSubs(`{"format":"token","subformat":"conversation id","content":"t"}`), CodeInvalidSubformat, "/submessages/0/subformat"},
		{"structured subformat with space", `{"format":"structured","subformat":"java script","content":"x"}`, CodeInvalidSubformat, "/subformat"},
		{"binary subformat without slash", `{"format":"binary","subformat":"jpeg","content":""}`, CodeInvalidSubformat, "/subformat"},
		{"binary subformat unknown kind", `{"format":"binary","subformat":"movie/mp4","content":""}`, CodeInvalidSubformat, "/subformat"},
		{"binary subformat no encoding", `{"format":"binary","subformat":"image/","content":""}`, CodeInvalidSubformat, "/subformat"},
		{"location subformat", `{"format":"location","subformat":"map","content":"x"}`, CodeInvalidSubformat, "/subformat"},
		{"error subformat", `{"format":"error","subformat":"decode","content":"x"}`, CodeInvalidSubformat, "/subformat"},
		{"generic blank subformat", `{"format":"generic","subformat":"  ","content":"x"}`, CodeInvalidSubformat, "/subformat"},
		{"subformat control char", `{"format":"generic","subformat":"a\u0007","content":"x"}`, CodeInvalidSubformat, "/subformat"},

		{"text number", `{"format":"text","subformat":"en","content":42}`, CodeInvalidContent, "/content"},
		{"token object", withSubs(`{"format":"token","subformat":"conversation","content":{"id":1}}`), CodeInvalidContent, "/submessages/0/content"},
		{"binary bad base64", `{"format":"binary","subformat":"image/png","content":"not base64!"}`, CodeInvalidContent, "/content"},
		{"binary mixed alphabets", `{"format":"binary","subformat":"image/png","content":"ab+-"}`, CodeInvalidContent, "/content"},
		{"binary too much padding", `{"format":"binary","subformat":"image/png","content":"QQ==="}`, CodeInvalidContent, "/content"},
		{"binary object", `{"format":"binary","subformat":"image/png","content":{"a":1}}`, CodeInvalidContent, "/content"},
		{"relative uri", `{"format":"structured","subformat":"uri","content":"/upload"}`, CodeInvalidContent, "/content"},
		{"uri with space", `{"format":"structured","subformat":"URI","content":"https://a.example/x y"}`, CodeInvalidContent, "/content"},
		{"uri object", `{"format":"structured","subformat":"uri","content":{"href":"https://a.example"}}`, CodeInvalidContent, "/content"},
		{"xml array", `{"format":"structured","subformat":"xml","content":["<a/>"]}`, CodeInvalidContent, "/content"},
		{"gps out of range", `{"format":"location","subformat":"gps","content":"91,0"}`, CodeInvalidContent, "/content"},
		{"gps words", `{"format":"location","subformat":"GPS","content":"Paris"}`, CodeInvalidContent, "/content"},
		{"gps object missing lon", `{"format":"location","subformat":"gps","content":{"lat":1}}`, CodeInvalidContent, "/content"},
		{"location text number", `{"format":"location","subformat":"text","content":5}`, CodeInvalidContent, "/content"},
		{"error code object", `{"format":"error","subformat":"code","content":{"c":1}}`, CodeInvalidContent, "/content"},
		{"error text number", `{"format":"error","subformat":"text","content":1}`, CodeInvalidContent, "/content"},
		{"duplicate key in content", `{"format":"structured","subformat":"json","content":{"a":1,"a":2}}`, CodeInvalidContent, "/content"},
		{"duplicate escaped key in content", `{"format":"structured","subformat":"json","content":{"a":1,"\u0061":2}}`, CodeInvalidContent, "/content"},
		{"number out of range", `{"format":"structured","subformat":"json","content":[1e400]}`, CodeInvalidContent, "/content"},

		{"too many submessages", `{"format":"text","subformat":"en","content":"x","submessages":[` +
			strings.Repeat(`{"format":"text","subformat":"en","content":"x"},`, defaultMaxSubmessages) +
			`{"format":"text","subformat":"en","content":"x"}]}`, CodeTooManySubmessages, "/submessages"},
		{"content too deep", `{"format":"generic","subformat":"x","content":` + repeat("[", 65) + repeat("]", 65) + `}`, CodeTooDeep, "/content"},
		{"unknown field too deep", `{"format":"text","subformat":"en","content":"x","x/y":` + repeat("{\"a\":", 65) + "1" + repeat("}", 65) + `}`, CodeTooDeep, "/x~1y"},
		{"submessage unknown field too deep", withSubs(`{"format":"text","subformat":"en","content":"x","deep":` + repeat("[", 65) + repeat("]", 65) + `}`), CodeTooDeep, "/submessages/0/deep"},
		{"label too long", withSubs(`{"label":"` + repeat("l", defaultMaxFieldBytes+1) + `","format":"text","subformat":"en","content":"x"}`), CodeTooLarge, "/submessages/0/label"},
		{"subformat too long", `{"format":"generic","subformat":"` + repeat("s", defaultMaxFieldBytes+1) + `","content":"x"}`, CodeTooLarge, "/subformat"},
		{"messagetype too long", `{"messagetype":"` + repeat("m", defaultMaxFieldBytes+1) + `","format":"text","subformat":"en","content":"x"}`, CodeTooLarge, "/messagetype"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			m, err := DecodeJSON([]byte(c.input), Limits{})
			if err == nil {
				t.Fatalf("accepted: %+v", m)
			}
			wantError(t, err, c.code, c.pointer)
		})
	}
}

// cborMap builds a CBOR map with keys in the given order; values are
// marshalled by fxamacker unless they are already encoded (rawCBOR).
type rawCBOR []byte

func cborMap(tb testing.TB, pairs ...any) rawCBOR {
	tb.Helper()
	out := appendCBORHead(nil, majorMap, uint64(len(pairs)/2))
	for i := 0; i < len(pairs); i += 2 {
		out = appendCBORText(out, pairs[i].(string))
		out = append(out, cborValue(tb, pairs[i+1])...)
	}
	return out
}

func cborArrayOf(tb testing.TB, items ...any) rawCBOR {
	tb.Helper()
	out := appendCBORHead(nil, majorArray, uint64(len(items)))
	for _, it := range items {
		out = append(out, cborValue(tb, it)...)
	}
	return out
}

func cborValue(tb testing.TB, v any) []byte {
	tb.Helper()
	if raw, ok := v.(rawCBOR); ok {
		return raw
	}
	b, err := cbor.Marshal(v)
	if err != nil {
		tb.Fatal(err)
	}
	return b
}

func TestCBORErrorCodesAndPointers(t *testing.T) {
	text := func(extra ...any) rawCBOR {
		return cborMap(t, append([]any{"format", "text", "subformat", "en", "content", "x"}, extra...)...)
	}
	generic := func(content rawCBOR) rawCBOR {
		return cborMap(t, "format", "generic", "subformat", "x", "content", content)
	}
	cases := []struct {
		name    string
		input   []byte
		code    string
		pointer string
	}{
		{"empty", nil, CodeMalformed, ""},
		{"top level array", cborArrayOf(t, 1), CodeMalformed, ""},
		{"top level tag", append([]byte{0xc0}, text()...), CodeMalformed, ""},
		{"indefinite map", []byte{0xbf, 0xff}, CodeMalformed, ""},
		{"truncated", text()[:10], CodeMalformed, ""},
		{"trailing data", append(text(), 0x00), CodeMalformed, ""},
		{"map claims more pairs than bytes", []byte{0xbb, 0, 0, 0, 0, 0xff, 0xff, 0xff, 0xff}, CodeMalformed, ""},
		{"integer key", append(appendCBORHead(nil, majorMap, 1), 0x01, 0x01), CodeInvalidType, ""},
		{"invalid UTF-8 key", append(appendCBORHead(nil, majorMap, 1), 0x61, 0xff, 0x01), CodeMalformed, ""},
		{"indefinite content", generic(rawCBOR{0x9f, 0x01, 0xff}), CodeMalformed, ""},

		{"duplicate key by case", text("Format", "text"), CodeDuplicateField, "/format"},
		{"duplicate unknown key", text("x", 1, "X", 2), CodeDuplicateField, "/X"},
		{"missing content", cborMap(t, "format", "text", "subformat", "en"), CodeMissingField, "/content"},
		{"null format", cborMap(t, "format", nil, "subformat", "en", "content", "x"), CodeMissingField, "/format"},
		{"byte string format", cborMap(t, "format", []byte("text"), "subformat", "en", "content", "x"), CodeInvalidType, "/format"},
		{"undefined subformat", cborMap(t, "format", "text", "subformat", rawCBOR{0xf7}, "content", "x"), CodeInvalidType, "/subformat"},
		{"submessages map", text("submessages", map[string]int{"a": 1}), CodeInvalidType, "/submessages"},
		{"submessage text", text("submessages", cborArrayOf(t, "x")), CodeInvalidType, "/submessages/0"},
		{"submessage integer key", text("submessages", cborArrayOf(t, append(appendCBORHead(nil, majorMap, 1), 0x01, 0x01))), CodeInvalidType, "/submessages/0"},
		// An item that is not well-formed where text belongs is malformed,
		// as in JSON.
		{"truncated array format", cborMap(t, "format", rawCBOR{0x82, 0x01}), CodeMalformed, ""},
		{"reserved item subformat", cborMap(t, "format", "text", "subformat", rawCBOR{0x1c}, "content", "x"), CodeMalformed, ""},
		{"truncated map submessages", text("submessages", rawCBOR{0xa1, 0x61, 'a'}), CodeMalformed, ""},
		{"truncated text submessage", text("submessages", cborArrayOf(t, rawCBOR{0x62, 'x'})), CodeMalformed, ""},
		{"truncated integer key", append(appendCBORHead(nil, majorMap, 1), 0x19, 0x01), CodeMalformed, ""},

		{"unknown format", cborMap(t, "format", "foo", "subformat", "x", "content", "x"), CodeUnknownFormat, "/format"},
		{"binary subformat", cborMap(t, "format", "binary", "subformat", "png", "content", []byte{1}), CodeInvalidSubformat, "/subformat"},
		{"bytes for text", cborMap(t, "format", "text", "subformat", "en", "content", []byte("hi")), CodeInvalidContent, "/content"},
		{"bytes for generic", generic(cborValue(t, []byte{1})), CodeInvalidContent, "/content"},
		{"bytes inside JSON", generic(cborValue(t, []any{[]byte{1}})), CodeInvalidContent, "/content"},
		{"tag in content", generic(rawCBOR{0xc1, 0x01}), CodeInvalidContent, "/content"},
		{"bignum in content", generic(rawCBOR{0xc2, 0x41, 0x01}), CodeInvalidContent, "/content"},
		{"undefined content", generic(rawCBOR{0xf7}), CodeInvalidContent, "/content"},
		{"simple value content", generic(rawCBOR{0xf0}), CodeInvalidContent, "/content"},
		{"NaN content", generic(rawCBOR{0xf9, 0x7e, 0x00}), CodeInvalidContent, "/content"},
		{"infinity content", generic(rawCBOR{0xf9, 0x7c, 0x00}), CodeInvalidContent, "/content"},
		{"integer map key in content", generic(cborValue(t, map[int]int{1: 2})), CodeInvalidContent, "/content"},
		{"duplicate key in content", generic(append(appendCBORHead(nil, majorMap, 2), 0x61, 'a', 0x01, 0x61, 'a', 0x02)), CodeInvalidContent, "/content"},
		{"tag in unknown field", text("extra", rawCBOR{0xc1, 0x01}), CodeInvalidContent, "/extra"},

		{"too many submessages", text("submessages", rawCBOR(append(appendCBORHead(nil, majorArray, defaultMaxSubmessages+1),
			repeatBytes(cborMap(t, "format", "text", "subformat", "en", "content", "x"), defaultMaxSubmessages+1)...))), CodeTooManySubmessages, "/submessages"},
		{"content too deep", generic(rawCBOR(repeat("\x81", 65) + "\x01")), CodeTooDeep, "/content"},
		{"submessage content too deep", text("submessages", cborArrayOf(t, cborMap(t, "format", "generic", "subformat", "x",
			"content", rawCBOR(repeat("\x81", 65)+"\x01")))), CodeTooDeep, "/submessages/0/content"},
		{"unknown field too deep", text("deep", rawCBOR(repeat("\x81", 65)+"\x01")), CodeTooDeep, "/deep"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			m, err := DecodeCBOR(c.input, Limits{})
			if err == nil {
				t.Fatalf("accepted: %+v", m)
			}
			wantError(t, err, c.code, c.pointer)
		})
	}
}

func repeatBytes(b []byte, n int) []byte {
	var out []byte
	for range n {
		out = append(out, b...)
	}
	return out
}

func TestErrorFormatting(t *testing.T) {
	_, err := DecodeJSON([]byte(`{"format":"text","subformat":"en","content":"x","submessages":[{"format":"foo","subformat":"x","content":"x"}]}`), Limits{})
	want := `nlip: /submessages/0/format: format "foo" is not one of text, token, structured, binary, location, generic, error (unknown_format)`
	if err == nil || err.Error() != want {
		t.Fatalf("Error() = %v, want %s", err, want)
	}
	wrapped := fmt.Errorf("ingress: %w", err)
	if CodeOf(wrapped) != CodeUnknownFormat {
		t.Fatalf("CodeOf(wrapped) = %q", CodeOf(wrapped))
	}
	if CodeOf(errors.New("other")) != "" || CodeOf(nil) != "" {
		t.Fatal("CodeOf of a foreign error must be empty")
	}
	if got := (&Error{Code: CodeMalformed, Message: "empty input"}).Error(); got != "nlip: message: empty input (malformed)" {
		t.Fatalf("Error() without pointer = %q", got)
	}
}
