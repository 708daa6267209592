package nlip

import (
	"bytes"
	"testing"
)

func TestContentAccessors(t *testing.T) {
	text := TextContent("hi")
	bin := BinaryContent([]byte{0, 1, 2})
	obj, err := JSONContent(map[string]any{"b": 1, "a": []int{1, 2}})
	if err != nil {
		t.Fatal(err)
	}
	null := NullContent()

	if s, ok := text.Text(); !ok || s != "hi" || text.Kind() != KindText {
		t.Errorf("text: %q %v %v", s, ok, text.Kind())
	}
	if _, ok := text.Binary(); ok {
		t.Error("text is not binary")
	}
	if _, ok := text.JSON(); ok {
		t.Error("text has no canonical JSON form")
	}
	if b, ok := bin.Binary(); !ok || !bytes.Equal(b, []byte{0, 1, 2}) || bin.Kind() != KindBinary {
		t.Errorf("binary: %v %v", b, ok)
	}
	if j, ok := obj.JSON(); !ok || string(j) != `{"a":[1,2],"b":1}` || obj.Kind() != KindJSON {
		t.Errorf("json: %s %v", j, ok)
	}
	if !null.IsNull() || obj.IsNull() || text.IsNull() {
		t.Error("IsNull")
	}
	var zero Content
	if !zero.IsZero() || text.IsZero() || zero.Kind() != KindNone || zero.Kind().String() != "none" {
		t.Error("IsZero")
	}
	if text.Len() != 2 || bin.Len() != 3 || obj.Len() != len(`{"a":[1,2],"b":1}`) {
		t.Error("Len")
	}

	// Content is immutable: neither the constructor's input nor an
	// accessor's output aliases it.
	src := []byte{9}
	c := BinaryContent(src)
	src[0] = 0
	out, _ := c.Binary()
	out[0] = 1
	if again, _ := c.Binary(); again[0] != 9 {
		t.Error("binary content was mutated through a slice")
	}
}

func TestJSONContentStringIsText(t *testing.T) {
	c, err := JSONContent("a string")
	if err != nil {
		t.Fatal(err)
	}
	if s, ok := c.Text(); !ok || s != "a string" {
		t.Fatalf("JSONContent(string) = %v", c)
	}
	c, err = RawJSONContent([]byte(` "\u00e9" `))
	if s, ok := c.Text(); err != nil || !ok || s != "é" {
		t.Fatalf("RawJSONContent(string) = %v, %v", c, err)
	}
	for _, bad := range []string{``, `{"a":1,"a":2}`, `[1,]`, `1 2`, `"x`, `1e999`} {
		if _, err := RawJSONContent([]byte(bad)); err == nil {
			t.Errorf("RawJSONContent(%q) accepted", bad)
		}
	}
	if _, err := JSONContent(func() {}); err == nil {
		t.Error("JSONContent(func) accepted")
	}
}

func TestContentUnmarshal(t *testing.T) {
	var v struct{ A int }
	obj, _ := RawJSONContent([]byte(`{"A":7}`))
	if err := obj.Unmarshal(&v); err != nil || v.A != 7 {
		t.Fatalf("Unmarshal object: %+v, %v", v, err)
	}
	var s string
	if err := TextContent("tab\there").Unmarshal(&s); err != nil || s != "tab\there" {
		t.Fatalf("Unmarshal text: %q, %v", s, err)
	}
	if err := BinaryContent([]byte{1}).Unmarshal(&s); err == nil {
		t.Fatal("Unmarshal of binary content must fail")
	}
	if err := obj.Unmarshal(&s); err == nil {
		t.Fatal("Unmarshal of an object into a string must fail")
	}
}

