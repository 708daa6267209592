package e2e

import (
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/alpd-project/alpd/internal/testkit"
)

// approvalItem is an item of GET /v1/approvals(/items/{id}).
type approvalItem struct {
	ID            string `json:"id"`
	Kind          string `json:"kind"`
	State         string `json:"state"`
	EnvelopeID    string `json:"envelope_id"`
	From          string `json:"from"`
	AgentName     string `json:"agent_name"`
	AgentClass    string `json:"agent_class"`
	Attested      bool   `json:"attested"`
	Verification  string `json:"verification"`
	PayloadDigest string `json:"payload_digest"`
	BindingCode   string `json:"binding_code"`
	SupersededBy  string `json:"superseded_by"`
	Disclosed     []struct {
		Pointer string `json:"pointer"`
		Class   string `json:"class"`
	} `json:"disclosed"`
	Rendered struct {
		Summary string `json:"summary"`
		Details []struct {
			Pointer, Label, Value, Class string
		} `json:"details"`
	} `json:"rendered"`
	Offers []string `json:"offers"`
}

// approvals are the signed-in person's items.
func (s *webSession) approvals(t *testing.T) []approvalItem {
	t.Helper()
	status, raw := s.do(t, http.MethodGet, "/v1/approvals", nil)
	var list struct {
		Items []approvalItem `json:"items"`
	}
	if status != http.StatusOK || json.Unmarshal(raw, &list) != nil {
		t.Fatalf("GET /v1/approvals: %d %s", status, raw)
	}
	return list.Items
}

// approval waits for the person's item about envelope, and reads it whole.
func (s *webSession) approval(t *testing.T, envelope string) approvalItem {
	t.Helper()
	var id string
	testkit.Eventually(t, 15*time.Second, func() error {
		for _, it := range s.approvals(t) {
			if it.EnvelopeID == envelope {
				id = it.ID
				return nil
			}
		}
		return fmt.Errorf("no approval item for %s", envelope)
	}, "an approval item")
	return s.approvalItem(t, id)
}

func (s *webSession) approvalItem(t *testing.T, id string) approvalItem {
	t.Helper()
	status, raw := s.do(t, http.MethodGet, "/v1/approvals/items/"+id, nil)
	var it approvalItem
	if status != http.StatusOK || json.Unmarshal(raw, &it) != nil {
		t.Fatalf("GET /v1/approvals/items/%s: %d %s", id, status, raw)
	}
	return it
}

// decide posts a decision; it answers the status, the problem code (if
// any) and the item as the answer gives it.
func (s *webSession) decide(t *testing.T, id, decision, digest string) (int, string, approvalItem) {
	t.Helper()
	body, _ := json.Marshal(map[string]string{"decision": decision, "payload_digest": digest})
	status, raw := s.do(t, http.MethodPost, "/v1/approvals/items/"+id+"/decision", body)
	var it approvalItem
	_ = json.Unmarshal(raw, &it)
	return status, problemOf(raw).Code, it
}

// heldFor waits a few seconds for the person's item of kind about
// envelope: a message sent before policy knows the recipient's agents
// holds nothing, so the caller sends again.
func heldFor(t *testing.T, s *webSession, envelope, kind string) (approvalItem, error) {
	t.Helper()
	for deadline := time.Now().Add(3 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		for _, it := range s.approvals(t) {
			if it.EnvelopeID == envelope && it.Kind == kind {
				return it, nil
			}
		}
	}
	return approvalItem{}, fmt.Errorf("nothing of kind %s held for %s", kind, envelope)
}

