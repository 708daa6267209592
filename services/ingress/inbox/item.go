package inbox

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	alpv1 "github.com/alpd-project/alpd/gen/alp/v1"
	"github.com/alpd-project/alpd/internal/alp"
	"github.com/alpd-project/alpd/internal/identitystore"
	"github.com/alpd-project/alpd/internal/seal"
)

// Item is one item of an inbox as one agent sees it.
type Item struct {
	// ID is stable: the envelope's id, the same on every delivery.
	ID        string
	Type      string
	InReplyTo string
	Created   time.Time
	Expires   time.Time
	Received  time.Time
	// Sender is written by the broker from what it verified, never taken
	// from the message.
	Sender Sender
	// Outcome is the recipient side's: "deliver", "deliver_partial" or
	// "hold".
	Outcome string
	// Body holds the fields of the agent's view (nil: none), free text
	// wrapped in Untrusted's markers.
	Body json.RawMessage
	// Fields are every field of the message with what happened to it for
	// this agent.
	Fields []Field
	// Held are the notices of what waits for the person's decision.
	Held []Held
	// Untrusted is set when the view holds free text.
	Untrusted *Untrusted
	// Acked: this agent acknowledged the item.
	Acked bool
	// Cursor is the item's position, for Query.After.
	Cursor string
}

// Sender is the line the broker writes above a message: who sent it and
// how the broker knows. Its JSON form is the one every door answers.
type Sender struct {
	// Text is the line in words: "from your own agent muse (consumer,
	// self-attested)", "from ana@example.org, verified by this broker".
	Text    string `json:"text"`
	Address string `json:"address"`
	// Agent is the sending agent's name; empty when unknown.
	Agent string `json:"agent,omitempty"`
	// TrustClass of the sending agent's credential: "company" or
	// "consumer".
	TrustClass string `json:"trust_class"`
	// Attestation: "attested" (an organization registered or vouched for
	// the agent's client) or "self-attested".
	Attestation string `json:"attestation"`
	// VerifiedBy says how the sender was verified: "this broker" for a
	// sender hosted here (its credential checked by this broker);
	// "<domain>'s home broker" for a sender at another broker, whose
	// signature this broker checked against the broker the sender's
	// domain names (docs/federation.md), never "this broker".
	VerifiedBy string `json:"verified_by"`
	// Broker is the name of the broker that signed the message, for a
	// sender at another broker; empty for a sender hosted here.
	Broker string `json:"broker,omitempty"`
	// OwnAgent: the sender is the recipient, through another of their own
	// agents.
	OwnAgent bool `json:"own_agent"`
}

// Field verdicts, as an agent reads them.
const (
	Delivered = "delivered"
	// Withheld: a rule refused the field; it is not coming.
	Withheld = "withheld"
	// HeldForPerson: the person may release it (approvals).
	HeldForPerson = "held"
	// Released: held for the person, who released it (approvals).
	Released = "released"
	// NotForThisAgent: the field crossed, but this agent's trust class
	// does not see it (another of the person's agents may).
	NotForThisAgent = "not_for_this_agent"
)

// Field is one field of the message.
type Field struct {
	Pointer  string
	Class    string
	FreeText bool
	Verdict  string
}

// Held is a notice of something the person is asked to decide.
type Held struct {
	ID string `json:"id"`
	// Kind: "confidential_fields", "commitment" or "connection_request".
	Kind     string   `json:"kind"`
	Pointers []string `json:"pointers,omitempty"`
	Commits  string   `json:"commits,omitempty"`
	// State is the person's decision: "pending" until they decide, then
	// "denied", "expired", "superseded" or "cancelled" (nothing released;
	// an approved item's notice goes, its fields are in the body), or
	// "approved_once"/"approved_always" for a connection request.
	State string `json:"state"`
	// Decision says it in words ("denied by the person"); empty while
	// pending.
	Decision string `json:"decision,omitempty"`
}

// Untrusted says how free text is marked: each free-text value of Body is
// wrapped as Open + text + Close.
type Untrusted struct {
	// Boundary is random, new for every read of the item, so no sender can
	// close the wrapping in advance.
	Boundary string   `json:"boundary"`
	Open     string   `json:"open"`
	Close    string   `json:"close"`
	Pointers []string `json:"pointers"`
}

// trust class names as agents read them (and policy's views are named).
const (
	classCompany  = "company"
	classConsumer = "consumer"
)

