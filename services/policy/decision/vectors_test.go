package decision_test

// The conformance vectors of spec/vectors/policy (format: its README.md):
// every case of every file runs through decision.Decide with real rule
// sets, the real type registry and the shipped templates, and its whole
// expectation must match.

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/alpd-project/alpd/internal/msgtypes"
	"github.com/alpd-project/alpd/services/policy/decision"
	"github.com/alpd-project/alpd/services/policy/dlp"
	"github.com/alpd-project/alpd/services/policy/relationships"
	"github.com/alpd-project/alpd/services/policy/rules"
)

const vectorDir = "../../../spec/vectors/policy"

// vectorFile is one file of cases. Defaults are case members every case
// of the file takes unless it sets the member itself (whole members, not
// merged deeper).
type vectorFile struct {
	About    string                       `json:"about"`
	Defaults map[string]json.RawMessage   `json:"defaults"`
	Cases    []map[string]json.RawMessage `json:"cases"`
}

type vectorCase struct {
	Name        string `json:"name"`
	Description string `json:"description"`
	// Rules maps a party to its Cedar text; a party not listed uses its
	// shipped template.
	Rules           map[rules.Party]cedarText `json:"rules"`
	Relationship    relationship              `json:"relationship"`
	SenderAgent     rules.Agent               `json:"sender_agent"`
	RecipientAgents []string                  `json:"recipient_agents"` // absent: unknown
	Sender          rules.Side                `json:"sender"`
	Recipient       rules.Side                `json:"recipient"`
	Type            typeRef                   `json:"type"`
	Body            json.RawMessage           `json:"body"`
	// StandingRules are the recipient's standing approvals, OrgCommits the
	// recipient organization's rules covering the pair with the commit
	// actions they pre-approve, At the time of the decision.
	StandingRules []decision.StandingRule  `json:"standing_rules"`
	OrgCommits    []relationships.OrgCover `json:"org_commits"`
	At            time.Time                `json:"at"`
	Expect        expectation              `json:"expect"`
}

// cedarText is a policy set as one string or as a list of lines.
type cedarText string

func (c *cedarText) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err == nil {
		*c = cedarText(s)
		return nil
	}
	var lines []string
	if err := json.Unmarshal(b, &lines); err != nil {
		return errors.New("a rule set is a string or a list of lines")
	}
	*c = cedarText(strings.Join(lines, "\n"))
	return nil
}

// relationship is the state each side's projection answers; a string
// sets both.
type relationship struct {
	SenderSide    relationships.State `json:"sender_side"`
	RecipientSide relationships.State `json:"recipient_side"`
}

func (r *relationship) UnmarshalJSON(b []byte) error {
	var s relationships.State
	if err := json.Unmarshal(b, &s); err == nil {
		*r = relationship{SenderSide: s, RecipientSide: s}
		return nil
	}
	type plain relationship
	var p plain
	if err := strictDecode(b, &p); err != nil {
		return err
	}
	*r = relationship(p)
	return nil
}

// typeRef is a type name, or an organization's type with its schema,
// registered under the sender's tenant before the case runs.
type typeRef struct {
	Name   string          `json:"name"`
	Schema json.RawMessage `json:"schema"`
}

func (t *typeRef) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err == nil {
		*t = typeRef{Name: s}
		return nil
	}
	type plain typeRef
	var p plain
	if err := strictDecode(b, &p); err != nil {
		return err
	}
	*t = typeRef(p)
	return nil
}

type expectation struct {
	RegistrationError *registrationError      `json:"registration_error"`
	Outcome           decision.Outcome        `json:"outcome"`
	Reasons           []decision.Reason       `json:"reasons"`
	Fields            map[string]fieldVerdict `json:"fields"`
	Views             map[string][]string     `json:"views"`
	Held              []decision.Held         `json:"held"`
	UntrustedText     bool                    `json:"untrusted_text"`
	Forwarded         json.RawMessage         `json:"forwarded"`
}

