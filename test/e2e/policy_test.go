package e2e

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	alpv1 "github.com/alpd-project/alpd/gen/alp/v1"
	"github.com/alpd-project/alpd/internal/streams"
	"github.com/alpd-project/alpd/internal/testkit"
)

const partnerTenant = "partner.example"

// policyAnswer is what an agent reads in alp.result.
type policyAnswer struct {
	EnvelopeID string `json:"envelope_id"`
	Outcome    string `json:"outcome"`
	Fields     []struct {
		Pointer string `json:"pointer"`
		Class   string `json:"class"`
		Action  string `json:"action"`
		Reasons []struct {
			Party string `json:"party"`
			Rule  string `json:"rule"`
			Code  string `json:"code"`
		} `json:"reasons"`
	} `json:"fields"`
}

// field is the answer's verdict on pointer ("" action when absent).
func (a policyAnswer) field(pointer string) (action, party, rule, code string) {
	for _, f := range a.Fields {
		if f.Pointer == pointer {
			action = f.Action
			if len(f.Reasons) > 0 {
				party, rule, code = f.Reasons[0].Party, f.Reasons[0].Rule, f.Reasons[0].Code
			}
		}
	}
	return
}

// sendTyped sends one typed ALP message over NLIP with a bearer token and
// returns the answer.
func sendTyped(t *testing.T, addr, token, to, typ, body string) policyAnswer {
	t.Helper()
	msg := fmt.Sprintf(`{"messagetype":"alp:%s","format":"text","subformat":"english","content":"from the e2e test",
	 "submessages":[{"label":"alp.to","format":"structured","subformat":"uri","content":"acct:%s"},
	 {"label":"alp.body","format":"structured","subformat":"json","content":%s}]}`, typ, to, body)
	req, _ := http.NewRequest(http.MethodPost, "http://"+addr+"/nlip/", strings.NewReader(msg))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := httpClient.Do(req)
	if err != nil {
		t.Fatalf("POST /nlip/: %v", err)
	}
	raw, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("POST /nlip/ %s to %s: %d %s; want 200 with policy's decision", typ, to, resp.StatusCode, raw)
	}
	c, ok := submessage(raw, "alp.result")
	if !ok {
		t.Fatalf("no alp.result in %s", raw)
	}
	var a policyAnswer
	if err := json.Unmarshal(c, &a); err != nil {
		t.Fatalf("alp.result: %v in %s", err, c)
	}
	return a
}

// acceptPending has the signed-in person accept the connection request
// waiting for them, through their web session.
func acceptPending(t *testing.T, s *webSession) {
	t.Helper()
	var id string
	testkit.Eventually(t, 10*time.Second, func() error {
		status, raw := s.do(t, http.MethodGet, "/v1/connections", nil)
		var list struct {
			Pending []struct {
				ID string `json:"id"`
			} `json:"pending"`
		}
		if status != http.StatusOK || json.Unmarshal(raw, &list) != nil || len(list.Pending) == 0 {
			return fmt.Errorf("GET /v1/connections: %d %s", status, raw)
		}
		id = list.Pending[0].ID
		return nil
	}, "a pending request for", s.personID)
	if status, raw := s.do(t, http.MethodPost, "/v1/connections/"+id+"/accept", nil); status != http.StatusOK {
		t.Fatalf("accept: %d %s", status, raw)
	}
}

// sendOnceConnected sends until the acceptance has reached policy (its
// projection follows the stream a moment after the write).
func sendOnceConnected(t *testing.T, addr, token, to, typ, body string) policyAnswer {
	t.Helper()
	var a policyAnswer
	testkit.Eventually(t, 10*time.Second, func() error {
		if a = sendTyped(t, addr, token, to, typ, body); a.Outcome == "refuse" {
			return fmt.Errorf("still refused: %+v", a)
		}
		return nil
	}, "the acceptance reaches policy")
	return a
}

