package policy_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/proto"

	"github.com/alpd-project/alpd/broker"
	nlipv1 "github.com/alpd-project/alpd/gen/alp/nlip/v1"
	alpv1 "github.com/alpd-project/alpd/gen/alp/v1"
	"github.com/alpd-project/alpd/internal/accesstoken"
	"github.com/alpd-project/alpd/internal/brokertest"
	"github.com/alpd-project/alpd/internal/bus"
	"github.com/alpd-project/alpd/internal/seal"
	"github.com/alpd-project/alpd/internal/streams"
	"github.com/alpd-project/alpd/internal/testkit"
	"github.com/alpd-project/alpd/services/ingress"
	"github.com/alpd-project/alpd/services/policy/relationships"
)

const (
	home    = "example.org"
	partner = "partner.example"
)

// rig is a broker hosting two tenants, with ana and lee at example.org and
// kim at partner.example, each with a consumer agent, and ana with a
// company agent too.
type rig struct {
	br              *brokertest.Rig
	js              jetstream.JetStream
	rels            *relationships.Store
	ana, lee, kim   brokertest.Agent
	anaCompanyToken string
	sealer          *seal.Sealer
}

func newRig(t *testing.T) *rig {
	t.Helper()
	return newRigOf(t, nil)
}

// newRigOf is newRig running only services (nil: all), on a NATS that
// holds the streams of the others, as if they had run.
func newRigOf(t *testing.T, services []string, others ...alpv1.Role) *rig {
	t.Helper()
	// Rate limits far above what a test sends: retries wait for a
	// projection, not for a bucket.
	unlimited := ingress.Rate{Limit: 1e6, Burst: 1 << 20}
	br := brokertest.StartWithStreamsOf(t, broker.Config{Tenants: []string{home, partner}, Services: services,
		Door: ingress.DoorConfig{PerAgent: unlimited, PerPerson: unlimited, PerTenant: unlimited}}, nil, others...)
	js, err := jetstream.New(br.NC)
	if err != nil {
		t.Fatal(err)
	}
	r := &rig{br: br, js: js}
	r.ana = br.Agent(t, home, "sub-ana", "ana@example.org", "agent-ana", "alp.send", "alp.read")
	r.lee = br.Agent(t, home, "sub-lee", "lee@example.org", "agent-lee", "alp.send", "alp.read")
	r.kim = br.Agent(t, partner, "sub-kim", "kim@partner.example", "agent-kim", "alp.send", "alp.read")
	r.anaCompanyToken = br.Mint(t, r.ana, accesstoken.ClassCompany, "alp.send")
	// The test's own writer of relationships: commands on the same stream
	// the broker's policy replica projects.
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	if r.rels, err = relationships.Open(ctx, br.B.Bus(), []string{home, partner}, nil); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.rels.Close)
	kv, err := js.KeyValue(ctx, "ALPD_DATAKEYS")
	if err != nil {
		t.Fatal(err)
	}
	r.sealer = seal.New(kv, br.KS)
	return r
}

// result is the agent's NLIP answer's alp.result.
type result struct {
	EnvelopeID string `json:"envelope_id"`
	Outcome    string `json:"outcome"`
}

// send posts one typed message over NLIP and returns the answer.
func (r *rig) send(t *testing.T, token, to, typ, body string) result {
	t.Helper()
	msg := `{"messagetype":"alp:` + typ + `","format":"text","subformat":"english","content":"from a test","submessages":[` +
		`{"label":"alp.to","format":"structured","subformat":"uri","content":"acct:` + to + `"},` +
		`{"label":"alp.body","format":"structured","subformat":"json","content":` + body + `}]}`
	req, _ := http.NewRequest(http.MethodPost, r.br.Srv.URL+"/nlip/", bytes.NewReader([]byte(msg)))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("send %s to %s: %d %s", typ, to, resp.StatusCode, raw)
	}
	var reply struct {
		Submessages []struct {
			Label   string          `json:"label"`
			Content json.RawMessage `json:"content"`
		} `json:"submessages"`
	}
	if err := json.Unmarshal(raw, &reply); err != nil {
		t.Fatal(err)
	}
	for _, sm := range reply.Submessages {
		if sm.Label == "alp.result" {
			var res result
			if err := json.Unmarshal(sm.Content, &res); err != nil {
				t.Fatal(err)
			}
			return res
		}
	}
	t.Fatalf("no alp.result in %s", raw)
	return result{}
}

func (r *rig) stored(t *testing.T, stream, subject string) *alpv1.Event {
	t.Helper()
	s, err := r.js.Stream(context.Background(), r.br.B.Bus().StreamName(stream))
	if err != nil {
		t.Fatal(err)
	}
	var msg *jetstream.RawStreamMsg
	testkit.Eventually(t, 10*time.Second, func() error {
		msg, err = s.GetLastMsgForSubject(context.Background(), subject)
		return err
	}, "an event on "+subject)
	ev, err := bus.Decode(msg.Data)
	if err != nil {
		t.Fatal(err)
	}
	return ev
}

