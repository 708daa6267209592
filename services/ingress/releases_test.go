package ingress_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/types/known/timestamppb"

	alpv1 "github.com/alpd-project/alpd/gen/alp/v1"
	"github.com/alpd-project/alpd/internal/brokertest"
	"github.com/alpd-project/alpd/internal/bus"
	"github.com/alpd-project/alpd/internal/streams"
	"github.com/alpd-project/alpd/internal/testkit"
	"github.com/alpd-project/alpd/services/ingress"
	"github.com/alpd-project/alpd/services/ingress/inbox"
)

// decide appends the person's decision on the item's subject of the
// approvals stream, after the item's request (the rig's approvals service
// makes it; the decision is this test's).
func (r *inboxRig) decide(t *testing.T, person, envelopeID string, h inbox.Held, state alpv1.ApprovalState) {
	t.Helper()
	ctx := context.Background()
	subject, err := streams.ApprovalItemSubject(home, person, h.ID)
	if err != nil {
		t.Fatal(err)
	}
	kind := map[string]alpv1.HeldKind{"confidential_fields": alpv1.HeldKind_HELD_KIND_CONFIDENTIAL_FIELDS,
		"commitment": alpv1.HeldKind_HELD_KIND_COMMITMENT, "connection_request": alpv1.HeldKind_HELD_KIND_CONNECTION_REQUEST}[h.Kind]
	event := func(k string) *alpv1.Event {
		return &alpv1.Event{Header: &alpv1.EventHeader{Type: k, SchemaVersion: 1, EventId: uuid.NewString(), CorrelationId: envelopeID,
			Tenant: home, ProducerRole: alpv1.Role_ROLE_APPROVALS, Occurred: timestamppb.Now()}}
	}
	var seq uint64
	testkit.Eventually(t, 10*time.Second, func() error {
		var err error
		if seq, err = r.br.B.Bus().LastSequence(ctx, subject); err == nil && seq == 0 {
			err = fmt.Errorf("approvals has not taken up %s yet", h.ID)
		}
		return err
	}, "the item's request")
	dec := event("approval_decided")
	dec.Body = &alpv1.Event_ApprovalDecided{ApprovalDecided: &alpv1.ApprovalDecided{ItemId: h.ID, PersonId: person,
		Kind: kind, EnvelopeId: envelopeID, State: state, PayloadDigest: "d1", Pointers: h.Pointers}}
	if _, err := r.br.B.Bus().Append(ctx, subject, seq, dec); err != nil {
		t.Fatal(err)
	}
}

// item waits until cond holds of a's item id (read with Get).
func (r *inboxRig) item(t *testing.T, a brokertest.Agent, id, what string, cond func(inbox.Item) bool) inbox.Item {
	t.Helper()
	var it inbox.Item
	testkit.Eventually(t, 10*time.Second, func() error {
		var err error
		if it, err = r.in.Inbox().Get(context.Background(), ingress.InboxAgent(r.sender(t, a)), id); err == nil && !cond(it) {
			err = errors.New("not yet")
		}
		return err
	}, what)
	return it
}

func heldOf(it inbox.Item, kind string) (inbox.Held, bool) {
	i := slices.IndexFunc(it.Held, func(h inbox.Held) bool { return h.Kind == kind })
	if i < 0 {
		return inbox.Held{}, false
	}
	return it.Held[i], true
}

// decisions counts the decisions recorded in person's inbox.
func (r *inboxRig) decisions(t *testing.T, person string) uint64 {
	t.Helper()
	js, _ := jetstream.New(r.br.NC)
	st, err := js.Stream(context.Background(), "ALPD_INBOX")
	if err != nil {
		t.Fatal(err)
	}
	filter, _ := streams.InboxPersonFilter(home, person)
	info, err := st.Info(context.Background(), jetstream.WithSubjectFilter(strings.TrimSuffix(filter, ">")+streams.InboxDecision+".>"))
	if err != nil {
		t.Fatal(err)
	}
	var n uint64
	for _, c := range info.State.Subjects {
		n += c
	}
	return n
}