type registrationError struct {
	Code    msgtypes.Code `json:"code"`
	Pointer string        `json:"pointer"`
}

type fieldVerdict struct {
	Class    string            `json:"class"`
	FreeText bool              `json:"freetext"`
	Action   decision.Action   `json:"action"`
	Reasons  []decision.Reason `json:"reasons"`
	DLP      []string          `json:"dlp"`
}

func strictDecode(b []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if dec.More() {
		return errors.New("trailing data")
	}
	return nil
}

// loadVectors reads every file of the vector directory.
func loadVectors(t *testing.T) map[string][]vectorCase {
	t.Helper()
	paths, err := filepath.Glob(filepath.Join(vectorDir, "*.json"))
	if err != nil {
		t.Fatal(err)
	}
	if len(paths) == 0 {
		t.Fatalf("no vector files in %s", vectorDir)
	}
	out := map[string][]vectorCase{}
	for _, p := range paths {
		file := filepath.Base(p)
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		var vf vectorFile
		if err := strictDecode(b, &vf); err != nil {
			t.Fatalf("%s: %v", file, err)
		}
		if vf.About == "" || len(vf.Cases) == 0 {
			t.Fatalf("%s: needs an about and at least one case", file)
		}
		for _, k := range []string{"name", "description", "expect"} {
			if _, ok := vf.Defaults[k]; ok {
				t.Fatalf("%s: defaults may not set %q", file, k)
			}
		}
		seen := map[string]bool{}
		for i, raw := range vf.Cases {
			merged := map[string]json.RawMessage{}
			for k, v := range vf.Defaults {
				merged[k] = v
			}
			for k, v := range raw {
				merged[k] = v
			}
			mb, _ := json.Marshal(merged)
			var c vectorCase
			if err := strictDecode(mb, &c); err != nil {
				t.Fatalf("%s: case %d: %v", file, i, err)
			}
			if c.Name == "" || c.Description == "" {
				t.Fatalf("%s: case %d needs a name and a description", file, i)
			}
			if (c.Expect.RegistrationError == nil) == (c.Expect.Outcome == "") {
				t.Fatalf("%s: case %q: expect needs an outcome or a registration_error, not both", file, c.Name)
			}
			if seen[c.Name] {
				t.Fatalf("%s: case %q twice", file, c.Name)
			}
			seen[c.Name] = true
			out[file] = append(out[file], c)
		}
	}
	return out
}

func TestVectors(t *testing.T) {
	eng, err := rules.New(rules.Limits{})
	if err != nil {
		t.Fatal(err)
	}
	cache := rules.NewCache(eng, 64)
	total := 0
	for file, cases := range loadVectors(t) {
		for _, c := range cases {
			total++
			t.Run(strings.TrimSuffix(file, ".json")+"/"+c.Name, func(t *testing.T) {
				runVector(t, cache, fmt.Sprintf("%s: case %q", file, c.Name), c)
			})
		}
	}
	if total < 60 {
		t.Errorf("%d vectors; issue 12 asks for at least 60", total)
	}
}

