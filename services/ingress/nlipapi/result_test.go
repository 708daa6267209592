package nlipapi_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/types/known/timestamppb"

	alpv1 "github.com/alpd-project/alpd/gen/alp/v1"
	"github.com/alpd-project/alpd/internal/bus"
	"github.com/alpd-project/alpd/internal/streams"
	"github.com/alpd-project/alpd/services/ingress"
)

// fakePolicy answers every SendRequested on the rig's send stream with the
// Decided decide makes, as policy publishes it (producer policy, caused by
// the SendRequested, on the envelope's decided subject), until the test
// ends.
func fakePolicy(t *testing.T, r *rig, decide func(sr *alpv1.SendRequested) *alpv1.Decided) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	c, err := r.js.OrderedConsumer(ctx, "ALPD_SEND", jetstream.OrderedConsumerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		for ctx.Err() == nil {
			m, err := c.Next(jetstream.FetchMaxWait(time.Second))
			if err != nil {
				continue
			}
			cause, err := bus.Decode(m.Data())
			if err != nil {
				continue
			}
			sr := cause.GetSendRequested()
			d := decide(sr)
			d.Envelope, d.SenderPersonId = sr.GetEnvelope(), sr.GetSenderPersonId()
			ev := &alpv1.Event{Header: &alpv1.EventHeader{Type: "decided", SchemaVersion: 1, EventId: uuid.Must(uuid.NewV7()).String(),
				CausationId: cause.GetHeader().GetEventId(), Tenant: tenant, ProducerRole: alpv1.Role_ROLE_POLICY, Occurred: timestamppb.Now()},
				Body: &alpv1.Event_Decided{Decided: d}}
			subject, _ := streams.DecidedSubject(tenant, sr.GetSenderPersonId(), sr.GetEnvelope().GetId())
			msg, err := bus.NewMsg(subject, ev)
			if err != nil {
				t.Error(err)
				return
			}
			if _, err := r.js.PublishMsg(ctx, msg); err != nil && ctx.Err() == nil {
				t.Error(err)
			}
		}
	}()
}

func verdict(pointer, class string, action alpv1.FieldAction, reasons ...*alpv1.Reason) *alpv1.FieldVerdict {
	return &alpv1.FieldVerdict{Pointer: pointer, Class: class, Action: action, Reasons: reasons}
}

// TestAnswerCarriesFieldVerdicts: the NLIP answer (and a later poll)
// carries every field's verdict as policy decided it for the sender —
// pointer, class, action, each reason's party and code, and the rule only
// where the Decided names it — and says in English how many fields cross
// and why the others do not.
func TestAnswerCarriesFieldVerdicts(t *testing.T) {
	r := newRig(t, rigOptions{services: []string{"identity", "ingress"}, door: ingress.DoorConfig{DecisionWait: 10 * time.Second},
		streamsOf: []alpv1.Role{alpv1.Role_ROLE_POLICY, alpv1.Role_ROLE_APPROVALS}})
	allow := alpv1.FieldAction_FIELD_ACTION_ALLOW
	deny := alpv1.FieldAction_FIELD_ACTION_DENY
	fakePolicy(t, r, func(*alpv1.SendRequested) *alpv1.Decided {
		return &alpv1.Decided{Outcome: alpv1.Outcome_OUTCOME_DELIVER_PARTIAL, Fields: []*alpv1.FieldVerdict{
			verdict("/agenda/0", "internal", deny, &alpv1.Reason{Party: "sender_org", Rule: "no-freetext", Code: "freetext_off", Message: "free text stays in"}),
			verdict("/attendees/0", "internal", allow),
			verdict("/duration", "internal", allow),
			verdict("/location/url", "confidential", deny, &alpv1.Reason{Party: "recipient_org", Code: "confidential_egress"}),
			verdict("/location/kind", "public", allow),
			verdict("/start", "internal", allow),
			verdict("/subject", "internal", allow),
		}}
	})
	resp, reply := r.post(t, "/nlip/", r.token, "application/json", sendJSON("bo@other.example"))
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("%d %+v", resp.StatusCode, reply)
	}
	check := func(what string, res map[string]any, text string) {
		t.Helper()
		if res["outcome"] != "deliver_partial" {
			t.Errorf("%s: outcome %v", what, res["outcome"])
		}
		fields, _ := res["fields"].([]any)
		if len(fields) != 7 {
			t.Fatalf("%s: fields %v", what, res["fields"])
		}
		url := fields[3].(map[string]any)
		reasons, _ := url["reasons"].([]any)
		if len(reasons) != 1 {
			t.Fatalf("%s: /location/url verdict %v, want one reason", what, url)
		}
		rs := reasons[0].(map[string]any)
		if url["pointer"] != "/location/url" || url["class"] != "confidential" || url["action"] != "deny" ||
			rs["party"] != "recipient_org" || rs["code"] != "confidential_egress" {
			t.Errorf("%s: /location/url verdict %v", what, url)
		}
		if _, named := rs["rule"]; named {
			t.Errorf("%s: the recipient org's rule is named: %v", what, rs)
		}
		agenda := fields[0].(map[string]any)
		if ar, _ := agenda["reasons"].([]any); len(ar) != 1 || ar[0].(map[string]any)["rule"] != "no-freetext" || ar[0].(map[string]any)["code"] != "freetext_off" {
			t.Errorf("%s: /agenda/0 verdict %v", what, agenda)
		}
		if subj := fields[6].(map[string]any); subj["action"] != "allow" || subj["reasons"] != nil {
			t.Errorf("%s: /subject verdict %v", what, subj)
		}
		want := "delivered 5 of 7 fields; 2 withheld: /agenda/0 (sender_org rule no-freetext: freetext_off), /location/url (recipient_org: confidential_egress)."
		if !strings.Contains(text, want) {
			t.Errorf("%s: text %q\nwant it to contain %q", what, text, want)
		}
	}
	text, _ := reply.Content.Text()
	res := result(t, reply)
	check("answer", res, text)

	req, _ := http.NewRequest(http.MethodGet, r.srv.URL+"/nlip/envelopes/"+res["envelope_id"].(string), nil)
	req.Header.Set("Authorization", "Bearer "+r.token)
	resp, reply = r.do(t, req)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("poll: %d", resp.StatusCode)
	}
	text, _ = reply.Content.Text()
	check("poll", result(t, reply), text)
}