func (r *rig) decided(t *testing.T, sender brokertest.Agent, id string) *alpv1.Decided {
	t.Helper()
	subj, err := streams.DecidedSubject(sender.Person.Tenant, sender.Person.ID, id)
	if err != nil {
		t.Fatal(err)
	}
	return r.stored(t, streams.Decided, subj).GetDecided()
}

func (r *rig) deliverable(t *testing.T, recipient brokertest.Agent, id string) *alpv1.Deliverable {
	t.Helper()
	subj, err := streams.DeliverSubject(recipient.Person.Tenant, recipient.Person.ID, id)
	if err != nil {
		t.Fatal(err)
	}
	return r.stored(t, streams.Deliver, subj).GetDeliverable()
}

func (r *rig) noDeliverable(t *testing.T, recipient brokertest.Agent, id string) {
	t.Helper()
	subj, _ := streams.DeliverSubject(recipient.Person.Tenant, recipient.Person.ID, id)
	s, err := r.js.Stream(context.Background(), r.br.B.Bus().StreamName(streams.Deliver))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.GetLastMsgForSubject(context.Background(), subj); err == nil {
		t.Fatalf("a deliverable for %s was stored", id)
	}
}

// view opens the trust class's view of a deliverable.
func (r *rig) view(t *testing.T, d *alpv1.Deliverable, class string) map[string]any {
	t.Helper()
	for _, v := range d.GetViews() {
		if v.GetTrustClass() != class {
			continue
		}
		if v.GetBody() == nil {
			return map[string]any{}
		}
		pt, err := r.sealer.Open(context.Background(), v.GetBody(), seal.ViewAAD(d.GetEnvelope().GetId(), class))
		if err != nil {
			t.Fatalf("open the %s view: %v", class, err)
		}
		var out map[string]any
		if err := json.Unmarshal(pt, &out); err != nil {
			t.Fatal(err)
		}
		return out
	}
	t.Fatalf("no %s view in %v", class, d.GetViews())
	return nil
}

func field(d []*alpv1.FieldVerdict, pointer string) *alpv1.FieldVerdict {
	i := slices.IndexFunc(d, func(f *alpv1.FieldVerdict) bool { return f.GetPointer() == pointer })
	if i < 0 {
		return nil
	}
	return d[i]
}

const meeting = `{"subject":"Q3 plan","start":"2026-05-04T10:00:00-04:00","duration":"PT30M","attendees":["ana@example.org","lee@example.org"],"agenda":["numbers"]}`

// connect has a ask b over NLIP and b accept through the relationships
// store, as their web session will.
func (r *rig) connect(t *testing.T, a, b brokertest.Agent, bAddress string) {
	t.Helper()
	res := r.send(t, a.Token, bAddress, "connection.request/v1", `{"purpose":"introduction","message":"hello"}`)
	if res.Outcome != "hold" {
		t.Fatalf("connection request: outcome %q, want hold", res.Outcome)
	}
	d := r.deliverable(t, b, res.EnvelopeID)
	if len(d.GetViews()) != 0 || len(d.GetHeld()) != 1 || d.GetHeld()[0].GetKind() != alpv1.HeldKind_HELD_KIND_CONNECTION_REQUEST {
		t.Fatalf("a connection request is the person's, never an agent's: views %v, held %v", d.GetViews(), d.GetHeld())
	}
	var pending []relationships.Connection
	testkit.Eventually(t, 5*time.Second, func() error {
		var err error
		pending, err = r.rels.Pending(b.Person.Tenant, b.Person.ID)
		if err == nil && len(pending) == 0 {
			err = relationships.ErrNotFound
		}
		return err
	}, "the request is pending")
	if _, err := r.rels.Accept(context.Background(), b.Person.Tenant, b.Person.ID, pending[0].ID); err != nil {
		t.Fatal(err)
	}
}