// ClassName is the name of a trust class ("company", "consumer").
func ClassName(c alpv1.TrustClass) string {
	if c == alpv1.TrustClass_TRUST_CLASS_COMPANY {
		return classCompany
	}
	return classConsumer
}

// agentView is which of a Deliverable's views an agent reads, what the
// person's decisions released to it, and what it leaves out.
type agentView struct {
	view     *alpv1.TrustView
	in       map[string]bool
	withheld []string // crossed, but not in this agent's view
	heldIDs  []string // the held notices it is shown
	// released are the pointers the person's decisions added to the view,
	// opened from these held items; decided has every decision by held id.
	released map[string]bool
	opened   []*alpv1.HeldItem
	decided  map[string]*alpv1.ApprovalDecided
	last     *releasing // the latest release to this agent
}

// class is the trust class of the view the agent reads ("" for none).
func (v agentView) class() string { return v.view.GetTrustClass() }

// view picks the agent's view: its class's; for a company agent without
// one, the consumer view (a subset of what it may see). A consumer agent
// never reads the company view. The person's decisions ds (of dv's
// envelope) add what they released to it.
func (s *Store) view(a Agent, dv *alpv1.Deliverable, ds []decision) agentView {
	want := ClassName(a.Class)
	var v agentView
	for _, tv := range dv.GetViews() {
		if tv.GetTrustClass() == want {
			v.view = tv
		}
	}
	if v.view == nil && want == classCompany {
		for _, tv := range dv.GetViews() {
			if tv.GetTrustClass() == classConsumer {
				v.view = tv
			}
		}
	}
	v.in = map[string]bool{}
	for _, p := range v.view.GetPointers() {
		v.in[p] = true
	}
	if len(ds) > 0 {
		rs, decided := releases(&entry{dv: dv}, ds, v.class())
		v.decided = decided
		for i, r := range rs {
			v.opened = append(v.opened, r.held)
			for _, p := range r.held.GetPointers() {
				if !v.in[p] {
					if v.released == nil {
						v.released = map[string]bool{}
					}
					v.released[p], v.in[p] = true, true
				}
			}
			if i == len(rs)-1 {
				v.last = &rs[i]
			}
		}
	}
	for _, f := range dv.GetFields() {
		if f.GetAction() == alpv1.FieldAction_FIELD_ACTION_ALLOW && !v.in[f.GetPointer()] {
			v.withheld = append(v.withheld, f.GetPointer())
		}
	}
	for _, h := range dv.GetHeld() {
		if d := v.decided[h.GetId()]; d != nil && Approved(d.GetState()) &&
			h.GetKind() != alpv1.HeldKind_HELD_KIND_CONNECTION_REQUEST {
			continue // released: nothing waits any more
		}
		v.heldIDs = append(v.heldIDs, h.GetId())
	}
	return v
}

