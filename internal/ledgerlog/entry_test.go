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
		Counterparty: Origin("b.example", "bob"),
		Time:         FormatTime(time.Date(2026, 11, 30, 16, 4, 5, 123456789, time.UTC)),
	}
}

// sampleDeliverable is a recipient-side decision with every member set.
func sampleDeliverable() Entry {
	return Entry{
		V: EntryVersion, Log: Origin("b.example", "bob"), Index: 3, Kind: KindDeliverable,
		SourceEvent: "0192f0c4-0000-7000-8000-000000000002", EnvelopeID: envID(1), Counterparty: "a.example",
		Outcome: OutcomeHold, Fields: fields(),
		Reasons:      []Reason{{Party: "broker", Code: "commitment_held"}},
		RuleVersions: []string{"recipient_org:b.example:2"},
		Held: []HeldItem{{ID: "h-1", Kind: HeldCommitment, Pointers: []string{"/start", "/duration"}, Commits: "meeting"},
			{ID: "h-2", Kind: HeldConfidentialFields, Pointers: []string{"/budget"}}},
		Views: []View{{TrustClass: "company", Pointers: []string{"/budget", "/subject"}}, {TrustClass: "consumer"}},
		Time:  FormatTime(time.Date(2026, 11, 30, 16, 4, 6, 0, time.UTC)),
	}
}

