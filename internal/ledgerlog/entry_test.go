package ledgerlog

import (
	"strings"
	"testing"
	"time"
)

func sampleEntry() Entry {
	return Entry{
		V: EntryVersion, Log: Origin("a.example", "alice"), Index: 7, Kind: KindSendRequested,
		SourceEvent: "0192f0c4-0000-7000-8000-000000000001", EnvelopeID: envID(1),
		Commitment:   Commit(make([]byte, SaltSize), [32]byte{}),
		Counterparty: Origin("b.example", "bob"), Fields: fields(),
		Time: FormatTime(time.Date(2026, 11, 30, 16, 4, 5, 123456789, time.UTC)),
	}
}

func TestOrigin(t *testing.T) {
	if got := Origin("a.example", "3f2a9c"); got != "a.example/alp/ledger/3f2a9c" {
		t.Fatal(got)
	}
	if KeyName("a.example") != "a.example/alp/ledger" {
		t.Fatal(KeyName("a.example"))
	}
	for _, c := range [][2]string{{"A.example", "p"}, {"a.example", ""}, {"a.example", "a/b"}, {"a.example", "a b"},
		{"a.example", "a+b"}, {"a.example", ".hidden"}, {"", "p"}, {"a.example", strings.Repeat("x", 129)}} {
		if Origin(c[0], c[1]) != "" || ValidateOriginParts(c[0], c[1]) == nil {
			t.Errorf("origin %q %q accepted", c[0], c[1])
		}
	}
	tenant, person, err := ParseOrigin("a.example/alp/ledger/alice")
	if err != nil || tenant != "a.example" || person != "alice" {
		t.Fatal(tenant, person, err)
	}
	for _, o := range []string{"a.example/alice", "a.example/alp/ledger/", "a.example/alp/ledger/a/b", "/alp/ledger/x"} {
		if _, _, err := ParseOrigin(o); err == nil {
			t.Errorf("ParseOrigin(%q) accepted", o)
		}
	}
}

func TestEntryCanonicalRoundTrip(t *testing.T) {
	e := sampleEntry()
	leaf, err := e.Canonical()
	if err != nil {
		t.Fatal(err)
	}
	want := `{"commitment":"` + e.Commitment + `","counterparty":"b.example/alp/ledger/bob","envelope_id":"` + envID(1) + `",` +
		`"fields":[{"class":"internal","path":"duration_min","verdict":"sent"},{"class":"internal","path":"start","verdict":"sent"},` +
		`{"class":"internal","path":"title","verdict":"sent"},{"class":"confidential","layer":"sender_org","path":"budget","rule":"no-confidential-outside","verdict":"withheld"}],` +
		`"i":7,"kind":"envelope.send_requested","log":"a.example/alp/ledger/alice","source_event":"0192f0c4-0000-7000-8000-000000000001","ts":"2026-11-30T16:04:05.123Z","v":1}`
	if string(leaf) != want {
		t.Fatalf("leaf\n%s\nwant\n%s", leaf, want)
	}
	back, err := ParseEntry(leaf)
	if err != nil {
		t.Fatal(err)
	}
	again, _ := back.Canonical()
	if string(again) != string(leaf) {
		t.Fatal("round trip changed the leaf")
	}
	// HTML-ish characters are not escaped in canonical form.
	e.Fields[0].Rule = "a<b&c>"
	leaf, _ = e.Canonical()
	if !strings.Contains(string(leaf), `"rule":"a<b&c>"`) {
		t.Fatalf("%s", leaf)
	}
	if _, err := ParseEntry(leaf); err != nil {
		t.Fatal(err)
	}
}

func TestParseEntryStrict(t *testing.T) {
	leaf, _ := sampleEntry().Canonical()
	s := string(leaf)
	for name, bad := range map[string]string{
		"whitespace":      strings.Replace(s, `"v":1`, `"v": 1`, 1),
		"key order":       `{"v":1,` + strings.Replace(s, `,"v":1`, "", 1)[1:],
		"unknown field":   strings.Replace(s, `"v":1`, `"v":1,"x":1`, 1),
		"duplicate field": strings.Replace(s, `"v":1`, `"v":1,"v":1`, 1),
		"escaped char":    strings.Replace(s, `"duration_min"`, `"\u0064uration_min"`, 1),
		"trailing":        s + " ",
		"trailing value":  s + "{}",
		"float index":     strings.Replace(s, `"i":7`, `"i":7.0`, 1),
		"wrong version":   strings.Replace(s, `"v":1`, `"v":2`, 1),
		"unknown kind":    strings.Replace(s, `envelope.send_requested`, `envelope.sent`, 1),
		"bad ts":          strings.Replace(s, `16:04:05.123Z`, `16:04:05Z`, 1),
		"ts offset":       strings.Replace(s, `16:04:05.123Z`, `16:04:05.123+00:00`, 1),
		"bad commitment":  strings.Replace(s, `"commitment":"sha256:`, `"commitment":"sha512:`, 1),
		"bad log":         strings.Replace(s, `a.example/alp/ledger/alice`, `alice`, 1),
		"control char":    strings.Replace(s, `"budget"`, `"bud\nget"`, 1),
		"not json":        "nope",
		"empty":           "",
	} {
		if _, err := ParseEntry([]byte(bad)); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	if _, err := ParseEntry([]byte(`{"v":1,"x":"` + strings.Repeat("a", MaxLeafBytes) + `"}`)); err == nil {
		t.Error("huge leaf accepted")
	}
}

func TestEntryValidate(t *testing.T) {
	rc := &Receipt{Type: ReceiptType}
	for name, mut := range map[string]func(*Entry){
		"no source event":      func(e *Entry) { e.SourceEvent = "" },
		"no envelope":          func(e *Entry) { e.EnvelopeID = "" },
		"index beyond 2^53":    func(e *Entry) { e.Index = 1 << 53 },
		"field without path":   func(e *Entry) { e.Fields[0].Path = "" },
		"field without verdic": func(e *Entry) { e.Fields[0].Verdict = "" },
		"long string":          func(e *Entry) { e.Counterparty = strings.Repeat("x", 600) },
		"receipt on envelope":  func(e *Entry) { e.Receipt = rc },
		"received w/o receipt": func(e *Entry) { e.Kind = KindReceiptReceived },
		"bad receipt":          func(e *Entry) { e.Kind = KindReceiptIssued; e.Receipt = rc },
	} {
		e := sampleEntry()
		e.Fields = fields()
		mut(&e)
		if _, err := e.Canonical(); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	e := sampleEntry()
	e.Commitment = "" // erased before recording
	if _, err := e.Canonical(); err != nil {
		t.Fatal(err)
	}
}
