package federation_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/alpd-project/alpd/internal/testkit"
	"github.com/alpd-project/alpd/test/internal/alpdtest"
)

// TestConnectionAcceptedAcrossBrokers: ana@a.example asks lee@b.example
// to connect; lee approves the request once on her approvals page (its
// JSON API, with her fresh web session), on her own broker.
// Her broker tells ana's (connection.accept/v1, answering the request),
// whose policy records the two as connected: ana's next typed message
// leaves her own broker and is delivered, with no request back.
func TestConnectionAcceptedAcrossBrokers(t *testing.T) {
	h := New(t, BrokerSpec{Name: "broker.a.example", Domains: []string{"a.example"}, Users: []string{"ana"}},
		BrokerSpec{Name: "broker.b.example", Domains: []string{"b.example"}, Users: []string{"lee"}})
	a, b := h.Broker("broker.a.example"), h.Broker("broker.b.example")
	anaTok, _ := a.PAT(t, "a.example", "ana", "desk", "alp.send", "alp.read")
	leeTok, lee := b.PAT(t, "b.example", "lee", "muse", "alp.send", "alp.read")
	lee.OptInFreeText(t)

	req := h.send(t, a, anaTok, "lee@b.example", "connection.request/v1", map[string]any{"purpose": "meeting"})
	h.waitDelivery(t, a, anaTok, req, "held")
	approveRequest(t, lee, req)

	// Until a.example has the notice, ana's note is refused on her own
	// side (stranger); then it goes through.
	var id string
	testkit.Eventually(t, 60*time.Second, func() error {
		id = h.send(t, a, anaTok, "lee@b.example", "note/v1", map[string]any{"text": "Thanks for connecting"})
		_, err := h.tryDelivery(t, a, anaTok, id, "delivered")
		return err
	}, "ana's note is delivered once lee accepted")
	h.waitItem(t, b, leeTok, id)
}

// approveRequest has the person approve, once, the approval item of the
// connection request envelope.
func approveRequest(t testing.TB, s *alpdtest.Session, envelope string) {
	t.Helper()
	var item struct {
		ID            string `json:"id"`
		Kind          string `json:"kind"`
		EnvelopeID    string `json:"envelope_id"`
		PayloadDigest string `json:"payload_digest"`
		Verification  string `json:"verification"`
	}
	testkit.Eventually(t, 30*time.Second, func() error {
		status, raw := s.Do(t, http.MethodGet, "/v1/approvals", nil)
		var list struct {
			Items []json.RawMessage `json:"items"`
		}
		if status != http.StatusOK || json.Unmarshal(raw, &list) != nil {
			return fmt.Errorf("GET /v1/approvals: %d %s", status, raw)
		}
		for _, r := range list.Items {
			if json.Unmarshal(r, &item) == nil && item.EnvelopeID == envelope {
				return nil
			}
		}
		return fmt.Errorf("no approval item for %s yet", envelope)
	}, "the connection request on the approvals page")
	if item.Kind != "connection_request" || item.Verification != "signed by a.example's home broker (broker.a.example)" {
		t.Fatalf("the item: %+v", item)
	}
	body, _ := json.Marshal(map[string]string{"decision": "approve_once", "payload_digest": item.PayloadDigest})
	if status, raw := s.Do(t, http.MethodPost, "/v1/approvals/items/"+item.ID+"/decision", body); status != http.StatusOK {
		t.Fatalf("approving: %d %s", status, raw)
	}
}

// tryDelivery waits up to 15s for the envelope's delivery state to be
// want, and says what it was instead: a refusal (by either side) or a
// failure ends the wait at once.
func (h *Harness) tryDelivery(t testing.TB, b *Broker, token, id, want string) (delivery, error) {
	t.Helper()
	var d delivery
	deadline := time.Now().Add(15 * time.Second)
	for {
		status, raw := h.agentDo(t, b, http.MethodGet, "/v1/agent/messages/"+id, token, nil)
		var out struct {
			Outcome  string    `json:"outcome"`
			Delivery *delivery `json:"delivery"`
		}
		if status == http.StatusOK && json.Unmarshal(raw, &out) == nil && out.Outcome == "refuse" {
			return d, fmt.Errorf("%s refused on the sender's side: %s", id, raw)
		}
		if status == http.StatusOK && json.Unmarshal(raw, &out) == nil && out.Delivery != nil {
			d = *out.Delivery
			if d.State == want {
				return d, nil
			}
			if d.State == "refused" || d.State == "failed" {
				return d, fmt.Errorf("delivery of %s: %+v, want %s", id, d, want)
			}
		}
		if time.Now().After(deadline) {
			return d, fmt.Errorf("delivery of %s: %+v (%d %s), want %s", id, d, status, raw, want)
		}
		time.Sleep(200 * time.Millisecond)
	}
}
