package federation_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/alpd-project/alpd/internal/bus"
	"github.com/alpd-project/alpd/internal/testkit"
	"github.com/alpd-project/alpd/test/internal/alpdtest"
)

// agentDo sends an agent's REST request with its bearer token.
func (h *Harness) agentDo(t testing.TB, b *Broker, method, path, token string, body any) (int, []byte) {
	t.Helper()
	var r io.Reader
	if body != nil {
		raw, _ := json.Marshal(body)
		r = bytes.NewReader(raw)
	}
	req, _ := http.NewRequest(method, b.URL+path, r)
	req.Header.Set("Authorization", "Bearer "+token)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := h.AgentClient().Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, raw
}

// send posts a message as the agent and returns the envelope id.
func (h *Harness) send(t testing.TB, b *Broker, token, to, typ string, body any) string {
	t.Helper()
	// An agent over its door's rate waits as Retry-After says, as a
	// client does.
	status, raw := h.agentDo(t, b, http.MethodPost, "/v1/agent/messages", token, map[string]any{"to": to, "type": typ, "body": body})
	for deadline := time.Now().Add(15 * time.Second); status == http.StatusTooManyRequests && time.Now().Before(deadline); {
		time.Sleep(time.Second)
		status, raw = h.agentDo(t, b, http.MethodPost, "/v1/agent/messages", token, map[string]any{"to": to, "type": typ, "body": body})
	}
	var out struct {
		ID string `json:"envelope_id"`
	}
	if status/100 != 2 || json.Unmarshal(raw, &out) != nil || out.ID == "" {
		t.Fatalf("send %s to %s: %d %s", typ, to, status, raw)
	}
	return out.ID
}

// delivery is an envelope's delivery status as the sender's agent reads it.
type delivery struct {
	State    string   `json:"state"`
	Code     string   `json:"code"`
	Withheld []string `json:"withheld"`
	Held     []string `json:"held"`
}

// waitDelivery waits until the envelope's delivery state is want.
func (h *Harness) waitDelivery(t testing.TB, b *Broker, token, id, want string) delivery {
	t.Helper()
	var d delivery
	testkit.Eventually(t, 30*time.Second, func() error {
		status, raw := h.agentDo(t, b, http.MethodGet, "/v1/agent/messages/"+id, token, nil)
		var out struct {
			Delivery *delivery `json:"delivery"`
		}
		if status != http.StatusOK || json.Unmarshal(raw, &out) != nil || out.Delivery == nil {
			return fmt.Errorf("GET message %s: %d %s", id, status, raw)
		}
		d = *out.Delivery
		if d.State != want {
			return fmt.Errorf("delivery %+v, want %s", d, want)
		}
		return nil
	}, "delivery "+want)
	return d
}

// acceptPending accepts the person's pending connection request from
// address and returns it.
func acceptPending(t testing.TB, s *alpdtest.Session, from string) {
	t.Helper()
	var id string
	testkit.Eventually(t, 30*time.Second, func() error {
		status, raw := s.Do(t, http.MethodGet, "/v1/connections", nil)
		var out struct {
			Pending []struct {
				ID   string `json:"id"`
				From struct {
					Address string `json:"address"`
				} `json:"from"`
			} `json:"pending"`
		}
		if status != http.StatusOK || json.Unmarshal(raw, &out) != nil {
			return fmt.Errorf("GET /v1/connections: %d %s", status, raw)
		}
		for _, p := range out.Pending {
			if strings.EqualFold(p.From.Address, from) {
				id = p.ID
				return nil
			}
		}
		return fmt.Errorf("no pending request from %s in %s", from, raw)
	}, "a pending connection request")
	if status, raw := s.Do(t, http.MethodPost, "/v1/connections/"+id+"/accept", nil); status != http.StatusOK {
		t.Fatalf("accept %s: %d %s", id, status, raw)
	}
}

// inboxItem is an item as REST hands it to an agent.
type inboxItem struct {
	ID     string `json:"id"`
	Type   string `json:"type"`
	Sender struct {
		Text       string `json:"text"`
		Address    string `json:"address"`
		VerifiedBy string `json:"verified_by"`
	} `json:"sender"`
	Body map[string]any `json:"body"`
}

// waitItem waits for the envelope in the agent's inbox.
func (h *Harness) waitItem(t testing.TB, b *Broker, token, id string) inboxItem {
	t.Helper()
	var it inboxItem
	testkit.Eventually(t, 30*time.Second, func() error {
		status, raw := h.agentDo(t, b, http.MethodGet, "/v1/agent/inbox/"+id, token, nil)
		if status != http.StatusOK {
			return fmt.Errorf("GET inbox item %s: %d %s", id, status, raw)
		}
		return json.Unmarshal(raw, &it)
	}, "the item in the inbox")
	return it
}

