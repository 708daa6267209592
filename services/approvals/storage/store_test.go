package storage

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"google.golang.org/protobuf/types/known/timestamppb"

	alpv1 "github.com/alpd-project/alpd/gen/alp/v1"
	"github.com/alpd-project/alpd/internal/bus"
	"github.com/alpd-project/alpd/internal/keystore"
	"github.com/alpd-project/alpd/internal/natsauth"
	"github.com/alpd-project/alpd/internal/natstest"
	"github.com/alpd-project/alpd/internal/seal"
	"github.com/alpd-project/alpd/internal/streams"
	"github.com/alpd-project/alpd/services/approvals/items"
)

const (
	tenant = "b.example"
	lee    = "p_lee"
)

type rig struct {
	t      *testing.T
	b      *bus.Bus
	sealer *seal.Sealer
	st     *Store
	clock  *clock
}

type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.now }
func (c *clock) add(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

func newRig(t *testing.T) *rig {
	t.Helper()
	srv := natstest.RunJetStream(t)
	nc := natstest.Connect(t, srv)
	b, err := bus.New(nc, bus.Options{Namespace: "alpd", CheckProducer: streams.CheckProducer})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for _, role := range []alpv1.Role{alpv1.Role_ROLE_APPROVALS, alpv1.Role_ROLE_POLICY} {
		for _, spec := range streams.Owned(role, []string{tenant}, streams.Limits{}) {
			if _, err := b.EnsureStream(ctx, spec); err != nil {
				t.Fatal(err)
			}
		}
	}
	ks := keystore.NewMemory()
	if _, err := ks.Generate(ctx, tenant, alpv1.KeyPurpose_KEY_PURPOSE_DATA); err != nil {
		t.Fatal(err)
	}
	kv, err := b.JetStream().CreateOrUpdateKeyValue(ctx, seal.BucketConfig(b.StreamName(natsauth.DataKeysBucket)))
	if err != nil {
		t.Fatal(err)
	}
	r := &rig{t: t, b: b, sealer: seal.New(kv, ks, seal.WithCacheTTL(0)), clock: &clock{now: time.Now()}}
	r.st = r.open()
	return r
}

func (r *rig) open() *Store {
	r.t.Helper()
	st, err := Open(context.Background(), Config{Bus: r.b, Sealer: r.sealer, Tenants: []string{tenant}, Now: r.clock.Now})
	if err != nil {
		r.t.Fatal(err)
	}
	r.t.Cleanup(st.Close)
	return st
}

// deliverable is what policy stores for lee: one held item of kind, with
// body sealed as policy seals it.
func (r *rig) deliverable(kind alpv1.HeldKind, typ, inReplyTo, body string, pointers ...string) (*alpv1.Event, *alpv1.Deliverable) {
	r.t.Helper()
	env := uuid.Must(uuid.NewV7()).String()
	id := "h" + bus.HashID("held", env, lee, kind.String())
	sealed, err := r.sealer.Seal(context.Background(), tenant, lee, []byte(body), seal.HeldAAD(env, id))
	if err != nil {
		r.t.Fatal(err)
	}
	dv := &alpv1.Deliverable{
		Envelope:          &alpv1.Envelope{Id: env, From: "ana@a.example", FromAgent: "agt_ana", Type: typ, InReplyTo: inReplyTo},
		RecipientPersonId: lee, Outcome: alpv1.Outcome_OUTCOME_HOLD, SenderPersonId: "p_ana",
		Held: []*alpv1.HeldItem{{Id: id, Kind: kind, Pointers: pointers, Commits: "meeting", Body: sealed}},
	}
	for _, p := range pointers {
		dv.Fields = append(dv.Fields, &alpv1.FieldVerdict{Pointer: p, Class: "internal", Action: alpv1.FieldAction_FIELD_ACTION_HOLD,
			Reasons: []*alpv1.Reason{{Party: "broker", Code: "commitment_held"}}})
	}
	ev := &alpv1.Event{Header: &alpv1.EventHeader{Type: "deliverable", EventId: uuid.Must(uuid.NewV7()).String(), Tenant: tenant,
		ProducerRole: alpv1.Role_ROLE_POLICY, Occurred: timestamppb.Now()}, Body: &alpv1.Event_Deliverable{Deliverable: dv}}
	return ev, dv
}

func (r *rig) request(attested bool, kind alpv1.HeldKind, typ, inReplyTo, body string, pointers ...string) items.Item {
	r.t.Helper()
	ev, dv := r.deliverable(kind, typ, inReplyTo, body, pointers...)
	if err := r.st.Request(context.Background(), ev, dv, Sender{AgentName: "Ana's desk", AgentClass: "company", Attested: attested,
		Verification: "signed in at this broker"}); err != nil {
		r.t.Fatal(err)
	}
	it, err := r.st.Get(context.Background(), tenant, lee, dv.GetHeld()[0].GetId())
	if err != nil {
		r.t.Fatal(err)
	}
	return it
}

const meeting = `{"in_reply_to":"0190a5b8-7a7e-7c3e-9a8c-2d1f3b4c5d6e","start":"2026-05-04T10:00:00-04:00","duration":"PT30M"}`

var byLee = items.Actor{PersonID: lee, SessionID: "s1"}

// TestRequestMakesOnePendingItem: a held commitment becomes one pending
// item with who, what and why, a binding code derived from the payload; a
// redelivered deliverable makes no second item.
func TestRequestMakesOnePendingItem(t *testing.T) {
	r := newRig(t)
	ev, dv := r.deliverable(alpv1.HeldKind_HELD_KIND_COMMITMENT, "meeting.accept/v1", "", meeting, "/duration", "/in_reply_to", "/start")
	from := Sender{AgentName: "Ana's desk", AgentClass: "company", Attested: true, Verification: "signed in at this broker"}
	ctx := context.Background()
	for range 2 {
		if err := r.st.Request(ctx, ev, dv, from); err != nil {
			t.Fatal(err)
		}
	}
	list, _ := r.st.List(ctx, tenant, lee)
	if len(list) != 1 {
		t.Fatalf("%d items after a redelivery, want 1", len(list))
	}
	it := list[0]
	if it.State != items.Pending || it.Kind != items.Commitment || it.From != "ana@a.example" || it.AgentName != "Ana's desk" ||
		!it.Attested || it.Commits != "meeting" || len(it.Disclosed) != 3 || len(it.Reasons) != 3 || it.Reasons[0].Code != "commitment_held" {
		t.Fatalf("item %+v", it)
	}
	if want := BindingCode(it.PayloadDigest); it.BindingCode != want || len(want) != 9 || want[4] != '-' {
		t.Errorf("binding code %q, want %q (XXXX-XXXX)", it.BindingCode, want)
	}
	if d := it.Expires.Sub(it.Created); d != DefaultExpiry.Commitment {
		t.Errorf("expires after %s, want the commitment default %s", d, DefaultExpiry.Commitment)
	}
	rendered, err := r.st.Render(ctx, it)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"/start": "Monday 4 May 2026, 10:00 (UTC-04:00)", "/duration": "30 minutes"}
	for _, d := range rendered.Details {
		if w, ok := want[d.Pointer]; ok && d.Value != w {
			t.Errorf("%s reads %q, want %q", d.Pointer, d.Value, w)
		}
	}
	if !strings.Contains(rendered.Summary, "commits you to a meeting on Monday 4 May 2026") {
		t.Errorf("summary %q", rendered.Summary)
	}
	if ad := rendered.AuthorizationDetails; ad["type"] != "alp:commitment" || ad["identifier"] != it.EnvelopeID {
		t.Errorf("authorization_details %v", ad)
	}
	if _, err := r.st.Get(ctx, tenant, "p_other", it.ID); !errors.Is(err, items.ErrNotFound) {
		t.Errorf("another person's Get: %v, want ErrNotFound", err)
	}
}