func runVector(t *testing.T, cache *rules.Cache, where string, c vectorCase) {
	// Every message is decided by the four parties, so a vector lists
	// only the sets it changes.
	var sets decision.Sets
	for _, p := range []rules.Party{rules.PartySender, rules.PartySenderOrg, rules.PartyRecipientOrg, rules.PartyRecipient} {
		text, ok := c.Rules[p]
		var b []byte
		if ok {
			b = []byte(text)
		} else {
			var err error
			if b, err = rules.Template(p); err != nil {
				t.Fatal(err)
			}
		}
		comp, err := cache.Get(p, b)
		if err != nil {
			t.Fatalf("%s: %s rule set: %v", where, p, err)
		}
		switch p {
		case rules.PartySender:
			sets.Sender = comp
		case rules.PartySenderOrg:
			sets.SenderOrg = comp
		case rules.PartyRecipientOrg:
			sets.RecipientOrg = comp
		case rules.PartyRecipient:
			sets.Recipient = comp
		}
	}
	for p := range c.Rules {
		if !p.Valid() {
			t.Fatalf("%s: rules for unknown party %q", where, p)
		}
	}

	reg, err := msgtypes.New()
	if err != nil {
		t.Fatal(err)
	}
	if c.Type.Schema != nil {
		before, _ := reg.Lookup(c.Type.Name)
		_, err := reg.Register(c.Sender.Tenant, c.Type.Name, c.Type.Schema)
		var re *msgtypes.RegistrationError
		switch want := c.Expect.RegistrationError; {
		case want != nil && errors.As(err, &re):
			if re.Code != want.Code || re.Pointer != want.Pointer {
				t.Errorf("%s: registration error: want %s at %q, got %s at %q (%v)", where, want.Code, want.Pointer, re.Code, re.Pointer, err)
			}
			if after, _ := reg.Lookup(c.Type.Name); after != before {
				t.Errorf("%s: refused type %s changed the registry", where, c.Type.Name)
			}
			return
		case want != nil:
			t.Fatalf("%s: want registration error %s at %q, got %v", where, want.Code, want.Pointer, err)
		case err != nil:
			t.Fatalf("%s: registering %s: %v", where, c.Type.Name, err)
		}
	} else if c.Expect.RegistrationError != nil {
		t.Fatalf("%s: a registration error needs a type with a schema", where)
	}
	typ, _ := reg.Lookup(c.Type.Name) // nil: an unknown type, refused by Decide

	d, err := decision.Decide(context.Background(), decision.Case{
		Message: decision.Message{Type: typ, Body: c.Body, Agent: c.SenderAgent,
			Sender: c.Sender, Recipient: c.Recipient,
			StandingRules: c.StandingRules, OrgCommits: c.OrgCommits, At: c.At},
		SenderRelationship:    c.Relationship.SenderSide,
		RecipientRelationship: c.Relationship.RecipientSide,
		Sets:                  sets,
		RecipientAgentClasses: c.RecipientAgents,
	})
	if err != nil {
		t.Fatalf("%s: Decide: %v", where, err)
	}

	// The vector's verdicts are every party's own (policy ids included).
	full := d.Sender
	var views []decision.View
	if d.Recipient != nil {
		full = decision.Merge(d.Sender, *d.Recipient, false)
		views = d.Recipient.Views
	}
	got := fromResult(full, views)
	want := c.Expect
	want.Forwarded = nil
	for _, p := range compare(want, got, true) {
		t.Errorf("%s: %s", where, p)
	}
	if c.Expect.Forwarded != nil && !sameJSON(c.Expect.Forwarded, d.Forwarded) {
		t.Errorf("%s: forwarded body:\n want %s\n  got %s", where, c.Expect.Forwarded, d.Forwarded)
	}

	// What the sender's agent hears is the same without the recipient
	// parties' policy ids.
	for _, p := range compare(withheld(c.Expect), fromResult(d.Combined, nil), false) {
		t.Errorf("%s: combined (the sender's view): %s", where, p)
	}
	if t.Failed() {
		t.Logf("%s: got (unredacted)\n%s", where, vectorJSON(got))
	}
}

// fromResult puts a result in the vector's shape.
func fromResult(r decision.Result, views []decision.View) expectation {
	e := expectation{Outcome: r.Outcome, Reasons: r.Reasons, Held: r.Held, UntrustedText: r.Untrusted,
		Fields: map[string]fieldVerdict{}}
	for _, f := range r.Fields {
		e.Fields[f.Pointer] = fieldVerdict{Class: f.Class, FreeText: f.FreeText, Action: f.Action, Reasons: f.Reasons, DLP: f.DLP}
	}
	if len(views) > 0 {
		e.Views = map[string][]string{}
		for _, v := range views {
			e.Views[v.TrustClass] = v.Pointers
		}
	}
	return e
}