// TestApprovalsDecideAndRelease is issue 15's approvals over the JSON API
// against the real alpd: a confidential field held from lee's consumer
// agent Muse is released by approve once; a meeting acceptance that commits
// lee waits, is approved always (a standing rule), the next one is
// delivered without asking, and after the rule is revoked the next one
// waits again; a stranger's connection request is denied (declined), one
// left alone expires; a superseded payload and a replayed or foreign
// decision change nothing; the organization's pre-approved relationship
// naming meetings delivers the next acceptance without asking. Lee's ledger records the requests, decisions
// and rules.
func TestApprovalsDecideAndRelease(t *testing.T) {
	d := newDeliveryBroker(t, []string{"sam", "zed"}, map[string]any{
		"approvals": map[string]any{"expiry": map[string]any{"connection_request": "8s"}, "sweep_every": "200ms"},
	})
	addr := d.addr
	d.ana, d.lee = signIn(t, addr, splitTenant, "ana"), signIn(t, addr, splitTenant, "lee")
	d.anaPAT = d.ana.pat(t, "alp.send", "alp.read")
	connectPeople(t, addr, d.anaPAT, "lee@"+splitTenant, d.lee)
	lee := d.lee
	desk := companyAgent(t, d.ana, d.ana, "desk", "alp.read", "alp.send") // attested
	muse := lee.patNamed(t, "muse", "alp.read", "alp.send")               // consumer, self-attested

	// The connection ana asked for and lee accepted on the connections
	// page leaves its item nothing to decide.
	testkit.Eventually(t, 10*time.Second, func() error {
		for _, it := range lee.approvals(t) {
			if it.Kind == "connection_request" && it.From == "ana@"+splitTenant && it.State != "cancelled" {
				return fmt.Errorf("ana's request is %s", it.State)
			}
		}
		return nil
	}, "ana's connection item cancelled")

	// 1. A confidential field held from Muse, released once.
	const url = "https://video.example/q4-plan"
	meeting := `{"subject":"Q4 plan","start":"2026-12-03T10:00:00Z","duration":"PT30M","attendees":["lee@` + splitTenant +
		`"],"location":{"kind":"video","url":"` + url + `"}}`
	var req policyAnswer
	var conf approvalItem
	testkit.Eventually(t, 30*time.Second, func() error {
		// Policy holds a field for consumer agents once it knows lee has one.
		req = sendTyped(t, addr, desk, "lee@"+splitTenant, "meeting.request/v1", meeting)
		it, err := heldFor(t, lee, req.EnvelopeID, "confidential_fields")
		if err == nil {
			conf = lee.approvalItem(t, it.ID)
		}
		return err
	}, "a held confidential field")
	if conf.State != "pending" || conf.From != "ana@"+splitTenant || conf.AgentName != "desk" || conf.AgentClass != "company" || !conf.Attested ||
		!slices.Equal(conf.Offers, []string{"approve_once", "deny"}) || len(conf.Disclosed) != 1 || conf.Disclosed[0].Pointer != "/location/url" ||
		conf.Disclosed[0].Class != "confidential" || len(conf.BindingCode) != 9 {
		t.Fatalf("the held field's item: %+v", conf)
	}
	if !slices.ContainsFunc(conf.Rendered.Details, func(d struct{ Pointer, Label, Value, Class string }) bool { return d.Value == url }) {
		t.Errorf("the page does not show lee the held value: %+v", conf.Rendered.Details)
	}
	if it := restItem(t, addr, muse, req.EnvelopeID); it.verdict("/location/url") != "held" {
		t.Fatalf("muse's view before the decision: %+v", it)
	}
	if status, code, it := lee.decide(t, conf.ID, "approve_once", conf.PayloadDigest); status != http.StatusOK || it.State != "approved_once" {
		t.Fatalf("approve once: %d %s %+v", status, code, it)
	}
	testkit.Eventually(t, 15*time.Second, func() error {
		it := restItem(t, addr, muse, req.EnvelopeID)
		if loc, _ := it.Body["location"].(map[string]any); loc["url"] != url {
			return fmt.Errorf("muse's item %+v", it.Body)
		}
		return nil
	}, "the released field at muse")
	// A replayed decision shows the final state and changes nothing.
	if status, code, it := lee.decide(t, conf.ID, "deny", conf.PayloadDigest); status != http.StatusConflict || code != "" || it.State != "approved_once" {
		t.Fatalf("a replayed decision: %d %s %+v", status, code, it)
	}
	// Someone else's item is not found; an agent's token is refused.
	if status, code, _ := d.ana.decide(t, conf.ID, "deny", conf.PayloadDigest); status != http.StatusNotFound || code != "approval_not_found" {
		t.Fatalf("ana deciding lee's item: %d %s", status, code)
	}
	if status, raw := bearerGet(t, addr, "/v1/approvals", muse, nil); status != http.StatusForbidden || problemOf(raw).Code != "agent_credential_refused" {
		t.Fatalf("an agent's token on /v1/approvals: %d %s", status, raw)
	}

	// 2. A commitment, approved always; the standing rule covers the next.
	accept := func(start string) policyAnswer {
		return sendTyped(t, addr, desk, "lee@"+splitTenant, "meeting.accept/v1",
			`{"in_reply_to":"`+req.EnvelopeID+`","start":"`+start+`","duration":"PT30M"}`)
	}
	first := accept("2026-12-03T10:00:00Z")
	if first.Outcome != "hold" {
		t.Fatalf("a commitment: %+v", first)
	}
	commit := lee.approval(t, first.EnvelopeID)
	if commit.Kind != "commitment" || !slices.Contains(commit.Offers, "approve_always") ||
		!strings.Contains(commit.Rendered.Summary, "commits you to a meeting on Thursday 3 December 2026, 10:00") {
		t.Fatalf("the commitment's item: %+v", commit)
	}
	// The sending agent sees the item pending, with the page's binding code.
	var sent struct {
		Approval struct {
			State string `json:"state"`
			Items []struct {
				State       string `json:"state"`
				BindingCode string `json:"binding_code"`
			} `json:"items"`
		} `json:"approval"`
	}
	if code, raw := bearerGet(t, addr, "/v1/agent/messages/"+first.EnvelopeID, desk, &sent); code != http.StatusOK ||
		sent.Approval.State != "held" || len(sent.Approval.Items) != 1 || sent.Approval.Items[0].BindingCode != commit.BindingCode {
		t.Fatalf("the sender's status: %d %s, want held with code %s", code, raw, commit.BindingCode)
	}
	// A newer acceptance in the same thread supersedes it.
	second := accept("2026-12-03T11:00:00Z")
	newer := lee.approval(t, second.EnvelopeID)
	if old := lee.approvalItem(t, commit.ID); old.State != "superseded" || old.SupersededBy != newer.ID {
		t.Fatalf("the first acceptance after the second: %+v", old)
	}
	if status, code, it := lee.decide(t, commit.ID, "approve_once", commit.PayloadDigest); status != http.StatusConflict || it.State != "superseded" {
		t.Fatalf("deciding a superseded item: %d %s %+v", status, code, it)
	}
	if status, code, _ := lee.decide(t, newer.ID, "approve_once", commit.PayloadDigest); status != http.StatusConflict || code != "approval_changed" {
		t.Fatalf("deciding with the superseded payload's digest: %d %s", status, code)
	}
	status, code, decided := lee.decide(t, newer.ID, "approve_always", newer.PayloadDigest)
	if status != http.StatusOK || decided.State != "approved_always" {
		t.Fatalf("approve always: %d %s %+v", status, code, decided)
	}
	testkit.Eventually(t, 15*time.Second, func() error {
		if it := restItem(t, addr, muse, second.EnvelopeID); it.Body["start"] != "2026-12-03T11:00:00Z" {
			return fmt.Errorf("muse's item %+v", it.Body)
		}
		return nil
	}, "the approved commitment at muse")
	var third policyAnswer
	testkit.Eventually(t, 15*time.Second, func() error {
		if third = accept("2026-12-04T09:00:00Z"); third.Outcome != "deliver" {
			time.Sleep(300 * time.Millisecond) // within the agent's rate limit
			return fmt.Errorf("the next acceptance: %s", third.Outcome)
		}
		return nil
	}, "the standing rule covering the next acceptance")
	var rules struct {
		Rules []struct {
			ID, Type, Counterparty, Action string
			Revoked                        bool
		} `json:"rules"`
	}
	if status, raw := lee.do(t, http.MethodGet, "/v1/approvals/rules", nil); status != http.StatusOK || json.Unmarshal(raw, &rules) != nil ||
		len(rules.Rules) != 1 || rules.Rules[0].Type != "meeting.accept/v1" || rules.Rules[0].Counterparty != "ana@"+splitTenant || rules.Rules[0].Action != "meeting" {
		t.Fatalf("standing rules: %d %s", status, raw)
	}
	if status, raw := lee.do(t, http.MethodPost, "/v1/approvals/rules/"+rules.Rules[0].ID+"/revoke", nil); status != http.StatusOK {
		t.Fatalf("revoke: %d %s", status, raw)
	}
	testkit.Eventually(t, 15*time.Second, func() error {
		if a := accept("2026-12-05T09:00:00Z"); a.Outcome != "hold" {
			time.Sleep(300 * time.Millisecond)
			return fmt.Errorf("after the revocation: %s", a.Outcome)
		}
		return nil
	}, "a revoked rule covering nothing")

	// 3. Strangers: sam's request denied, zed's left to expire.
	sam := signIn(t, addr, splitTenant, "sam").pat(t, "alp.send", "alp.read")
	samReq := sendTyped(t, addr, sam, "lee@"+splitTenant, "connection.request/v1", `{"purpose":"introduction"}`)
	samItem := lee.approval(t, samReq.EnvelopeID)
	if samItem.Kind != "connection_request" || !slices.Equal(samItem.Offers, []string{"approve_once", "deny"}) {
		t.Fatalf("sam's request: %+v", samItem)
	}
	if status, code, it := lee.decide(t, samItem.ID, "deny", samItem.PayloadDigest); status != http.StatusOK || it.State != "denied" {
		t.Fatalf("deny: %d %s %+v", status, code, it)
	}
	testkit.Eventually(t, 10*time.Second, func() error {
		status, raw := lee.do(t, http.MethodGet, "/v1/connections", nil)
		if status != http.StatusOK || !strings.Contains(string(raw), `"declined"`) {
			return fmt.Errorf("%d %s", status, raw)
		}
		return nil
	}, "sam's request declined")
	zed := signIn(t, addr, splitTenant, "zed").pat(t, "alp.send", "alp.read")
	zedItem := lee.approval(t, sendTyped(t, addr, zed, "lee@"+splitTenant, "connection.request/v1", `{"purpose":"introduction"}`).EnvelopeID)
	testkit.Eventually(t, 20*time.Second, func() error {
		if it := lee.approvalItem(t, zedItem.ID); it.State != "expired" {
			return fmt.Errorf("zed's request is %s", it.State)
		}
		return nil
	}, "zed's request expired")
	if status, _, it := lee.decide(t, zedItem.ID, "approve_once", zedItem.PayloadDigest); status != http.StatusConflict || it.State != "expired" {
		t.Fatalf("deciding an expired item: %d %+v", status, it)
	}

	// 4. The organization's admin (ana) pre-approves meetings among its
	// people (after the strangers: it connects everyone of the tenant): the
	// next acceptance is delivered without asking lee.
	rels, _ := json.Marshal(map[string]any{"rules": []map[string]any{{"kind": "same_org", "commits": []string{"meeting"}}}})
	if status, raw := d.ana.do(t, http.MethodPut, "/v1/admin/relationships", rels); status != http.StatusOK {
		t.Fatalf("pre-approving: %d %s", status, raw)
	}
	testkit.Eventually(t, 15*time.Second, func() error {
		a := accept("2026-12-06T09:00:00Z")
		if a.Outcome != "deliver" {
			time.Sleep(300 * time.Millisecond)
			return fmt.Errorf("under the org's pre-approval: %s", a.Outcome)
		}
		return nil
	}, "the org's pre-approved commitment delivered")

	// 5. Lee's ledger holds the requests, the decisions and the rule.
	leeReader := lee.pat(t, "alp.read")
	testkit.Eventually(t, 15*time.Second, func() error {
		leaves, err := ledgerLeaves(t, addr, leeReader)
		if err != nil {
			return err
		}
		kinds := map[string]int{}
		for _, l := range leaves {
			kinds[l.Kind]++
		}
		if kinds["approval.requested"] < 6 || kinds["approval.decision"] < 6 || kinds["rule.created"] != 1 || kinds["rule.revoked"] != 1 {
			return fmt.Errorf("lee's ledger kinds %v", kinds)
		}
		return nil
	}, "lee's ledger")
}
