package nlip

import "testing"

// TestAcceptedParts pins what each format accepts (ECMA-430 Table 1 as
// decided in docs/nlip.md); TestJSONErrorCodesAndPointers pins the
// rejections.
func TestAcceptedParts(t *testing.T) {
	cases := map[string]string{
		"text english":           `"format":"text","subformat":"english","content":"hi"`,
		"text BCP 47":            `"format":"text","subformat":"en-US","content":"hi"`,
		"text underscore tag":    `"format":"text","subformat":"zh_Hans","content":"你好"`,
		"text non-ASCII name":    `"format":"text","subformat":"Português (Brasil)","content":"olá"`,
		"text empty content":     `"format":"text","subformat":"english","content":""`,
		"token bare":             `"format":"token","subformat":"conversation","content":"c"`,
		"token with suffix":      `"format":"token","subformat":"conversation_9.2.3.5","content":"c"`,
		"token SDK spelling":     `"format":"token","subformat":"AuthorizatioN:","content":"c"`,
		"token other prefix":     `"format":"token","subformat":"group_ops","content":"g"`,
		"structured json object": `"format":"structured","subformat":"json","content":{"a":[1,null]}`,
		"structured json string": `"format":"structured","subformat":"JSON","content":"{\"a\":1}"`,
		"structured json number": `"format":"structured","subformat":"json","content":42`,
		"structured json null":   `"format":"structured","subformat":"json","content":null`,
		"structured json bool":   `"format":"structured","subformat":"json","content":false`,
		"structured uri":         `"format":"structured","subformat":"uri","content":"https://upload.example:8443/nlip/upload"`,
		"structured urn":         `"format":"structured","subformat":"URI","content":"urn:isbn:0451450523"`,
		"structured xml":         `"format":"structured","subformat":"xml","content":"<a/>"`,
		"structured html":        `"format":"structured","subformat":"HTML","content":"<p>hi</p>"`,
		"structured program":     `"format":"structured","subformat":"python","content":"print(1)"`,
		"structured MIME type":   `"format":"structured","subformat":"application/json","content":{"a":1}`,
		"binary image":           `"format":"binary","subformat":"image/png","content":"iVBORw0KGgo="`,
		"binary dotted encoding": `"format":"binary","subformat":"audio/.wav","content":""`,
		"binary video":           `"format":"binary","subformat":"video/.mp3","content":"AA"`,
		"binary sensor":          `"format":"binary","subformat":"Sensor/csv","content":"AA=="`,
		"binary generic zip":     `"format":"binary","subformat":"generic/.zip","content":"UEsDBA=="`,
		"binary ECMA-432 style":  `"format":"binary","subformat":"audio/wav;base64","content":"UklGRg=="`,
		"location text":          `"format":"location","subformat":"text","content":"Geneva, Switzerland"`,
		"location gps string":    `"format":"location","subformat":"GPS","content":"46.2044, 6.1432"`,
		"location gps signed":    `"format":"location","subformat":"gps","content":"-33.8688,+151.2093"`,
		"location gps bounds":    `"format":"location","subformat":"gps","content":"-90,180"`,
		"location gps object":    `"format":"location","subformat":"gps","content":{"lat":46.2,"lon":6.1,"alt":375}`,
		"generic text":           `"format":"generic","subformat":"x-acme","content":"anything"`,
		"generic array":          `"format":"generic","subformat":".acme","content":[1,"a",{}]`,
		"generic null":           `"format":"generic","subformat":"acme","content":null`,
		"error text":             `"format":"error","subformat":"text","content":"INPUT_REQUIRED"`,
		"error code number":      `"format":"error","subformat":"CODE","content":404`,
		"error code string":      `"format":"error","subformat":"code","content":"E42"`,
	}
	for name, fields := range cases {
		t.Run(name, func(t *testing.T) {
			m := mustDecodeJSON(t, "{"+fields+"}")
			roundTrip(t, m)
			// The same part as a submessage.
			mustDecodeJSON(t, withSubs("{"+fields+"}"))
		})
	}
}

func TestRejectedGPS(t *testing.T) {
	for _, content := range []string{
		`"46.2"`, `"46.2,6.1,3"`, `"1e1,2"`, `"NaN,0"`, `"0x10,0"`, `"--1,0"`, `",1"`, `"0,180.5"`,
		`{"lat":"46","lon":6}`, `{"lat":null,"lon":6}`, `{"LAT":46,"LON":6}`, `[46,6]`, `46`,
	} {
		_, err := DecodeJSON([]byte(`{"format":"location","subformat":"gps","content":`+content+`}`), Limits{})
		wantError(t, err, CodeInvalidContent, "/content")
	}
}

