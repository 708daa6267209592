package rules

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// setSpec is a party's set in a test case: "template" (the shipped
// default), "template+<cedar>" (the default with policies appended) or
// literal Cedar text.
func loadSet(t *testing.T, e *Engine, party Party, spec string) *Set {
	t.Helper()
	text := []byte(spec)
	if rest, ok := strings.CutPrefix(spec, "template"); ok {
		tmpl, err := Template(party)
		if err != nil {
			t.Fatal(err)
		}
		text = append(tmpl, strings.TrimPrefix(rest, "+")...)
	}
	s, err := e.Validate(party, text)
	if err != nil {
		t.Fatalf("set %s: %v", party, err)
	}
	return s
}

func readCases(t *testing.T, name string, into any) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	dec := json.NewDecoder(strings.NewReader(string(b)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(into); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
}

func newEngine(t testing.TB) *Engine {
	t.Helper()
	e, err := New(Limits{})
	if err != nil {
		t.Fatal(err)
	}
	return e
}

type decideCase struct {
	Name    string           `json:"name"`
	Sets    map[Party]string `json:"sets"`
	Action  string           `json:"action,omitempty"` // "" = share_field, "commit"
	Agent   Agent            `json:"agent"`
	Context Context          `json:"context"`
	Fields  []Field          `json:"fields"`
	Expect  []Verdict        `json:"expect"`
	// Views: viewer party → the denials of each field as that party sees
	// them (Verdict.PublicView).
	Views map[Party][][]Denial `json:"views,omitempty"`
}

func TestDecide(t *testing.T) {
	e := newEngine(t)
	var cases []decideCase
	readCases(t, "decide.json", &cases)
	for _, tc := range cases {
		t.Run(tc.Name, func(t *testing.T) {
			var ps Parties
			for party, spec := range tc.Sets {
				c := Compile(loadSet(t, e, party, spec))
				switch party {
				case PartySender:
					ps.Sender = c
				case PartySenderOrg:
					ps.SenderOrg = c
				case PartyRecipientOrg:
					ps.RecipientOrg = c
				case PartyRecipient:
					ps.Recipient = c
				default:
					t.Fatalf("unknown party %q", party)
				}
			}
			var got []Verdict
			switch tc.Action {
			case "":
				var err error
				got, err = DecideMessage(context.Background(), ps, Message{Agent: tc.Agent, Context: tc.Context, Fields: tc.Fields})
				if err != nil {
					t.Fatal(err)
				}
			case "commit":
				for _, f := range tc.Fields {
					v, err := DecideCommit(context.Background(), ps.Recipient, FieldRequest{Agent: tc.Agent, Context: tc.Context, Field: f})
					if err != nil {
						t.Fatal(err)
					}
					got = append(got, v)
				}
			default:
				t.Fatalf("unknown action %q", tc.Action)
			}
			if !reflect.DeepEqual(got, tc.Expect) {
				g, _ := json.MarshalIndent(got, "", "  ")
				t.Fatalf("verdicts:\n%s", g)
			}
			for viewer, want := range tc.Views {
				for i, v := range got {
					pv := v.PublicView(viewer)
					if (len(pv.Denials) != 0 || len(want[i]) != 0) && !reflect.DeepEqual(pv.Denials, want[i]) {
						t.Errorf("%s view of %s: got %+v, want %+v", viewer, v.Pointer, pv.Denials, want[i])
					}
				}
			}
		})
	}
}

type validateCase struct {
	Name   string `json:"name"`
	Party  Party  `json:"party"`
	Text   string `json:"text"`
	Repeat int    `json:"repeat,omitempty"` // Text repeated this many times
	Expect []struct {
		Code     Code   `json:"code"`
		PolicyID string `json:"policy_id,omitempty"`
		Line     int    `json:"line,omitempty"`
		Column   int    `json:"column,omitempty"`
		Contains string `json:"contains,omitempty"`
	} `json:"expect"`
}

func TestValidateRefusals(t *testing.T) {
	e := newEngine(t)
	var cases []validateCase
	readCases(t, "validate.json", &cases)
	for _, tc := range cases {
		t.Run(tc.Name, func(t *testing.T) {
			text := tc.Text
			if tc.Repeat > 0 {
				text = strings.Repeat(text, tc.Repeat)
			}
			set, err := e.Validate(tc.Party, []byte(text))
			if len(tc.Expect) == 0 {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			var ve *ValidationError
			if !errors.As(err, &ve) {
				t.Fatalf("want *ValidationError, got %v (set %v)", err, set)
			}
			if set != nil {
				t.Fatal("a refused write returned a set")
			}
			if len(ve.Problems) != len(tc.Expect) {
				t.Fatalf("problems: %v", ve)
			}
			for i, want := range tc.Expect {
				p := ve.Problems[i]
				if p.Code != want.Code || p.PolicyID != want.PolicyID || p.Line != want.Line || p.Column != want.Column ||
					!strings.Contains(p.Message, want.Contains) {
					t.Errorf("problem %d: got %+v, want %+v", i, p, want)
				}
			}
		})
	}
}

type tightenCase struct {
	Name   string `json:"name"`
	Prev   string `json:"prev"`
	Next   string `json:"next"`
	Expect []struct {
		PolicyID string `json:"policy_id"`
	} `json:"expect_refused"`
}

func TestIsTightening(t *testing.T) {
	e := newEngine(t)
	var cases []tightenCase
	readCases(t, "tighten.json", &cases)
	for _, tc := range cases {
		t.Run(tc.Name, func(t *testing.T) {
			prev := loadSet(t, e, PartySender, tc.Prev)
			next := loadSet(t, e, PartySender, tc.Next)
			err := IsTightening(prev, next)
			if len(tc.Expect) == 0 {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			var ve *ValidationError
			if !errors.As(err, &ve) {
				t.Fatalf("want refusal, got %v", err)
			}
			var ids []string
			for _, p := range ve.Problems {
				if p.Code != CodeLooseningRefused {
					t.Errorf("code %s", p.Code)
				}
				ids = append(ids, p.PolicyID)
			}
			var want []string
			for _, x := range tc.Expect {
				want = append(want, x.PolicyID)
			}
			if !reflect.DeepEqual(ids, want) {
				t.Fatalf("refused policies %v, want %v (%v)", ids, want, err)
			}
		})
	}
}

func TestTemplatesValidate(t *testing.T) {
	e := newEngine(t)
	for _, p := range []Party{PartySender, PartySenderOrg, PartyRecipientOrg, PartyRecipient} {
		text, err := Template(p)
		if err != nil {
			t.Fatal(err)
		}
		s, err := e.Validate(p, text)
		if err != nil {
			t.Fatalf("template %s: %v", p, err)
		}
		if len(s.Policies) == 0 {
			t.Fatalf("template %s is empty", p)
		}
	}
	if _, err := Template("nobody"); err == nil {
		t.Fatal("template for unknown party")
	}
}

func TestCache(t *testing.T) {
	e := newEngine(t)
	c := NewCache(e, 2)
	text, _ := Template(PartySender)
	a, err := c.Get(PartySender, text)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := c.Get(PartySender, append([]byte(nil), text...))
	if a != b {
		t.Fatal("same text compiled twice")
	}
	if _, err := c.Get(PartySender, []byte("permit(principal, action, resource);")); err == nil {
		t.Fatal("cache stored an invalid set")
	}
	if c.Len() != 1 {
		t.Fatalf("len %d after a refused set", c.Len())
	}
	rt, _ := Template(PartyRecipient)
	ot, _ := Template(PartySenderOrg)
	if _, err := c.Get(PartyRecipient, rt); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Get(PartySenderOrg, ot); err != nil {
		t.Fatal(err)
	}
	if c.Len() != 2 {
		t.Fatalf("len %d, want bound 2", c.Len())
	}
	if again, _ := c.Get(PartySender, text); again == a {
		t.Fatal("least recently used set was not evicted")
	}
}

func TestDecideRefusesBadInput(t *testing.T) {
	e := newEngine(t)
	text, _ := Template(PartySender)
	s := Compile(must(e.Validate(PartySender, text)))
	ok := Message{Agent: Agent{ID: "a", TrustClass: TrustCompany}, Context: Context{Relationship: RelConnected},
		Fields: []Field{{Pointer: "/x", Class: ClassPublic}}}
	ctx := context.Background()
	if _, err := DecideMessage(ctx, Parties{}, ok); err == nil {
		t.Error("no sets accepted")
	}
	if _, err := DecideMessage(ctx, Parties{Recipient: s}, ok); err == nil {
		t.Error("sender set in the recipient slot accepted")
	}
	bad := ok
	bad.Fields = []Field{{Pointer: "/x", Class: "secret"}}
	if _, err := DecideMessage(ctx, Parties{Sender: s}, bad); err == nil {
		t.Error("unknown class accepted")
	}
	bad = ok
	bad.Context.Relationship = "friends"
	if _, err := DecideMessage(ctx, Parties{Sender: s}, bad); err == nil {
		t.Error("unknown relationship accepted")
	}
	if _, err := DecideCommit(ctx, s, FieldRequest{Agent: ok.Agent, Context: ok.Context, Field: ok.Fields[0]}); err == nil {
		t.Error("commit asked of the sender's set")
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := DecideMessage(cctx, Parties{Sender: s}, ok); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled ctx: %v", err)
	}
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}