// TestFirstDecisionWins: two decisions at once, one wins; the loser and
// every later decision see the final state (ErrDecided), nothing changes.
func TestFirstDecisionWins(t *testing.T) {
	r := newRig(t)
	it := r.request(true, alpv1.HeldKind_HELD_KIND_COMMITMENT, "meeting.accept/v1", "", meeting, "/start")
	ctx := context.Background()
	second := r.open() // another replica
	var wg sync.WaitGroup
	errs := make([]error, 2)
	for i, st := range []*Store{r.st, second} {
		d := []items.Decision{items.ApproveOnce, items.Deny}[i]
		wg.Go(func() { _, errs[i] = st.Decide(ctx, tenant, lee, it.ID, d, it.PayloadDigest, byLee) })
	}
	wg.Wait()
	ok := 0
	for _, err := range errs {
		switch {
		case err == nil:
			ok++
		case !errors.Is(err, items.ErrDecided):
			t.Fatalf("decision: %v", err)
		}
	}
	if ok != 1 {
		t.Fatalf("%d decisions won, want 1 (%v)", ok, errs)
	}
	final, _ := r.st.Get(ctx, tenant, lee, it.ID)
	again, err := r.st.Decide(ctx, tenant, lee, it.ID, items.Deny, it.PayloadDigest, byLee)
	if !errors.Is(err, items.ErrDecided) || again.State != final.State {
		t.Fatalf("a repeated decision: %v, state %s, want ErrDecided and %s", err, again.State, final.State)
	}
	last, _ := r.b.LastMessage(ctx, mustSubject(t, it.ID))
	if last == nil || last.Sequence != 2 {
		t.Errorf("the item's subject holds more than request + one decision")
	}
}