// RFC 8785 canonical forms of content, as decoded from JSON.
func TestCanonicalContent(t *testing.T) {
	cases := map[string]struct{ in, want string }{
		"key order":              {`{"b":1,"a":2,"c":{"z":1,"y":2}}`, `{"a":2,"b":1,"c":{"y":2,"z":1}}`},
		"whitespace":             {"[ 1 ,\n\t2 ]", `[1,2]`},
		"integers":               {`[0,-0,10,-7,123456789012345]`, `[0,0,10,-7,123456789012345]`},
		"big integer":            {`[12345678901234567890]`, `[12345678901234567000]`},
		"exponents":              {`[1E3,1e21,1e-7,1.5e-3,-2.50]`, `[1000,1e+21,1e-7,0.0015,-2.5]`},
		"float":                  {`[0.1,3.141592653589793238]`, `[0.1,3.141592653589793]`},
		"escapes minimal":        {`["\/\u0041\u00e9\n\u001f\"\\"]`, `["/Aé\n\u001f\"\\"]`},
		"utf16 key order":        {`{"\ud83d\ude00":1,"\ufb01":2,"a":3}`, `{"a":3,"😀":1,"ﬁ":2}`},
		"literals":               {`[true,false,null]`, `[true,false,null]`},
		"empty containers":       {`{"a":{},"b":[]}`, `{"a":{},"b":[]}`},
		"nested unsorted arrays": {`[{"b":[{"d":1,"c":2}],"a":0}]`, `[{"a":0,"b":[{"c":2,"d":1}]}]`},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			m := mustDecodeJSON(t, `{"format":"structured","subformat":"json","content":`+c.in+`}`)
			if got, _ := m.Content.JSON(); string(got) != c.want {
				t.Fatalf("canonical = %s, want %s", got, c.want)
			}
			roundTrip(t, m)
		})
	}
}

// Binary content accepts the four base64 variants senders use.
func TestBinaryBase64Variants(t *testing.T) {
	want := []byte{0xfb, 0xff, 0xbf, 0x01}
	for name, b64 := range map[string]string{
		"std padded":   "+/+/AQ==",
		"std unpadded": "+/+/AQ",
		"url padded":   "-_-_AQ==",
		"url unpadded": "-_-_AQ",
	} {
		t.Run(name, func(t *testing.T) {
			m := mustDecodeJSON(t, `{"format":"binary","subformat":"generic/.bin","content":"`+b64+`"}`)
			if got, ok := m.Content.Binary(); !ok || !bytes.Equal(got, want) {
				t.Fatalf("decoded %x, want %x", got, want)
			}
			if j := mustEncodeJSON(t, m); !bytes.Contains(j, []byte(`"content":"+/+/AQ=="`)) {
				t.Fatalf("re-encoded as %s, want standard padded base64", j)
			}
		})
	}
	empty := mustDecodeJSON(t, `{"format":"binary","subformat":"image/png","content":""}`)
	if b, ok := empty.Content.Binary(); !ok || len(b) != 0 {
		t.Fatalf("empty binary = %v, %v", b, ok)
	}
}

// In CBOR, binary content is a raw byte string both ways; base64 text is
// accepted on input too.
func TestCBORBinaryIsRaw(t *testing.T) {
	raw := []byte{0, 0xff, 'R', 'I', 'F', 'F'}
	m := NewMessage(Binary("audio", "wav", raw))
	enc, err := EncodeCBOR(m)
	if err != nil {
		t.Fatal(err)
	}
	wantBytes := append([]byte{0x46}, raw...) // byte string of 6
	if !bytes.Contains(enc, append([]byte{0x67, 'c', 'o', 'n', 't', 'e', 'n', 't'}, wantBytes...)) {
		t.Fatalf("CBOR %x does not hold content as a raw byte string", enc)
	}
	got, err := DecodeCBOR(enc, Limits{})
	if err != nil || !got.Equal(m) {
		t.Fatalf("DecodeCBOR = %+v, %v", got, err)
	}
	asText := cborMap(t, "format", "binary", "subformat", "audio/wav", "content", encodeStd(raw))
	got, err = DecodeCBOR(asText, Limits{})
	if err != nil || !got.Equal(m) {
		t.Fatalf("DecodeCBOR(base64 text) = %+v, %v", got, err)
	}
}