// item builds what the agent reads of an entry: its view opened, free
// text wrapped, the sender line.
func (s *Store) item(ctx context.Context, a Agent, e *entry, ds []decision, acked bool) (Item, error) {
	dv := e.dv
	env := dv.GetEnvelope()
	it := Item{ID: e.id, Type: env.GetType(), InReplyTo: env.GetInReplyTo(), Received: e.received,
		Outcome: outcomeName(dv.GetOutcome()), Acked: acked, Cursor: cursorOf(e.seq)}
	if t := env.GetCreated(); t != nil {
		it.Created = t.AsTime()
	}
	if t := env.GetExpires(); t != nil {
		it.Expires = t.AsTime()
	}
	v := s.view(a, dv, ds)
	var free []string
	for _, f := range dv.GetFields() {
		fd := Field{Pointer: f.GetPointer(), Class: f.GetClass(), FreeText: f.GetFreetext()}
		switch {
		case f.GetAction() == alpv1.FieldAction_FIELD_ACTION_DENY:
			fd.Verdict = Withheld
		case v.released[f.GetPointer()]:
			fd.Verdict = Released
			if fd.FreeText {
				free = append(free, fd.Pointer)
			}
		case f.GetAction() == alpv1.FieldAction_FIELD_ACTION_HOLD:
			fd.Verdict = HeldForPerson
		case v.in[f.GetPointer()]:
			fd.Verdict = Delivered
			if fd.FreeText {
				free = append(free, fd.Pointer)
			}
		default:
			fd.Verdict = NotForThisAgent
		}
		it.Fields = append(it.Fields, fd)
	}
	for _, h := range dv.GetHeld() {
		if !slices.Contains(v.heldIDs, h.GetId()) {
			continue
		}
		n := Held{ID: h.GetId(), Kind: HeldKindName(h.GetKind()), Pointers: h.GetPointers(), Commits: h.GetCommits(), State: StatePending}
		if d := v.decided[h.GetId()]; d != nil {
			n.State, n.Decision = ApprovalStateName(d.GetState()), DecisionText(d)
		}
		it.Held = append(it.Held, n)
	}
	if len(v.opened) > 0 && it.Outcome == "hold" {
		// Nothing waits for the person any more: the message is delivered.
		it.Outcome = "deliver"
		if slices.ContainsFunc(it.Fields, func(f Field) bool { return f.Verdict != Delivered && f.Verdict != Released }) {
			it.Outcome = "deliver_partial"
		}
	}
	open := func(b *alpv1.SealedBody, aad []byte) ([]byte, error) {
		plain, err := s.o.Sealer.Open(ctx, b, aad)
		if err != nil {
			if errors.Is(err, seal.ErrKeyDestroyed) {
				return nil, fmt.Errorf("%w: %q", ErrNotFound, e.id) // the person was erased
			}
			return nil, fmt.Errorf("%w: opening item %s: %w", ErrUnavailable, e.id, err)
		}
		return plain, nil
	}
	var plain []byte
	if b := v.view.GetBody(); b != nil {
		var err error
		if plain, err = open(b, seal.ViewAAD(e.id, v.view.GetTrustClass())); err != nil {
			return Item{}, err
		}
	}
	for _, h := range v.opened {
		if h.GetBody() == nil {
			continue
		}
		add, err := open(h.GetBody(), seal.HeldAAD(e.id, h.GetId()))
		if err != nil {
			return Item{}, err
		}
		if plain, err = mergeJSON(plain, add); err != nil {
			return Item{}, fmt.Errorf("inbox: item %s: %w", e.id, err)
		}
	}
	if plain != nil {
		it.Body = plain
		if len(free) > 0 {
			var err error
			u := newUntrusted(free)
			if it.Body, err = u.wrap(plain); err != nil {
				return Item{}, fmt.Errorf("inbox: item %s: %w", e.id, err)
			}
			it.Untrusted = u
		}
	}
	var err error
	if it.Sender, err = s.sender(a, dv); err != nil {
		return Item{}, err
	}
	return it, nil
}

// sender writes the sender line from what this broker verified: the
// envelope's from and agent are set by the sender's ingress from the
// credential (never from the message), and identity says what the agent
// is.
func (s *Store) sender(a Agent, dv *alpv1.Deliverable) (Sender, error) {
	env := dv.GetEnvelope()
	if dv.GetOriginBroker() != "" {
		return remoteSender(dv), nil
	}
	out := Sender{Address: env.GetFrom(), VerifiedBy: "this broker", TrustClass: classConsumer, Attestation: "self-attested"}
	people := s.identity()
	if people == nil {
		return Sender{}, fmt.Errorf("%w: identity's projection is not open yet", ErrUnavailable)
	}
	agent, err := people.AgentOf(env.GetTenant(), dv.GetSenderPersonId(), env.GetFromAgent())
	switch {
	case err == nil:
		out.Agent, out.TrustClass = agent.Name, ClassName(agent.Class)
		if agent.Attested {
			out.Attestation = "attested"
		}
	case errors.Is(err, identitystore.ErrNotFound):
		// The agent is gone from identity (erased sender): the address
		// was still verified when the message was sent.
	default:
		return Sender{}, fmt.Errorf("%w: the sending agent: %w", ErrUnavailable, err)
	}
	out.OwnAgent = env.GetTenant() == a.Tenant && dv.GetSenderPersonId() == a.PersonID
	if out.OwnAgent {
		name := out.Agent
		if name == "" {
			name = "(unnamed)"
		}
		out.Text = fmt.Sprintf("from your own agent %s (%s, %s)", name, out.TrustClass, out.Attestation)
	} else {
		out.Text = fmt.Sprintf("from %s, verified by %s", out.Address, out.VerifiedBy)
	}
	return out, nil
}

