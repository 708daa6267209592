package nlip

import "testing"

// CBOR content becomes the canonical JSON a JSON sender of the same value
// would produce.
func TestCBORContentAsJSON(t *testing.T) {
	cases := map[string]struct {
		item rawCBOR
		want string
	}{
		"small integer":      {rawCBOR{0x18, 0x2a}, `42`},
		"negative integer":   {rawCBOR{0x38, 0x63}, `-100`},
		"2^53":               {rawCBOR{0x1b, 0, 0x20, 0, 0, 0, 0, 0, 0}, `9007199254740992`},
		"max uint64":         {rawCBOR{0x1b, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}, `18446744073709552000`},
		"min negative":       {rawCBOR{0x3b, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}, `-18446744073709552000`},
		"float16 1.5":        {rawCBOR{0xf9, 0x3e, 0x00}, `1.5`},
		"float32 0.1":        {rawCBOR{0xfa, 0x3d, 0xcc, 0xcc, 0xcd}, `0.10000000149011612`},
		"float64 1e21":       {rawCBOR{0xfb, 0x44, 0x4b, 0x1a, 0xe4, 0xd6, 0xe2, 0xef, 0x50}, `1e+21`},
		"negative zero":      {rawCBOR{0xf9, 0x80, 0x00}, `0`},
		"booleans and null":  {rawCBOR{0x83, 0xf4, 0xf5, 0xf6}, `[false,true,null]`},
		"map sorted UTF-16":  {cborMap(t, "ﬁ", 2, "😀", 1, "a", 3), `{"a":3,"😀":1,"ﬁ":2}`},
		"escapes":            {cborArrayOf(t, "\"\\\n\x01/é"), `["\"\\\n\u0001/é"]`},
		"nested":             {cborMap(t, "b", cborArrayOf(t, cborMap(t, "y", 1, "x", 2)), "a", nil), `{"a":null,"b":[{"x":2,"y":1}]}`},
		"empty containers":   {cborArrayOf(t, cborArrayOf(t), cborMap(t)), `[[],{}]`},
		"text is still text": {cborValue(t, "plain"), ``},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			m, err := DecodeCBOR(cborMap(t, "format", "generic", "subformat", "x", "content", c.item), Limits{})
			if err != nil {
				t.Fatal(err)
			}
			if c.want == "" {
				if s, ok := m.Content.Text(); !ok || s != "plain" {
					t.Fatalf("content = %+v", m.Content)
				}
				return
			}
			if got, _ := m.Content.JSON(); string(got) != c.want {
				t.Fatalf("content = %s, want %s", got, c.want)
			}
			roundTrip(t, m)
		})
	}
}

// CBOR and JSON spellings of one message decode to equal values, keys in
// any case and order.
func TestCBORAndJSONAgree(t *testing.T) {
	fromJSON := mustDecodeJSON(t, `{"MessageType":"control","Format":"structured","Subformat":"json","Content":{"a":[1,2.5]},
		"Submessages":[{"Label":"t","Format":"Token","Subformat":"conversation","Content":"c"}]}`)
	fromCBOR, err := DecodeCBOR(cborMap(t,
		"submessages", cborArrayOf(t, cborMap(t, "CONTENT", "c", "subformat", "conversation", "format", "TOKEN", "label", "t")),
		"content", map[string]any{"a": []any{1, 2.5}},
		"SUBFORMAT", "json", "format", "STRUCTURED", "messageType", "CONTROL"), Limits{})
	if err != nil {
		t.Fatal(err)
	}
	if !fromCBOR.Equal(fromJSON) {
		t.Fatalf("CBOR %+v\nJSON %+v", fromCBOR, fromJSON)
	}
}