func mustSubject(t *testing.T, id string) string {
	t.Helper()
	s, err := streams.ApprovalItemSubject(tenant, lee, id)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestDecisionRefusals: a wrong digest, an unknown decision, approve always
// where it is not offered, another person's item: each refused, nothing
// written.
func TestDecisionRefusals(t *testing.T) {
	r := newRig(t)
	ctx := context.Background()
	commit := r.request(false, alpv1.HeldKind_HELD_KIND_COMMITMENT, "meeting.accept/v1", "", meeting, "/start")
	conf := r.request(true, alpv1.HeldKind_HELD_KIND_CONFIDENTIAL_FIELDS, "meeting.request/v1", "", `{"location":{"url":"https://v.example/x"}}`, "/location/url")
	cases := []struct {
		name   string
		it     items.Item
		d      items.Decision
		digest string
		by     items.Actor
		want   error
	}{
		{"stale digest", commit, items.ApproveOnce, strings.Repeat("0", 64), byLee, items.ErrDigest},
		{"unknown decision", commit, "approve_forever", commit.PayloadDigest, byLee, items.ErrInvalid},
		{"always for a self-attested agent", commit, items.ApproveAlways, commit.PayloadDigest, byLee, items.ErrNotOffered},
		{"always for confidential fields", conf, items.ApproveAlways, conf.PayloadDigest, byLee, items.ErrNotOffered},
		{"someone else deciding", commit, items.ApproveOnce, commit.PayloadDigest, items.Actor{PersonID: "p_mallory"}, items.ErrNotFound},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if _, err := r.st.Decide(ctx, tenant, lee, c.it.ID, c.d, c.digest, c.by); !errors.Is(err, c.want) {
				t.Fatalf("%v, want %v", err, c.want)
			}
			if it, _ := r.st.Get(ctx, tenant, lee, c.it.ID); it.State != items.Pending {
				t.Fatalf("state %s after a refused decision", it.State)
			}
		})
	}
	if _, err := r.st.Decide(ctx, tenant, lee, "no such/id", items.Deny, "", byLee); !errors.Is(err, items.ErrInvalid) {
		t.Errorf("a malformed id: %v", err)
	}
}