// remoteSender is the line for a sender at another broker: what this
// broker verified is the signature of the broker the sender's domain
// names as its home, which vouches for the address and says what class
// of agent sent it (company: a client the organization registered, so
// attested; consumer: taken as self-attested, since no attestation of
// another broker's clients is visible here). Identity here knows nothing
// of the agent, so it has no name.
func remoteSender(dv *alpv1.Deliverable) Sender {
	env := dv.GetEnvelope()
	out := Sender{Address: env.GetFrom(), TrustClass: classConsumer, Attestation: "self-attested", Broker: dv.GetOriginBroker()}
	if dv.GetSenderAgentClass() == classCompany {
		out.TrustClass, out.Attestation = classCompany, "attested"
	}
	domain := env.GetFrom()
	if a, err := alp.ParseAddress(env.GetFrom()); err == nil {
		domain = a.Domain()
	}
	out.VerifiedBy = domain + "'s home broker"
	out.Text = fmt.Sprintf("from %s, signed by %s", out.Address, out.VerifiedBy)
	return out
}

func outcomeName(o alpv1.Outcome) string {
	switch o {
	case alpv1.Outcome_OUTCOME_DELIVER:
		return "deliver"
	case alpv1.Outcome_OUTCOME_DELIVER_PARTIAL:
		return "deliver_partial"
	case alpv1.Outcome_OUTCOME_HOLD:
		return "hold"
	}
	return "unknown"
}

// HeldKindName is the name of a held item's kind, as agents read it.
func HeldKindName(k alpv1.HeldKind) string {
	switch k {
	case alpv1.HeldKind_HELD_KIND_CONFIDENTIAL_FIELDS:
		return "confidential_fields"
	case alpv1.HeldKind_HELD_KIND_COMMITMENT:
		return "commitment"
	case alpv1.HeldKind_HELD_KIND_CONNECTION_REQUEST:
		return "connection_request"
	}
	return "unknown"
}

// markerPrefix starts every untrusted marker; text that contains it is
// defanged, so a sender cannot write a marker of its own.
const markerPrefix = "<<untrusted:"

func newUntrusted(pointers []string) *Untrusted {
	var b [12]byte // 96 bits
	_, _ = rand.Read(b[:])
	n := hex.EncodeToString(b[:])
	return &Untrusted{Boundary: n, Open: markerPrefix + n + ">>", Close: "<</untrusted:" + n + ">>", Pointers: slices.Clone(pointers)}
}

// wrap replaces each free-text string of body (a JSON object) with its
// wrapped form.
func (u *Untrusted) wrap(body []byte) ([]byte, error) {
	var doc any
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber() // numbers stay as they were written
	if err := dec.Decode(&doc); err != nil {
		return nil, fmt.Errorf("the view is not JSON: %w", err)
	}
	for _, p := range u.Pointers {
		doc = replaceAt(doc, splitPointer(p), func(v any) any {
			if s, ok := v.(string); ok {
				return u.Open + defang(s) + u.Close
			}
			return v
		})
	}
	var out bytes.Buffer
	enc := json.NewEncoder(&out)
	enc.SetEscapeHTML(false) // the markers stay readable: << not \u003c\u003c
	if err := enc.Encode(doc); err != nil {
		return nil, err
	}
	return bytes.TrimRight(out.Bytes(), "\n"), nil
}

// defang breaks any marker-looking text inside untrusted text.
func defang(s string) string {
	s = strings.ReplaceAll(s, "<<untrusted", "< <untrusted")
	return strings.ReplaceAll(s, "<</untrusted", "< </untrusted")
}

func splitPointer(p string) []string {
	if p == "" {
		return nil
	}
	parts := strings.Split(strings.TrimPrefix(p, "/"), "/")
	for i, s := range parts {
		parts[i] = strings.ReplaceAll(strings.ReplaceAll(s, "~1", "/"), "~0", "~")
	}
	return parts
}

func replaceAt(doc any, path []string, f func(any) any) any {
	if len(path) == 0 {
		return f(doc)
	}
	switch d := doc.(type) {
	case map[string]any:
		if v, ok := d[path[0]]; ok {
			d[path[0]] = replaceAt(v, path[1:], f)
		}
	case []any:
		var i int
		if _, err := fmt.Sscanf(path[0], "%d", &i); err == nil && i >= 0 && i < len(d) {
			d[i] = replaceAt(d[i], path[1:], f)
		}
	}
	return doc
}