// TestReleaseConfidentialFields: muse (consumer class) reads ana's briefing
// without the confidential pipeline and acknowledges it; once lee approves
// the held fields, muse is offered the item again, with the pipeline, its
// verdict released and no held notice; acknowledged again, it is gone. A
// redelivered decision releases once.
func TestReleaseConfidentialFields(t *testing.T) {
	r := newInboxRig(t)
	ctx := context.Background()
	o := r.send(t, r.ana, "lee@example.org", "briefing.reply/v1", briefing, "")
	muse := ingress.InboxAgent(r.sender(t, r.muse))

	before := r.items(t, r.muse, 1)[0]
	held, ok := heldOf(before, "confidential_fields")
	if !ok || held.State != inbox.StatePending || held.Decision != "" {
		t.Fatalf("held notice before the decision %+v", before.Held)
	}
	if strings.Contains(string(before.Body), "120000") {
		t.Fatalf("the pipeline reached muse before the decision: %s", before.Body)
	}
	if _, err := r.in.Inbox().Ack(ctx, muse, o.EnvelopeID); err != nil {
		t.Fatal(err)
	}
	r.items(t, r.muse, 0)
	// Cursor of the last item muse read: the release comes after it.
	watch, stop, err := r.in.Inbox().Watch(ctx, muse)
	if err != nil {
		t.Fatal(err)
	}
	defer stop()

	r.decide(t, r.muse.Person.ID, o.EnvelopeID, held, alpv1.ApprovalState_APPROVAL_STATE_APPROVED_ONCE)
	select {
	case <-watch:
	case <-time.After(10 * time.Second):
		t.Fatal("no word of the release to the watcher")
	}
	again := r.items(t, r.muse, 1)[0]
	if again.ID != o.EnvelopeID || again.Acked {
		t.Fatalf("offered again: %+v", again)
	}
	var body struct {
		AsOf     string `json:"as_of"`
		Pipeline struct {
			Value json.Number `json:"value"`
		} `json:"pipeline"`
	}
	if err := json.Unmarshal(again.Body, &body); err != nil || body.Pipeline.Value != "120000.00" || body.AsOf == "" {
		t.Fatalf("muse's view after the release %s (%v)", again.Body, err)
	}
	if f := fieldOf(again, "/pipeline/value"); f.Verdict != inbox.Released {
		t.Errorf("pipeline verdict after the release %+v", f)
	}
	if len(again.Held) != 0 {
		t.Errorf("held notices after the release %+v", again.Held)
	}
	if again.Cursor == before.Cursor {
		t.Errorf("offered again at the same cursor %s", again.Cursor)
	}
	// A push that had read past the item reads it again after its cursor.
	page, err := r.in.Inbox().List(ctx, muse, inbox.Query{After: before.Cursor})
	if err != nil || len(page.Items) != 1 || page.Items[0].ID != o.EnvelopeID {
		t.Fatalf("after the item's first cursor: %+v %v", page, err)
	}
	if !strings.Contains(inbox.Render(again), "120000") || strings.Contains(inbox.Render(again), "waiting for the person") {
		t.Errorf("rendered after the release:\n%s", inbox.Render(again))
	}

	// The company agent had the pipeline already: nothing new for it but
	// the notice gone.
	company := r.item(t, r.claude, o.EnvelopeID, "claude's notice goes", func(it inbox.Item) bool { return len(it.Held) == 0 })
	if f := fieldOf(company, "/pipeline/value"); f.Verdict != inbox.Delivered {
		t.Errorf("claude's pipeline verdict %+v", f)
	}

	// A redelivered decision (approvals' consumer again) is recorded once.
	if n := r.decisions(t, r.muse.Person.ID); n != 1 {
		t.Fatalf("%d decisions recorded, want 1", n)
	}
	if n, err := r.in.Inbox().Ack(ctx, muse, o.EnvelopeID); err != nil || n != 1 {
		t.Fatalf("acknowledging the released item: %d %v", n, err)
	}
	r.items(t, r.muse, 0)
	if n, err := r.in.Inbox().Ack(ctx, muse, o.EnvelopeID); err != nil || n != 0 {
		t.Fatalf("a second acknowledgement: %d %v", n, err)
	}
	ackSubject, _ := streams.InboxReleaseAckSubject(home, r.muse.Person.ID, streams.AgentToken(r.muse.AgentID), o.EnvelopeID, held.ID)
	msg, err := r.br.B.Bus().LastMessage(ctx, ackSubject)
	if err != nil {
		t.Fatal(err)
	}
	if msg == nil {
		t.Fatal("no acknowledgement of the release")
	}
}