// TestAnswerSentences: the English text of each outcome, from decisions
// with fields and reasons.
func TestAnswerSentences(t *testing.T) {
	r := newRig(t, rigOptions{services: []string{"identity", "ingress"}, door: ingress.DoorConfig{DecisionWait: 10 * time.Second},
		streamsOf: []alpv1.Role{alpv1.Role_ROLE_POLICY, alpv1.Role_ROLE_APPROVALS}})
	allow, deny, hold := alpv1.FieldAction_FIELD_ACTION_ALLOW, alpv1.FieldAction_FIELD_ACTION_DENY, alpv1.FieldAction_FIELD_ACTION_HOLD
	decisions := make(chan *alpv1.Decided, 1)
	fakePolicy(t, r, func(*alpv1.SendRequested) *alpv1.Decided { return <-decisions })
	for _, c := range []struct {
		name string
		d    *alpv1.Decided
		want string
	}{
		{"deliver", &alpv1.Decided{Outcome: alpv1.Outcome_OUTCOME_DELIVER, Fields: []*alpv1.FieldVerdict{
			verdict("/start", "internal", allow), verdict("/subject", "internal", allow)}},
			"allowed for delivery, all 2 fields."},
		{"hold", &alpv1.Decided{Outcome: alpv1.Outcome_OUTCOME_HOLD, Fields: []*alpv1.FieldVerdict{
			verdict("/start", "internal", hold, &alpv1.Reason{Party: "recipient", Rule: "ask-first", Code: "commitment_held"}),
			verdict("/subject", "internal", allow)}},
			"held for approval; 1 held for approval: /start (recipient rule ask-first: commitment_held)."},
		{"refuse", &alpv1.Decided{Outcome: alpv1.Outcome_OUTCOME_REFUSE,
			Reasons: []*alpv1.Reason{{Party: "broker", Code: "stranger"}},
			Fields:  []*alpv1.FieldVerdict{verdict("/subject", "internal", deny, &alpv1.Reason{Party: "broker", Code: "stranger"})}},
			"refused. broker: stranger."},
	} {
		decisions <- c.d
		_, reply := r.post(t, "/nlip/", r.token, "application/json", sendJSON("bo@other.example"))
		if text, _ := reply.Content.Text(); !strings.HasSuffix(text, c.want) {
			t.Errorf("%s: %q, want it to end %q", c.name, text, c.want)
		}
	}
}
