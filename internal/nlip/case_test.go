package nlip

import "testing"

// ECMA-430 §5: "Capitalization is not relevant to the name or value of the
// field." Every spelling of one message must decode to the same value.
func TestKeyCaseEquivalence(t *testing.T) {
	lower := `{"messagetype":"control","format":"text","subformat":"english","content":"hi",
		"submessages":[{"label":"l","format":"token","subformat":"conversation","content":"c1"}]}`
	spellings := map[string]string{
		"PascalCase": `{"MessageType":"control","Format":"text","Subformat":"english","Content":"hi",
			"Submessages":[{"Label":"l","Format":"token","Subformat":"conversation","Content":"c1"}]}`,
		"UPPER": `{"MESSAGETYPE":"CONTROL","FORMAT":"TEXT","SUBFORMAT":"english","CONTENT":"hi",
			"SUBMESSAGES":[{"LABEL":"l","FORMAT":"TOKEN","SUBFORMAT":"conversation","CONTENT":"c1"}]}`,
		"mixed and reordered": `{"submessages":[{"Content":"c1","fOrMaT":"Token","SubFormat":"conversation","LaBeL":"l"}],
			"content":"hi","Subformat":"english","FORMAT":"Text","messageType":"Control"}`,
		"escaped key": `{"messagetype":"control","\u0066ormat":"text","subformat":"english","content":"hi",
			"submessages":[{"label":"l","format":"token","subformat":"conversation","content":"c1"}]}`,
	}
	want := mustDecodeJSON(t, lower)
	if want.Format != FormatText || want.MessageType != MessageTypeControl || want.Submessages[0].Format != FormatToken {
		t.Fatalf("lowercase decoded to %+v", want)
	}
	for name, data := range spellings {
		t.Run(name, func(t *testing.T) {
			if got := mustDecodeJSON(t, data); !got.Equal(want) {
				t.Fatalf("decoded to %+v, want %+v", got, want)
			}
		})
	}
}

// Enumerated values are normalised; other values keep their spelling.
func TestValueNormalisation(t *testing.T) {
	m := mustDecodeJSON(t, `{"messagetype":"Request","format":"STRUCTURED","subformat":"Json","content":{"b":1,"a":2},
		"submessages":[{"format":"Binary","subformat":"Image/PNG","content":"iVBORw=="}]}`)
	if m.MessageType != "Request" {
		t.Errorf("messagetype = %q, want the sender's spelling", m.MessageType)
	}
	if m.Format != FormatStructured || m.Submessages[0].Format != FormatBinary {
		t.Errorf("formats = %q, %q, want lowercase", m.Format, m.Submessages[0].Format)
	}
	if m.Subformat != "Json" || m.Submessages[0].Subformat != "Image/PNG" {
		t.Errorf("subformats = %q, %q, want the sender's spelling", m.Subformat, m.Submessages[0].Subformat)
	}
	if m.IsControl() {
		t.Error("a Request is not a control message")
	}
	if !mustDecodeJSON(t, `{"messagetype":"cOnTrOl","format":"text","subformat":"en","content":""}`).IsControl() {
		t.Error("cOnTrOl is a control message")
	}
}

// Look-alike keys must not match: only ASCII case is folded.
func TestUnicodeFoldingIsNotKeyMatching(t *testing.T) {
	// "ſubformat" (long s) folds to "subformat" under Unicode rules.
	_, err := DecodeJSON([]byte(`{"format":"text","ſubformat":"english","content":"hi"}`), Limits{})
	wantError(t, err, CodeMissingField, "/subformat")
	m := mustDecodeJSON(t, `{"meſſagetype":"control","format":"text","subformat":"en","content":"hi",
		"ſubmessages":[{"format":"text","subformat":"en","content":"x"}]}`)
	if m.IsControl() || m.Submessages != nil {
		t.Errorf("look-alike keys were matched: %+v", m)
	}
}

func TestCaseInsensitiveDuplicates(t *testing.T) {
	cases := map[string]struct{ input, pointer string }{
		"top format":          {`{"format":"text","Format":"text","subformat":"en","content":"x"}`, "/format"},
		"top content":         {`{"format":"text","subformat":"en","content":"x","CONTENT":"y"}`, "/content"},
		"exact repeat":        {`{"format":"text","subformat":"en","subformat":"en","content":"x"}`, "/subformat"},
		"messagetype":         {`{"messagetype":"a","MessageType":"b","format":"text","subformat":"en","content":"x"}`, "/messagetype"},
		"submessages":         {`{"format":"text","subformat":"en","content":"x","submessages":null,"Submessages":null}`, "/submessages"},
		"top label":           {`{"label":"a","Label":"b","format":"text","subformat":"en","content":"x"}`, "/label"},
		"submessage label":    {`{"format":"text","subformat":"en","content":"x","submessages":[{"label":"a","LABEL":"b","format":"text","subformat":"en","content":"y"}]}`, "/submessages/0/label"},
		"unknown key":         {`{"format":"text","subformat":"en","content":"x","extra":1,"EXTRA":2}`, "/EXTRA"},
		"unknown with escape": {`{"format":"text","subformat":"en","content":"x","a/b":1,"A/B":2}`, "/A~1B"},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			_, err := DecodeJSON([]byte(c.input), Limits{})
			wantError(t, err, CodeDuplicateField, c.pointer)
		})
	}
}

// Null optional fields are absent (nlip_server sends them); null content is
// a value (the schema allows it) that only some formats accept.
func TestNullFields(t *testing.T) {
	m := mustDecodeJSON(t, `{"messagetype":null,"label":null,"format":"generic","subformat":"x","content":null,"submessages":null}`)
	want := &Message{Format: FormatGeneric, Subformat: "x", Content: NullContent()}
	if !m.Equal(want) || !m.Content.IsNull() {
		t.Fatalf("decoded %+v, want %+v", m, want)
	}
	m = mustDecodeJSON(t, `{"format":"text","subformat":"en","content":"x","submessages":[{"label":null,"format":"text","subformat":"en","content":"y"}]}`)
	if m.Submessages[0].Label != "" {
		t.Fatalf("null label = %q", m.Submessages[0].Label)
	}
	_, err := DecodeJSON([]byte(`{"format":null,"subformat":"en","content":"x"}`), Limits{})
	wantError(t, err, CodeMissingField, "/format")
	if m := mustDecodeJSON(t, `{"format":"text","subformat":"en","content":"x","submessages":[]}`); m.Submessages != nil {
		t.Fatalf("empty submessages = %#v, want nil", m.Submessages)
	}
}