// vectorJSON renders a result in the vector's own shape (empty members
// left out), ready to compare by eye or paste.
func vectorJSON(e expectation) []byte {
	m := map[string]any{"outcome": e.Outcome}
	if len(e.Reasons) > 0 {
		m["reasons"] = e.Reasons
	}
	fields := map[string]any{}
	for p, f := range e.Fields {
		fm := map[string]any{"class": f.Class, "action": f.Action}
		if f.FreeText {
			fm["freetext"] = true
		}
		if len(f.Reasons) > 0 {
			fm["reasons"] = f.Reasons
		}
		if len(f.DLP) > 0 {
			fm["dlp"] = f.DLP
		}
		fields[p] = fm
	}
	m["fields"] = fields
	if len(e.Views) > 0 {
		m["views"] = e.Views
	}
	if len(e.Held) > 0 {
		m["held"] = e.Held
	}
	if e.UntrustedText {
		m["untrusted_text"] = true
	}
	out, _ := json.MarshalIndent(m, "", "  ")
	return out
}

// withheld is the expectation as the sender may see it.
func withheld(e expectation) expectation {
	hide := func(rs []decision.Reason) []decision.Reason {
		var out []decision.Reason
		for _, r := range rs {
			if r.Party == string(rules.PartyRecipient) || r.Party == string(rules.PartyRecipientOrg) {
				r.PolicyID = ""
			}
			out = append(out, r)
		}
		return out
	}
	out := e
	out.Reasons = hide(e.Reasons)
	out.Fields = map[string]fieldVerdict{}
	for p, f := range e.Fields {
		f.Reasons = hide(f.Reasons)
		out.Fields[p] = f
	}
	return out
}

// compare lists every difference; order of reasons, views' and held
// items' pointers and dlp detectors is not significant.
func compare(want, got expectation, withViews bool) []string {
	var ps []string
	add := func(format string, args ...any) { ps = append(ps, fmt.Sprintf(format, args...)) }
	if want.Outcome != got.Outcome {
		add("outcome: want %q, got %q", want.Outcome, got.Outcome)
	}
	if w, g := reasonSet(want.Reasons), reasonSet(got.Reasons); !slices.Equal(w, g) {
		add("message reasons: want %v, got %v", w, g)
	}
	for _, p := range sortedKeys(want.Fields, got.Fields) {
		w, wok := want.Fields[p]
		g, gok := got.Fields[p]
		switch {
		case !gok:
			add("field %s: expected, but the decision has no verdict for it", p)
			continue
		case !wok:
			add("field %s: not in the vector, decided %s %v (list every field)", p, g.Action, reasonSet(g.Reasons))
			continue
		}
		if w.Class != g.Class {
			add("field %s: class: want %q, got %q", p, w.Class, g.Class)
		}
		if w.FreeText != g.FreeText {
			add("field %s: freetext: want %v, got %v", p, w.FreeText, g.FreeText)
		}
		if w.Action != g.Action {
			add("field %s: action: want %q, got %q", p, w.Action, g.Action)
		}
		if wr, gr := reasonSet(w.Reasons), reasonSet(g.Reasons); !slices.Equal(wr, gr) {
			add("field %s: reasons: want %v, got %v", p, wr, gr)
		}
		if wd, gd := sortedSet(w.DLP), sortedSet(g.DLP); !slices.Equal(wd, gd) {
			add("field %s: dlp: want %v, got %v", p, wd, gd)
		}
	}
	if withViews {
		for _, tc := range sortedKeys(want.Views, got.Views) {
			w, wok := want.Views[tc]
			g, gok := got.Views[tc]
			if !wok || !gok || !slices.Equal(sortedSet(w), sortedSet(g)) {
				add("view %s: want %v, got %v", tc, viewString(w, wok), viewString(g, gok))
			}
		}
	}
	if w, g := heldSet(want.Held), heldSet(got.Held); !slices.Equal(w, g) {
		add("held: want %v, got %v", w, g)
	}
	if want.UntrustedText != got.UntrustedText {
		add("untrusted_text: want %v, got %v", want.UntrustedText, got.UntrustedText)
	}
	return ps
}