// sampleDelivery is one agent's acknowledged inbox item.
func sampleDelivery() Entry {
	return Entry{
		V: EntryVersion, Log: Origin("b.example", "bob"), Index: 4, Kind: KindInboxDelivered,
		SourceEvent: "0192f0c4-0000-7000-8000-000000000003", EnvelopeID: envID(1),
		Agent: "https://muse.example/client", TrustClass: "consumer",
		Withheld: []string{"/budget"}, HeldIDs: []string{"h-2"},
		Time: FormatTime(time.Date(2026, 11, 30, 16, 4, 7, 0, time.UTC)),
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
		`"i":7,"kind":"envelope.send_requested","log":"a.example/alp/ledger/alice","source_event":"0192f0c4-0000-7000-8000-000000000001","ts":"2026-11-30T16:04:05.123Z","v":1}`
	if string(leaf) != want {
		t.Fatalf("leaf\n%s\nwant\n%s", leaf, want)
	}
	d := sampleDeliverable()
	dleaf, err := d.Canonical()
	if err != nil {
		t.Fatal(err)
	}
	want = `{"counterparty":"a.example","envelope_id":"` + envID(1) + `",` +
		`"fields":[{"action":"deny","class":"confidential","pointer":"/budget","reasons":[{"code":"confidential_egress","party":"sender_org","policy":"no-confidential-outside"}]},` +
		`{"action":"allow","class":"internal","pointer":"/duration"},{"action":"allow","class":"internal","pointer":"/start"},{"action":"allow","class":"internal","pointer":"/subject"}],` +
		`"held":[{"commits":"meeting","id":"h-1","kind":"commitment","pointers":["/start","/duration"]},{"id":"h-2","kind":"confidential_fields","pointers":["/budget"]}],` +
		`"i":3,"kind":"policy.deliverable","log":"b.example/alp/ledger/bob","outcome":"hold","reasons":[{"code":"commitment_held","party":"broker"}],` +
		`"rule_versions":["recipient_org:b.example:2"],"source_event":"0192f0c4-0000-7000-8000-000000000002","ts":"2026-11-30T16:04:06.000Z","v":1,` +
		`"views":[{"pointers":["/budget","/subject"],"trust_class":"company"},{"trust_class":"consumer"}]}`
	if string(dleaf) != want {
		t.Fatalf("leaf\n%s\nwant\n%s", dleaf, want)
	}
	del := sampleDelivery()
	delLeaf, err := del.Canonical()
	if err != nil {
		t.Fatal(err)
	}
	want = `{"agent":"https://muse.example/client","envelope_id":"` + envID(1) + `","held_ids":["h-2"],"i":4,"kind":"inbox.delivered",` +
		`"log":"b.example/alp/ledger/bob","source_event":"0192f0c4-0000-7000-8000-000000000003","trust_class":"consumer",` +
		`"ts":"2026-11-30T16:04:07.000Z","v":1,"withheld":["/budget"]}`
	if string(delLeaf) != want {
		t.Fatalf("leaf\n%s\nwant\n%s", delLeaf, want)
	}
	for _, l := range [][]byte{leaf, dleaf, delLeaf} {
		back, err := ParseEntry(l)
		if err != nil {
			t.Fatal(err)
		}
		again, _ := back.Canonical()
		if string(again) != string(l) {
			t.Fatal("round trip changed the leaf")
		}
	}
	// HTML-ish characters are not escaped in canonical form.
	d.Fields[0].Reasons[0].Policy = "a<b&c>"
	dleaf, _ = d.Canonical()
	if !strings.Contains(string(dleaf), `"policy":"a<b&c>"`) {
		t.Fatalf("%s", dleaf)
	}
	if _, err := ParseEntry(dleaf); err != nil {
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
		"escaped char":    strings.Replace(s, `"envelope_id"`, `"\u0065nvelope_id"`, 1),
		"trailing":        s + " ",
		"trailing value":  s + "{}",
		"float index":     strings.Replace(s, `"i":7`, `"i":7.0`, 1),
		"wrong version":   strings.Replace(s, `"v":1`, `"v":2`, 1),
		"unknown kind":    strings.Replace(s, `envelope.send_requested`, `envelope.sent`, 1),
		"bad ts":          strings.Replace(s, `16:04:05.123Z`, `16:04:05Z`, 1),
		"ts offset":       strings.Replace(s, `16:04:05.123Z`, `16:04:05.123+00:00`, 1),
		"bad commitment":  strings.Replace(s, `"commitment":"sha256:`, `"commitment":"sha512:`, 1),
		"bad log":         strings.Replace(s, `a.example/alp/ledger/alice`, `alice`, 1),
		"control char":    strings.Replace(s, `"b.example/alp/ledger/bob"`, `"b.example/alp/ledger/b\nob"`, 1),
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
		"long string":          func(e *Entry) { e.Counterparty = strings.Repeat("x", 600) },
		"receipt on envelope":  func(e *Entry) { e.Receipt = rc },
		"received w/o receipt": func(e *Entry) { e.Kind = KindReceiptReceived },
		"bad receipt":          func(e *Entry) { e.Kind = KindReceiptIssued; e.Receipt = rc },
		"fields on envelope":   func(e *Entry) { e.Fields = fields() },
		"outcome on envelope":  func(e *Entry) { e.Outcome = OutcomeRefuse },
		"reasons on envelope":  func(e *Entry) { e.Reasons = []Reason{{Party: "broker"}} },
		"rules on envelope":    func(e *Entry) { e.RuleVersions = []string{"sender:alice:1"} },
	} {
		e := sampleEntry()
		mut(&e)
		if _, err := e.Canonical(); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	for name, mut := range map[string]func(*Entry){
		"no outcome":            func(e *Entry) { e.Outcome = "" },
		"unknown outcome":       func(e *Entry) { e.Outcome = "deliver_some" },
		"unknown action":        func(e *Entry) { e.Fields[1].Action = "withheld" },
		"no action":             func(e *Entry) { e.Fields[1].Action = "" },
		"reason without party":  func(e *Entry) { e.Fields[0].Reasons[0].Party = "" },
		"message reason party":  func(e *Entry) { e.Reasons[0].Party = "" },
		"control in pointer":    func(e *Entry) { e.Fields[0].Pointer = "/bud\nget" },
		"unknown held kind":     func(e *Entry) { e.Held[0].Kind = "payment" },
		"held without id":       func(e *Entry) { e.Held[0].ID = "" },
		"view without class":    func(e *Entry) { e.Views[0].TrustClass = "" },
		"empty rule version":    func(e *Entry) { e.RuleVersions = []string{""} },
		"commitment on policy":  func(e *Entry) { e.Commitment = Commit(make([]byte, SaltSize), [32]byte{}) },
		"receipt on policy":     func(e *Entry) { e.Receipt = rc },
		"held on decided":       func(e *Entry) { e.Kind = KindDecided },
		"too many reasons":      func(e *Entry) { e.Reasons = make([]Reason, maxList+1) },
		"too many held":         func(e *Entry) { e.Held = make([]HeldItem, maxList+1) },
		"long pointer":          func(e *Entry) { e.Views[0].Pointers = []string{"/" + strings.Repeat("x", 600)} },
		"too many view pointer": func(e *Entry) { e.Views[0].Pointers = make([]string, maxFields+1) },
	} {
		e := sampleDeliverable()
		mut(&e)
		if _, err := e.Canonical(); err == nil {
			t.Errorf("deliverable, %s: accepted", name)
		}
	}
	if _, err := sampleDeliverable().Canonical(); err != nil {
		t.Fatal(err)
	}
	for name, mut := range map[string]func(*Entry){
		"no agent":              func(e *Entry) { e.Agent = "" },
		"no trust class":        func(e *Entry) { e.TrustClass = "" },
		"control in agent":      func(e *Entry) { e.Agent = "mu\nse" },
		"empty held id":         func(e *Entry) { e.HeldIDs = []string{""} },
		"too many held ids":     func(e *Entry) { e.HeldIDs = make([]string, maxList+1) },
		"too many withheld":     func(e *Entry) { e.Withheld = make([]string, maxFields+1) },
		"long withheld pointer": func(e *Entry) { e.Withheld = []string{"/" + strings.Repeat("x", 600)} },
		"commitment":            func(e *Entry) { e.Commitment = Commit(make([]byte, SaltSize), [32]byte{}) },
		"decision members":      func(e *Entry) { e.Outcome = OutcomeDeliver },
		"views":                 func(e *Entry) { e.Views = []View{{TrustClass: "consumer"}} },
		"receipt":               func(e *Entry) { e.Receipt = rc },
	} {
		e := sampleDelivery()
		mut(&e)
		if _, err := e.Canonical(); err == nil {
			t.Errorf("delivery, %s: accepted", name)
		}
	}
	for name, e := range map[string]Entry{"envelope": sampleEntry(), "deliverable": sampleDeliverable()} {
		for what, mut := range map[string]func(*Entry){
			"agent":       func(e *Entry) { e.Agent = "muse" },
			"trust class": func(e *Entry) { e.TrustClass = "consumer" },
			"withheld":    func(e *Entry) { e.Withheld = []string{"/budget"} },
			"held ids":    func(e *Entry) { e.HeldIDs = []string{"h-1"} },
		} {
			c := e
			mut(&c)
			if _, err := c.Canonical(); err == nil {
				t.Errorf("%s with %s: accepted", name, what)
			}
		}
	}
	if _, err := sampleDelivery().Canonical(); err != nil {
		t.Fatal(err)
	}
	e := sampleEntry()
	e.Commitment = "" // erased before recording
	if _, err := e.Canonical(); err != nil {
		t.Fatal(err)
	}
}