// TestApproveAlwaysCreatesARevocableRule: approve always stores the
// decision and one standing rule scoped to type, counterparty and action;
// revoking it keeps it listed as revoked.
func TestApproveAlwaysCreatesARevocableRule(t *testing.T) {
	r := newRig(t)
	ctx := context.Background()
	it := r.request(true, alpv1.HeldKind_HELD_KIND_COMMITMENT, "meeting.accept/v1", "", meeting, "/start")
	final, err := r.st.Decide(ctx, tenant, lee, it.ID, items.ApproveAlways, it.PayloadDigest, byLee)
	if err != nil {
		t.Fatal(err)
	}
	if final.State != items.ApprovedAlways || final.StandingRuleID != RuleID(tenant, lee, it.ID) {
		t.Fatalf("item %+v", final)
	}
	rules, _ := r.st.Rules(ctx, tenant, lee)
	if len(rules) != 1 || rules[0].Type != "meeting.accept/v1" || rules[0].Counterparty != "ana@a.example" || rules[0].Action != "meeting" ||
		!rules[0].Active(r.clock.Now()) || rules[0].Expires.Sub(rules[0].Created) != DefaultExpiry.StandingRule {
		t.Fatalf("rules %+v", rules)
	}
	rule, err := r.st.RevokeRule(ctx, tenant, lee, final.StandingRuleID, byLee)
	if err != nil || !rule.Revoked {
		t.Fatalf("revoke: %+v %v", rule, err)
	}
	if again, err := r.st.RevokeRule(ctx, tenant, lee, final.StandingRuleID, byLee); err != nil || !again.Revoked {
		t.Fatalf("revoking twice: %+v %v", again, err)
	}
	if _, err := r.st.RevokeRule(ctx, tenant, lee, "rnothere", byLee); !errors.Is(err, items.ErrNotFound) {
		t.Errorf("revoking no rule: %v", err)
	}
	// A replica opened later sees the same.
	rules, _ = r.open().Rules(ctx, tenant, lee)
	if len(rules) != 1 || !rules[0].Revoked {
		t.Errorf("a new replica's rules %+v", rules)
	}
}

// TestExpiryIsDenial: past its expiry an item is expired by the sweep, and
// a decision on it answers the final state.
func TestExpiryIsDenial(t *testing.T) {
	r := newRig(t)
	ctx := context.Background()
	it := r.request(true, alpv1.HeldKind_HELD_KIND_CONFIDENTIAL_FIELDS, "meeting.request/v1", "", `{"location":{"url":"https://v.example/x"}}`, "/location/url")
	if n, err := r.st.Sweep(ctx); n != 0 || err != nil {
		t.Fatalf("expired %d (%v) before the time", n, err)
	}
	r.clock.add(DefaultExpiry.ConfidentialFields + time.Second)
	// A decision after the time, before the sweep: expired, not approved.
	final, err := r.st.Decide(ctx, tenant, lee, it.ID, items.ApproveOnce, it.PayloadDigest, byLee)
	if !errors.Is(err, items.ErrDecided) || final.State != items.Expired {
		t.Fatalf("a late decision: %v, %s", err, final.State)
	}
	other := r.request(true, alpv1.HeldKind_HELD_KIND_CONFIDENTIAL_FIELDS, "meeting.request/v1", "", `{"location":{"url":"https://v.example/y"}}`, "/location/url")
	r.clock.add(DefaultExpiry.ConfidentialFields + time.Second)
	if n, err := r.st.Sweep(ctx); n != 1 || err != nil {
		t.Fatalf("the sweep expired %d (%v), want 1", n, err)
	}
	if got, _ := r.st.Get(ctx, tenant, lee, other.ID); got.State != items.Expired || got.DecisionReason == "" {
		t.Errorf("after the sweep %+v", got)
	}
}