func viewString(ps []string, ok bool) string {
	if !ok {
		return "no view"
	}
	return fmt.Sprint(sortedSet(ps))
}

var partyOrder = map[string]int{"broker": 0, "sender": 1, "sender_org": 2, "recipient_org": 3, "recipient": 4}

func reasonSet(rs []decision.Reason) []string {
	s := slices.Clone(rs)
	slices.SortFunc(s, func(a, b decision.Reason) int {
		return cmp.Or(cmp.Compare(partyOrder[a.Party], partyOrder[b.Party]), strings.Compare(a.PolicyID, b.PolicyID), strings.Compare(a.Code, b.Code))
	})
	out := make([]string, len(s))
	for i, r := range s {
		out[i] = r.Party + ":" + r.PolicyID + ":" + r.Code
	}
	return out
}

func heldSet(hs []decision.Held) []string {
	out := make([]string, len(hs))
	for i, h := range hs {
		out[i] = fmt.Sprintf("%s%v commits=%q", h.Kind, sortedSet(h.Pointers), h.Commits)
	}
	slices.Sort(out)
	return out
}

func sortedSet(s []string) []string {
	out := slices.Clone(s)
	slices.Sort(out)
	return out
}

func sortedKeys[V any](a, b map[string]V) []string {
	var ks []string
	for k := range a {
		ks = append(ks, k)
	}
	for k := range b {
		if _, ok := a[k]; !ok {
			ks = append(ks, k)
		}
	}
	slices.Sort(ks)
	return ks
}

func sameJSON(a, b []byte) bool {
	var x, y any
	if json.Unmarshal(a, &x) != nil || json.Unmarshal(b, &y) != nil {
		return false
	}
	return reflect.DeepEqual(x, y)
}

// TestVectorsCover holds the vectors to what issue 12 asks them to cover:
// every hard rule's code and every DLP detector appears in some
// expectation.
func TestVectorsCover(t *testing.T) {
	codes := map[string]bool{}
	detectors := map[string]bool{}
	regErrors := 0
	for _, cases := range loadVectors(t) {
		for _, c := range cases {
			if c.Expect.RegistrationError != nil {
				regErrors++
			}
			for _, r := range c.Expect.Reasons {
				codes[r.Code] = true
			}
			for _, f := range c.Expect.Fields {
				for _, r := range f.Reasons {
					codes[r.Code] = true
				}
				for _, d := range f.DLP {
					detectors[d] = true
				}
			}
		}
	}
	for _, code := range []string{decision.CodeInvalidBody, decision.CodeUnknownType, decision.CodeBlocked,
		decision.CodeStranger, decision.CodeNothingAllowed, decision.CodeConnectionHeld, decision.CodeCommitmentHeld,
		decision.CodeStandingApproval, decision.CodeConfidentialHeld, decision.CodeFreeTextTooLong,
		"freetext_not_opted_in", "freetext_control_character", rules.ReasonDefaultDeny} {
		if !codes[code] {
			t.Errorf("no vector expects reason code %s", code)
		}
	}
	for _, d := range dlp.Detectors() {
		if !detectors[string(d)] {
			t.Errorf("no vector expects DLP detector %s", d)
		}
		if dlp.SeverityOf(d) == dlp.Block && !codes["dlp_"+string(d)] {
			t.Errorf("no vector expects reason dlp_%s", d)
		}
	}
	if regErrors == 0 {
		t.Error("no vector expects a refused registration")
	}
}