// connect makes ana@a.example and lee@b.example connected on both brokers:
// ana asks, lee accepts on her own broker, and lee's broker tells ana's.
func connect(t *testing.T, h *Harness, a *Broker, anaTok string, ana, lee *alpdtest.Session) {
	t.Helper()
	req := h.send(t, a, anaTok, "lee@b.example", "connection.request/v1", map[string]any{"purpose": "meeting"})
	h.waitDelivery(t, a, anaTok, req, "held")
	acceptPending(t, lee, "ana@a.example")
	// lee's broker tells ana's (connection.accept/v1): ana's side records
	// the connection without a request back.
	testkit.Eventually(t, 60*time.Second, func() error {
		status, raw := ana.Do(t, http.MethodGet, "/v1/connections", nil)
		var out struct {
			Connections []struct {
				From struct {
					Address string `json:"address"`
				} `json:"from"`
				State string `json:"state"`
			} `json:"connections"`
		}
		if status != http.StatusOK || json.Unmarshal(raw, &out) != nil {
			return fmt.Errorf("GET /v1/connections: %d %s", status, raw)
		}
		for _, c := range out.Connections {
			if strings.EqualFold(c.From.Address, "lee@b.example") && c.State == "accepted" {
				return nil
			}
		}
		return fmt.Errorf("ana's side does not have lee's acceptance yet: %s", raw)
	}, "ana's broker told of lee's acceptance")
}

// TestAcrossTwoOrgs: ana@a.example and lee@b.example, each on their own
// broker, connect (a stranger's request crosses, held for the person),
// then ana's agent writes to lee's: the message arrives under the line
// "signed by a.example's home broker", and the sender's agent reads the
// delivery status from the receiver's signed receipt.
func TestAcrossTwoOrgs(t *testing.T) {
	h := New(t, BrokerSpec{Name: "broker.a.example", Domains: []string{"a.example"}, Users: []string{"ana"}},
		BrokerSpec{Name: "broker.b.example", Domains: []string{"b.example"}, Users: []string{"lee"}})
	a, b := h.Broker("broker.a.example"), h.Broker("broker.b.example")
	anaTok, ana := a.PAT(t, "a.example", "ana", "desk", "alp.send", "alp.read")
	leeTok, lee := b.PAT(t, "b.example", "lee", "muse", "alp.send", "alp.read")

	connect(t, h, a, anaTok, ana, lee)

	// lee's rules keep free text from his agents: the recipient side
	// refuses the note, and ana's agent learns it from b.example's receipt.
	refused := h.send(t, a, anaTok, "lee@b.example", "note/v1", map[string]any{"text": "Lunch on Friday?"})
	if d := h.waitDelivery(t, a, anaTok, refused, "refused"); len(d.Withheld) != 1 || d.Withheld[0] != "/text" {
		t.Errorf("refused note's status %+v, want /text withheld", d)
	}
	lee.OptInFreeText(t)
	id := h.send(t, a, anaTok, "lee@b.example", "note/v1", map[string]any{"text": "Lunch on Friday?"})
	h.waitDelivery(t, a, anaTok, id, "delivered")
	it := h.waitItem(t, b, leeTok, id)
	if want := "from ana@a.example, signed by a.example's home broker"; it.Sender.Text != want {
		t.Errorf("sender line %q, want %q", it.Sender.Text, want)
	}

	// Confidential figures never leave a.example: its sender side stops
	// them (its organization keeps confidential fields in), and no byte of
	// b.example's streams holds them; lee's agent gets the rest.
	const pipeline, arr = "450000.00", "1200000.00"
	briefing := map[string]any{"as_of": "2026-11-30T10:00:00Z", "summary": "Renewal likely.",
		"pipeline": map[string]any{"currency": "EUR", "value": pipeline},
		"figures":  []any{map[string]any{"label": "ARR", "amount": map[string]any{"currency": "EUR", "value": arr}}}}
	status, raw := h.agentDo(t, a, http.MethodPost, "/v1/agent/messages", anaTok,
		map[string]any{"to": "lee@b.example", "type": "briefing.reply/v1", "body": briefing})
	var sent struct {
		ID      string `json:"envelope_id"`
		Outcome string `json:"outcome"`
		Fields  []struct {
			Pointer string `json:"pointer"`
			Action  string `json:"action"`
		} `json:"fields"`
	}
	if status/100 != 2 || json.Unmarshal(raw, &sent) != nil || sent.Outcome != "deliver_partial" {
		t.Fatalf("briefing: %d %s; want the confidential fields withheld on a.example's side", status, raw)
	}
	h.waitDelivery(t, a, anaTok, sent.ID, "delivered")
	got := h.waitItem(t, b, leeTok, sent.ID)
	// The summary is free text: it arrives inside the untrusted markers.
	if summary, _ := got.Body["summary"].(string); got.Body["pipeline"] != nil || got.Body["figures"] != nil ||
		!strings.Contains(summary, ">Renewal likely.<") {
		t.Errorf("lee's briefing %v; want the summary without the figures", got.Body)
	}
	// lee's ledger keeps a.example's broker's signature of the envelope.
	testkit.Eventually(t, 20*time.Second, func() error {
		status, raw := h.agentDo(t, b, http.MethodGet, "/v1/ledger/entries?limit=1000", leeTok, nil)
		var page struct {
			Entries []struct {
				Leaf string `json:"leaf"`
			} `json:"entries"`
		}
		if status != http.StatusOK || json.Unmarshal(raw, &page) != nil {
			return fmt.Errorf("lee's ledger: %d %s", status, raw)
		}
		for _, e := range page.Entries {
			var leaf struct {
				Kind            string `json:"kind"`
				EnvelopeID      string `json:"envelope_id"`
				OriginSignature string `json:"origin_signature"`
				WireDigest      string `json:"wire_sha256"`
			}
			if json.Unmarshal([]byte(e.Leaf), &leaf) == nil && leaf.Kind == "envelope.received" && leaf.EnvelopeID == id {
				if !strings.HasPrefix(leaf.OriginSignature, "broker.a.example ed25519:") || leaf.WireDigest == "" {
					return fmt.Errorf("lee's envelope.received: %s; want a.example's broker's signature", e.Leaf)
				}
				return nil
			}
		}
		return fmt.Errorf("no envelope.received of %s in lee's ledger", id)
	}, "lee's ledger keeps the sender's signature")
	for _, stream := range []string{"INBOUND", "DELIVER", "INBOX", "LEDGER", "SEND", "DECIDED"} {
		for _, m := range b.StreamMessages(t, stream) {
			if bytes.Contains(m.Data, []byte(pipeline)) || bytes.Contains(m.Data, []byte(arr)) {
				t.Errorf("b.example's %s stream holds a confidential figure: %s", stream, m.Subject)
			}
		}
	}
}