// TestPolicyBetweenPeople runs the real alpd hosting two tenants and sends
// over NLIP with real personal access tokens: ana → lee in one tenant and
// ana → kim across tenants. A stranger is refused; a connection request is
// held and its recipient accepts it on their web session; then messages
// cross field by field: lee never opted in to free text, so the subject
// stays with ana; kim's organization is another, so ana's organization
// keeps the confidential figures. The answers' per-field reasons and the
// Deliverable events stored for the recipients carry the same verdicts.
func TestPolicyBetweenPeople(t *testing.T) {
	b := binaries(t)
	addrs := freeAddrs(t, 2)
	addr, natsAddr := addrs[0], addrs[1]
	configFile := filepath.Join(t.TempDir(), "alpd.yaml")
	writeYAML(t, configFile, map[string]any{
		"broker": map[string]any{"name": pathBroker, "tenants": []map[string]string{{"domain": splitTenant}, {"domain": partnerTenant}}},
		"nats":   map[string]any{"listen": natsAddr},
		"identity": map[string]any{"test_idp": map[string]any{
			"enabled": true,
			"users": []map[string]any{{"username": "ana", "password": "ana-pw"}, {"username": "lee", "password": "lee-pw"},
				{"username": "kim", "password": "kim-pw"}},
		}},
	})
	p := startProc(t, "alpd", b.alpd, hermeticEnv(), "--config", configFile, "--data-dir", t.TempDir(), "--http-addr", addr)
	waitReady(t, p, addr)
	ana := signIn(t, addr, splitTenant, "ana")
	lee := signIn(t, addr, splitTenant, "lee")
	kim := signIn(t, addr, partnerTenant, "kim")
	pat := ana.pat(t, "alp.send", "alp.read")
	lee.pat(t, "alp.read") // lee's agent: the views are made for its class (consumer)
	js := natsOf(t, natsAddr)
	deliverable := func(recipient *webSession, id string) *alpv1.Deliverable {
		t.Helper()
		return storedEvent(t, js, streams.Deliver, func() (string, error) {
			return streams.DeliverSubject(recipient.tenant, recipient.personID, id)
		}).GetDeliverable()
	}
	const meeting = `{"subject":"Q3 plan","start":"2026-05-04T10:00:00-04:00","duration":"PT30M","attendees":["ana@example.org","lee@example.org"]}`

	// A stranger: refused by the hard rule.
	if a := sendTyped(t, addr, pat, "lee@example.org", "meeting.request/v1", meeting); a.Outcome != "refuse" {
		t.Fatalf("to a stranger: %+v; want refuse", a)
	}

	// The connection request is held for lee, never an agent's.
	req := sendTyped(t, addr, pat, "lee@example.org", "connection.request/v1", `{"purpose":"introduction","message":"We met at the expo."}`)
	if req.Outcome != "hold" {
		t.Fatalf("connection request: %+v; want hold", req)
	}
	if d := deliverable(lee, req.EnvelopeID); len(d.GetViews()) != 0 || len(d.GetHeld()) != 1 ||
		d.GetHeld()[0].GetKind() != alpv1.HeldKind_HELD_KIND_CONNECTION_REQUEST {
		t.Fatalf("lee's deliverable for the request: views %v held %v", d.GetViews(), d.GetHeld())
	}
	acceptPending(t, lee)

	// Connected, in one tenant: everything but the free text crosses.
	a := sendOnceConnected(t, addr, pat, "lee@example.org", "meeting.request/v1", meeting)
	if a.Outcome != "deliver_partial" {
		t.Fatalf("to lee: %+v; want deliver_partial", a)
	}
	if action, party, rule, code := a.field("/subject"); action != "deny" || party != "recipient" || rule != "" || code != "freetext_not_opted_in" {
		t.Errorf("ana hears of /subject: %s %s %q %s; want deny by the recipient, freetext_not_opted_in, the policy id withheld", action, party, rule, code)
	}
	if action, _, _, _ := a.field("/start"); action != "allow" {
		t.Errorf("ana hears of /start: %s; want allow", action)
	}
	d := deliverable(lee, a.EnvelopeID)
	if d.GetOutcome() != alpv1.Outcome_OUTCOME_DELIVER_PARTIAL || d.GetRecipientPersonId() != lee.personID || d.GetSenderPersonId() != ana.personID {
		t.Fatalf("lee's deliverable: %v", d)
	}
	if len(d.GetViews()) != 1 || d.GetViews()[0].GetTrustClass() != "consumer" {
		t.Errorf("lee's agent is consumer-class (a PAT): views %v", d.GetViews())
	}
	for _, v := range d.GetViews() {
		if slices.Contains(v.GetPointers(), "/subject") || !slices.Contains(v.GetPointers(), "/start") || v.GetBody() == nil {
			t.Errorf("lee's %s view: %v", v.GetTrustClass(), v.GetPointers())
		}
	}
	if i := slices.IndexFunc(d.GetFields(), func(f *alpv1.FieldVerdict) bool { return f.GetPointer() == "/subject" }); i < 0 ||
		d.GetFields()[i].GetReasons()[0].GetRule() != "freetext-off" {
		t.Errorf("lee's own verdict on /subject names his policy: %v", d.GetFields())
	}

	// Across tenants: kim accepts; ana's consumer agent (a PAT) may not
	// share confidential figures, and her organization would not send them
	// to another one anyway.
	if r := sendTyped(t, addr, pat, "kim@partner.example", "connection.request/v1", `{"purpose":"introduction"}`); r.Outcome != "hold" {
		t.Fatalf("connection request to kim: %+v", r)
	}
	acceptPending(t, kim)
	briefing := `{"in_reply_to":"0190a5b8-7a7e-7c3e-9a8c-2d1f3b4c5d6e","as_of":"2026-04-01T09:00:00+02:00","summary":"Renewal likely.",
	 "figures":[{"label":"ARR","amount":{"currency":"EUR","value":"1200000.00"}}]}`
	a = sendOnceConnected(t, addr, pat, "kim@partner.example", "briefing.reply/v1", briefing)
	if a.Outcome != "deliver_partial" {
		t.Fatalf("to kim: %+v; want deliver_partial", a)
	}
	if action, party, rule, _ := a.field("/figures/0/amount/value"); action != "deny" || party != "sender" || rule != "sender-no-confidential-from-consumer" {
		t.Errorf("ana hears of the figure: %s %s %s; want denied by her own rule for consumer agents", action, party, rule)
	}
	d = deliverable(kim, a.EnvelopeID)
	for _, f := range d.GetFields() {
		if strings.HasPrefix(f.GetPointer(), "/figures") {
			t.Errorf("a field ana's side withheld reached kim's side: %v", f)
		}
	}
	if i := slices.IndexFunc(d.GetFields(), func(f *alpv1.FieldVerdict) bool { return f.GetPointer() == "/as_of" }); i < 0 ||
		d.GetFields()[i].GetAction() != alpv1.FieldAction_FIELD_ACTION_ALLOW {
		t.Errorf("kim's verdicts: %v", d.GetFields())
	}
	p.stop(t)
}