// TestNewerRequestSupersedes: the same sender's newer request about the
// same thing supersedes the pending one, whose decision is then refused.
func TestNewerRequestSupersedes(t *testing.T) {
	r := newRig(t)
	ctx := context.Background()
	thread := "0190a5b8-7a7e-7c3e-9a8c-2d1f3b4c5d6e"
	old := r.request(true, alpv1.HeldKind_HELD_KIND_COMMITMENT, "meeting.accept/v1", thread, meeting, "/start")
	newer := r.request(true, alpv1.HeldKind_HELD_KIND_COMMITMENT, "meeting.accept/v1", thread,
		strings.Replace(meeting, "10:00", "11:00", 1), "/start")
	got, _ := r.st.Get(ctx, tenant, lee, old.ID)
	if got.State != items.Superseded || got.SupersededBy != newer.ID {
		t.Fatalf("the older item %+v", got)
	}
	if _, err := r.st.Decide(ctx, tenant, lee, old.ID, items.ApproveOnce, old.PayloadDigest, byLee); !errors.Is(err, items.ErrDecided) {
		t.Errorf("deciding a superseded item: %v", err)
	}
	if newer.PayloadDigest == old.PayloadDigest || newer.BindingCode == old.BindingCode {
		t.Error("two payloads share a digest or code")
	}
	if _, err := r.st.Decide(ctx, tenant, lee, newer.ID, items.ApproveOnce, newer.PayloadDigest, byLee); err != nil {
		t.Errorf("deciding the newer one: %v", err)
	}
}

// TestConnectionAnsweredElsewhere: a stranger's request that the person
// accepts on the connections page instead of here leaves its item
// cancelled at the next sweep.
func TestConnectionAnsweredElsewhere(t *testing.T) {
	r := newRig(t)
	ctx := context.Background()
	it := r.request(false, alpv1.HeldKind_HELD_KIND_CONNECTION_REQUEST, "connection.request/v1", "", `{"purpose":"meet"}`, "/purpose")
	subj, err := bus.Subject(streams.Policy, tenant, streams.PolicyConnection, "c1")
	if err != nil {
		t.Fatal(err)
	}
	policyEvent := func(kind string, body func(*alpv1.Event)) *alpv1.Event {
		ev := &alpv1.Event{Header: &alpv1.EventHeader{Type: kind, EventId: uuid.Must(uuid.NewV7()).String(), Tenant: tenant,
			ProducerRole: alpv1.Role_ROLE_POLICY, Occurred: timestamppb.Now()}}
		body(ev)
		return ev
	}
	if _, err := r.b.Publish(ctx, subj, policyEvent("connection_requested", func(ev *alpv1.Event) {
		ev.Body = &alpv1.Event_ConnectionRequested{ConnectionRequested: &alpv1.ConnectionRequested{Tenant: tenant, ConnectionId: "c1",
			FromAddress: "ana@a.example", ToPerson: lee, EnvelopeId: it.EnvelopeID}}
	})); err != nil {
		t.Fatal(err)
	}
	if n, err := r.st.Sweep(ctx); n != 0 || err != nil {
		t.Fatalf("swept %d (%v) before an answer", n, err)
	}
	if _, err := r.b.Publish(ctx, subj, policyEvent("connection_accepted", func(ev *alpv1.Event) {
		ev.Body = &alpv1.Event_ConnectionAccepted{ConnectionAccepted: &alpv1.ConnectionAccepted{Tenant: tenant, ConnectionId: "c1", ByPerson: lee}}
	})); err != nil {
		t.Fatal(err)
	}
	select {
	case <-r.st.Answers():
	case <-time.After(10 * time.Second):
		t.Fatal("no signal of the answer")
	}
	if n, err := r.st.Sweep(ctx); n != 1 || err != nil {
		t.Fatalf("swept %d (%v), want 1", n, err)
	}
	got, _ := r.st.Get(ctx, tenant, lee, it.ID)
	if got.State != items.Cancelled || !strings.Contains(got.DecisionReason, "accepted") {
		t.Fatalf("item %+v", got)
	}
}