// refusals are the InboundRefused codes a broker recorded for a domain.
func refusals(t testing.TB, b *Broker) []string {
	t.Helper()
	var codes []string
	for _, m := range b.StreamMessages(t, "INBOUND") {
		if !strings.Contains(m.Subject, ".refused.") {
			continue
		}
		ev, err := bus.Decode(m.Data)
		if err != nil {
			t.Fatal(err)
		}
		codes = append(codes, ev.GetInboundRefused().GetCode())
	}
	return codes
}

// TestRogueBroker: a broker with valid keys of its own, hosting a.example
// without being its home broker, sends as ana@a.example to lee@b.example.
// b.example discovers that a.example's home broker is another broker and
// refuses, recording why; nothing reaches lee. a.example's own broker
// still gets through.
func TestRogueBroker(t *testing.T) {
	h := New(t, BrokerSpec{Name: "broker.a.example", Domains: []string{"a.example"}, Users: []string{"ana"}},
		BrokerSpec{Name: "broker.b.example", Domains: []string{"b.example"}, Users: []string{"lee"}},
		BrokerSpec{Name: "broker.rogue.example", Domains: []string{"rogue.example"}, Claims: []string{"a.example"}, Users: []string{"ana"}})
	a, b, rogue := h.Broker("broker.a.example"), h.Broker("broker.b.example"), h.Broker("broker.rogue.example")
	fake, _ := rogue.PAT(t, "a.example", "ana", "desk", "alp.send", "alp.read")
	real, _ := a.PAT(t, "a.example", "ana", "desk", "alp.send", "alp.read")
	b.SignIn(t, "b.example", "lee") // lee exists on b.example from his first sign-in

	id := h.send(t, rogue, fake, "lee@b.example", "connection.request/v1", map[string]any{"purpose": "sales"})
	d := h.waitDelivery(t, rogue, fake, id, "failed")
	if d.Code != "signer_not_home_broker" {
		t.Errorf("the rogue's delivery failed with %q, want signer_not_home_broker", d.Code)
	}
	if codes := refusals(t, b); !slices.Contains(codes, "signer_not_home_broker") {
		t.Errorf("b.example recorded refusals %v, want signer_not_home_broker", codes)
	}
	for _, m := range b.StreamMessages(t, "INBOUND") {
		if strings.Contains(m.Subject, ".verified.") {
			t.Errorf("b.example accepted an envelope: %s", m.Subject)
		}
	}
	ok := h.send(t, a, real, "lee@b.example", "connection.request/v1", map[string]any{"purpose": "meeting"})
	h.waitDelivery(t, a, real, ok, "held")
}