// Validate on Go values applies the same rules as the decoders, plus the
// checks the decoders do while scanning (UTF-8, nesting).
func TestValidateGoValues(t *testing.T) {
	deep, err := RawJSONContent([]byte(repeat("[", 70) + repeat("]", 70)))
	if err != nil {
		t.Fatal(err)
	}
	cases := map[string]struct {
		m       *Message
		code    string
		pointer string
	}{
		"nil":                {nil, CodeMalformed, ""},
		"zero":               {&Message{}, CodeMissingField, "/format"},
		"no content":         {&Message{Format: "text", Subformat: "en"}, CodeMissingField, "/content"},
		"invalid UTF-8 text": {NewMessage(Text("en", "\xff")), CodeInvalidContent, "/content"},
		"invalid UTF-8 label": {NewMessage(Text("en", "x"), Text("en", "y").WithLabel("\xff")),
			CodeInvalidType, "/submessages/0/label"},
		"invalid UTF-8 subformat": {NewMessage(Generic("\xff", TextContent("x"))), CodeInvalidSubformat, "/subformat"},
		"text as binary":          {NewMessage(Submessage{Format: FormatBinary, Subformat: "image/png", Content: TextContent("AA==")}), CodeInvalidContent, "/content"},
		"binary as generic":       {NewMessage(Generic("x", BinaryContent([]byte{1}))), CodeInvalidContent, "/content"},
		"too deep":                {NewMessage(Generic("x", deep)), CodeTooDeep, "/content"},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			wantError(t, c.m.Validate(Limits{}), c.code, c.pointer)
		})
	}
	// Capitalised enumerations are valid (case is irrelevant) and written
	// lowercase; Validate does not change the message.
	m := &Message{MessageType: "Control", Format: "TEXT", Subformat: "English", Content: TextContent("hi")}
	if err := m.Validate(Limits{}); err != nil {
		t.Fatal(err)
	}
	if m.Format != "TEXT" {
		t.Fatal("Validate modified the message")
	}
	if got := string(mustEncodeJSON(t, m)); got != `{"messagetype":"control","format":"text","subformat":"English","content":"hi"}` {
		t.Fatalf("EncodeJSON = %s", got)
	}
	if _, err := EncodeJSON(&Message{Format: "text"}); CodeOf(err) != CodeMissingField {
		t.Fatalf("EncodeJSON of an invalid message: %v", err)
	}
	if _, err := EncodeCBOR(&Message{Format: "text"}); CodeOf(err) != CodeMissingField {
		t.Fatalf("EncodeCBOR of an invalid message: %v", err)
	}
}

// Encoding is deterministic and byte-exact: lowercase keys in a fixed
// order, no empty optional fields, no nulls.
func TestEncodingGolden(t *testing.T) {
	obj, _ := JSONContent(map[string]any{"b": 1.5, "a": -1})
	m := NewMessage(Text("english", "Say \"hi\"\n"),
		Structured("JSON", obj).WithLabel("ctx"),
		Binary("image", "png", []byte{0xff, 0x00}),
		ConversationToken("", "c-1"))
	m.MessageType = "Request"
	wantJSON := `{"messagetype":"Request","format":"text","subformat":"english","content":"Say \"hi\"\n","submessages":[` +
		`{"format":"structured","subformat":"JSON","content":{"a":-1,"b":1.5},"label":"ctx"},` +
		`{"format":"binary","subformat":"image/png","content":"/wA="},` +
		`{"format":"token","subformat":"conversation","content":"c-1"}]}`
	if got := string(mustEncodeJSON(t, m)); got != wantJSON {
		t.Fatalf("EncodeJSON =\n%s\nwant\n%s", got, wantJSON)
	}
	gotCBOR, err := EncodeCBOR(m)
	if err != nil {
		t.Fatal(err)
	}
	wantCBOR := "a5" + "66666f726d6174" + "6474657874" + // format: text
		"67636f6e74656e74" + "695361792022686922" + "0a" + // content: Say "hi"\n
		"69737562666f726d6174" + "67656e676c697368" + // subformat: english
		"6b6d65737361676574797065" + "6752657175657374" + // messagetype: Request
		"6b7375626d65737361676573" + "83" + // submessages: [3]
		"a4" + "656c6162656c" + "63637478" + "66666f726d6174" + "6a73747275637475726564" +
		"67636f6e74656e74" + "a2" + "6161" + "20" + "6162" + "fb3ff8000000000000" + "69737562666f726d6174" + "644a534f4e" +
		"a3" + "66666f726d6174" + "6662696e617279" + "67636f6e74656e74" + "42ff00" + "69737562666f726d6174" + "69696d6167652f706e67" +
		"a3" + "66666f726d6174" + "65746f6b656e" + "67636f6e74656e74" + "63632d31" + "69737562666f726d6174" + "6c636f6e766572736174696f6e"
	if got := hexString(gotCBOR); got != wantCBOR {
		t.Fatalf("EncodeCBOR =\n%s\nwant\n%s", got, wantCBOR)
	}
}