// TestReleaseRedeliveredOnce: the release consumer handles the same
// decision twice (a redelivery); the inbox records it once and offers the
// item once more, not twice.
func TestReleaseRedeliveredOnce(t *testing.T) {
	r := newInboxRig(t)
	ctx := context.Background()
	o := r.send(t, r.ana, "lee@example.org", "briefing.reply/v1", briefing, "")
	it := r.items(t, r.muse, 1)[0]
	held, _ := heldOf(it, "confidential_fields")
	muse := ingress.InboxAgent(r.sender(t, r.muse))
	if _, err := r.in.Inbox().Ack(ctx, muse, o.EnvelopeID); err != nil {
		t.Fatal(err)
	}
	r.decide(t, r.muse.Person.ID, o.EnvelopeID, held, alpv1.ApprovalState_APPROVAL_STATE_APPROVED_ALWAYS)
	r.items(t, r.muse, 1)
	subject, _ := streams.ApprovalItemSubject(home, r.muse.Person.ID, held.ID)
	m, err := r.br.B.Bus().LastMessage(ctx, subject)
	if err != nil {
		t.Fatal(err)
	}
	ev, err := decodeEvent(m.Data)
	if err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if err := r.in.Inbox().Release(ctx, deliveryOf(subject, ev)); err != nil {
			t.Fatal(err)
		}
	}
	if n := r.decisions(t, r.muse.Person.ID); n != 1 {
		t.Fatalf("%d decisions recorded, want 1", n)
	}
	if _, err := r.in.Inbox().Ack(ctx, muse, o.EnvelopeID); err != nil {
		t.Fatal(err)
	}
	r.items(t, r.muse, 0)
}

// TestDeniedReleasesNothing: a denied (or expired) decision releases
// nothing; the held notice says what was decided.
func TestDeniedReleasesNothing(t *testing.T) {
	for _, c := range []struct {
		state alpv1.ApprovalState
		name  string
		says  string
	}{
		{alpv1.ApprovalState_APPROVAL_STATE_DENIED, inbox.StateDenied, "denied by the person"},
		{alpv1.ApprovalState_APPROVAL_STATE_EXPIRED, inbox.StateExpired, "expired"},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := newInboxRig(t)
			ctx := context.Background()
			o := r.send(t, r.ana, "lee@example.org", "briefing.reply/v1", briefing, "")
			it := r.items(t, r.muse, 1)[0]
			held, _ := heldOf(it, "confidential_fields")
			muse := ingress.InboxAgent(r.sender(t, r.muse))
			if _, err := r.in.Inbox().Ack(ctx, muse, o.EnvelopeID); err != nil {
				t.Fatal(err)
			}
			r.decide(t, r.muse.Person.ID, o.EnvelopeID, held, c.state)
			after := r.item(t, r.muse, o.EnvelopeID, "the notice says the decision", func(it inbox.Item) bool {
				h, ok := heldOf(it, "confidential_fields")
				return ok && h.State == c.name
			})
			h, _ := heldOf(after, "confidential_fields")
			if !strings.Contains(h.Decision, c.says) || strings.Contains(string(after.Body), "120000") ||
				fieldOf(after, "/pipeline/value").Verdict == inbox.Released || !after.Acked {
				t.Fatalf("after a %s decision: %+v body %s", c.name, after, after.Body)
			}
			// Not offered again: nothing new for muse.
			r.items(t, r.muse, 0)
		})
	}
}

// TestReleaseCommitment: ana's meeting acceptance commits lee: no agent of
// his sees it until he approves; then every agent gets the message.
func TestReleaseCommitment(t *testing.T) {
	r := newInboxRig(t)
	body := `{"in_reply_to":"0190a5b8-7a7e-7c3e-9a8c-2d1f3b4c5d6e","start":"2026-05-04T10:00:00-04:00","duration":"PT30M"}`
	o := r.send(t, r.ana, "lee@example.org", "meeting.accept/v1", body, "")
	if o.Outcome != ingress.OutcomeHold {
		t.Fatalf("outcome %s, want hold", o.Outcome)
	}
	it := r.items(t, r.claude, 1)[0]
	held, ok := heldOf(it, "commitment")
	if !ok || len(it.Body) != 0 || it.Outcome != "hold" {
		t.Fatalf("before the decision claude reads %+v body %s", it, it.Body)
	}
	r.decide(t, r.claude.Person.ID, o.EnvelopeID, held, alpv1.ApprovalState_APPROVAL_STATE_APPROVED_ONCE)
	for _, a := range []brokertest.Agent{r.claude, r.muse} {
		got := r.item(t, a, o.EnvelopeID, "the meeting reaches "+a.AgentID, func(it inbox.Item) bool { return len(it.Body) > 0 })
		if !strings.Contains(string(got.Body), "PT30M") || len(got.Held) != 0 || got.Outcome != "deliver" ||
			fieldOf(got, "/start").Verdict != inbox.Released {
			t.Fatalf("%s after the approval: %+v body %s", a.AgentID, got, got.Body)
		}
	}
}