func TestStrangerThenConnected(t *testing.T) {
	r := newRig(t)
	res := r.send(t, r.ana.Token, "lee@example.org", "meeting.request/v1", meeting)
	if res.Outcome != "refuse" {
		t.Fatalf("to a stranger: %q, want refuse", res.Outcome)
	}
	if d := r.decided(t, r.ana, res.EnvelopeID); d.GetReasons()[0].GetCode() != "stranger" || d.GetRecipientPersonId() != r.lee.Person.ID {
		t.Fatalf("decided %v", d)
	}
	r.noDeliverable(t, r.lee, res.EnvelopeID)

	r.connect(t, r.ana, r.lee, "lee@example.org")
	var got result
	testkit.Eventually(t, 5*time.Second, func() error {
		if got = r.send(t, r.ana.Token, "lee@example.org", "meeting.request/v1", meeting); got.Outcome == "refuse" {
			return fmt.Errorf("%w: %+v", relationships.ErrState, r.decided(t, r.ana, got.EnvelopeID).GetReasons())
		}
		return nil
	}, "ana's meeting request is delivered once lee accepted")
	d := r.deliverable(t, r.lee, got.EnvelopeID)
	// Lee never opted in to free text: the subject and the agenda stay
	// with ana, the rest crosses.
	if got.Outcome != "deliver_partial" || d.GetOutcome() != alpv1.Outcome_OUTCOME_DELIVER_PARTIAL || d.GetSenderPersonId() != r.ana.Person.ID || len(d.GetHeld()) != 0 {
		t.Fatalf("answer %q, deliverable %v", got.Outcome, d)
	}
	if f := field(d.GetFields(), "/subject"); f.GetAction() != alpv1.FieldAction_FIELD_ACTION_DENY || f.GetReasons()[0].GetRule() != "freetext-off" {
		t.Fatalf("the free-text subject: %v", f)
	}
	v := r.view(t, d, "consumer")
	if _, ok := v["subject"]; ok || v["start"] != "2026-05-04T10:00:00-04:00" || len(v["attendees"].([]any)) != 2 {
		t.Fatalf("lee's consumer view %v", v)
	}
	if d.GetEnvelope().GetSealedBody() != nil || proto.HasExtension(d.GetEnvelope(), nlipv1.E_Nlip) {
		t.Fatal("the deliverable's envelope carries more than the header")
	}
	if dec := r.decided(t, r.ana, got.EnvelopeID); len(dec.GetFields()) == 0 || dec.GetEnvelope().GetSealedBody() == nil {
		t.Fatalf("decided %v", dec)
	}
}

// Across two tenants of one broker: the recipient's side records the
// connection, and the sender organization's egress withholds confidential
// figures from a relationship it did not pre-approve.
func TestAcrossTenantsConfidentialEgress(t *testing.T) {
	r := newRig(t)
	r.connect(t, r.ana, r.kim, "kim@partner.example")
	body := `{"in_reply_to":"0190a5b8-7a7e-7c3e-9a8c-2d1f3b4c5d6e","as_of":"2026-04-01T09:00:00+02:00",
		"summary":"Renewal likely.","figures":[{"label":"ARR","amount":{"currency":"EUR","value":"1200000.00"}}],
		"pipeline":{"currency":"USD","value":"350000"}}`
	var res result
	testkit.Eventually(t, 5*time.Second, func() error {
		if res = r.send(t, r.anaCompanyToken, "kim@partner.example", "briefing.reply/v1", body); res.Outcome == "refuse" {
			return fmt.Errorf("%w: %+v", relationships.ErrState, r.decided(t, r.ana, res.EnvelopeID).GetReasons())
		}
		return nil
	}, "kim's acceptance reaches policy")
	if res.Outcome != "deliver_partial" {
		t.Fatalf("outcome %q, want deliver_partial", res.Outcome)
	}
	dec := r.decided(t, r.ana, res.EnvelopeID)
	f := field(dec.GetFields(), "/figures/0/amount/value")
	if f == nil || f.GetAction() != alpv1.FieldAction_FIELD_ACTION_DENY || f.GetReasons()[0].GetParty() != "sender_org" ||
		f.GetReasons()[0].GetRule() != "egress-confidential-external" {
		t.Fatalf("the confidential figure: %v", f)
	}
	d := r.deliverable(t, r.kim, res.EnvelopeID)
	// Kim's only agent is consumer-class: the consumer view is the one made.
	v := r.view(t, d, "consumer")
	if _, ok := v["figures"]; ok {
		t.Fatalf("withheld figures crossed: %v", v)
	}
	if v["as_of"] != "2026-04-01T09:00:00+02:00" {
		t.Fatalf("kim's consumer view %v", v)
	}
}

// A message that commits the recipient waits for them.
func TestCommitmentHeld(t *testing.T) {
	r := newRig(t)
	r.connect(t, r.lee, r.ana, "ana@example.org")
	body := `{"in_reply_to":"0190a5b8-7a7e-7c3e-9a8c-2d1f3b4c5d6e","start":"2026-05-04T10:00:00-04:00","duration":"PT30M"}`
	var res result
	testkit.Eventually(t, 5*time.Second, func() error {
		if res = r.send(t, r.lee.Token, "ana@example.org", "meeting.accept/v1", body); res.Outcome == "refuse" {
			return relationships.ErrState
		}
		return nil
	}, "ana's acceptance reaches policy")
	if res.Outcome != "hold" {
		t.Fatalf("outcome %q, want hold", res.Outcome)
	}
	d := r.deliverable(t, r.ana, res.EnvelopeID)
	if len(d.GetHeld()) != 1 || d.GetHeld()[0].GetKind() != alpv1.HeldKind_HELD_KIND_COMMITMENT || d.GetHeld()[0].GetCommits() != "meeting" ||
		d.GetHeld()[0].GetBody() == nil || len(d.GetViews()) != 0 {
		t.Fatalf("deliverable %v", d)
	}
}