func decodeEvent(data []byte) (*alpv1.Event, error) { return bus.Decode(data) }

func deliveryOf(subject string, ev *alpv1.Event) bus.Delivery {
	return bus.Delivery{Event: ev, Subject: subject, Repeat: true}
}

// TestSenderSeesTheApproval: ana's agent reads held while lee has not
// decided, then the outcome: delivered once he approves the confidential
// fields; for a commitment he denies, refused.
func TestSenderSeesTheApproval(t *testing.T) {
	r := newInboxRig(t)
	ctx := context.Background()
	ana := r.sender(t, r.ana)
	status := func(id string) *ingress.Approval {
		t.Helper()
		o, err := r.door.Status(ctx, ana, id)
		if err != nil {
			t.Fatal(err)
		}
		return o.Approval
	}

	note := r.send(t, r.ana, "lee@example.org", "note/v1", `{"text":"status: all green"}`, "")
	r.items(t, r.claude, 1)
	if ap := status(note.EnvelopeID); ap != nil {
		t.Fatalf("a note nothing was held of: %+v", ap)
	}
	if _, err := r.in.Inbox().Ack(ctx, ingress.InboxAgent(r.sender(t, r.claude)), note.EnvelopeID); err != nil {
		t.Fatal(err)
	}

	o := r.send(t, r.ana, "lee@example.org", "briefing.reply/v1", briefing, "")
	it := r.items(t, r.muse, 2)[1]
	held, _ := heldOf(it, "confidential_fields")
	ap := status(o.EnvelopeID)
	if ap == nil || ap.State != ingress.ApprovalHeld || len(ap.Items) != 1 || ap.Items[0].ID != held.ID ||
		ap.Items[0].State != inbox.StatePending || ap.Items[0].Kind != "confidential_fields" ||
		!slices.Contains(ap.Items[0].Pointers, "/pipeline/value") {
		t.Fatalf("before the decision: %+v", ap)
	}
	r.decide(t, r.muse.Person.ID, o.EnvelopeID, held, alpv1.ApprovalState_APPROVAL_STATE_APPROVED_ONCE)
	if ap := status(o.EnvelopeID); ap.State != ingress.ApprovalDelivered || ap.Items[0].State != inbox.StateApprovedOnce {
		t.Fatalf("after the approval: %+v", ap)
	}

	body := `{"in_reply_to":"0190a5b8-7a7e-7c3e-9a8c-2d1f3b4c5d6e","start":"2026-05-04T10:00:00-04:00","duration":"PT30M"}`
	m := r.send(t, r.ana, "lee@example.org", "meeting.accept/v1", body, "")
	var mi inbox.Item
	testkit.Eventually(t, 10*time.Second, func() error {
		var err error
		mi, err = r.in.Inbox().Get(ctx, ingress.InboxAgent(r.sender(t, r.claude)), m.EnvelopeID)
		return err
	}, "the meeting is filed")
	mh, _ := heldOf(mi, "commitment")
	if ap := status(m.EnvelopeID); ap.State != ingress.ApprovalHeld || ap.Items[0].Commits != "meeting" {
		t.Fatalf("the meeting before the decision: %+v", ap)
	}
	r.decide(t, r.claude.Person.ID, m.EnvelopeID, mh, alpv1.ApprovalState_APPROVAL_STATE_DENIED)
	if ap := status(m.EnvelopeID); ap.State != ingress.ApprovalRefused || ap.Items[0].State != inbox.StateDenied {
		t.Fatalf("the meeting after the denial: %+v", ap)
	}
}
