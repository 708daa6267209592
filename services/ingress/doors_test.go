package ingress_test

import (
	"encoding/json"
	"io"
	"net/http"
	"testing"

	"github.com/alpd-project/alpd/broker"
	"github.com/alpd-project/alpd/internal/brokertest"
	"github.com/alpd-project/alpd/services/ingress"
	"github.com/alpd-project/alpd/services/ingress/restapi"
)

// TestBudgetSharedAcrossDoors: the rate limits are the broker's, not a
// binding's. An agent that spends its burst on NLIP has nothing left on
// REST (and the other way round): every door admits through the one
// ingress.Door.
func TestBudgetSharedAcrossDoors(t *testing.T) {
	burst2 := ingress.Rate{Limit: 0.001, Burst: 2}
	br := brokertest.Start(t, broker.Config{Tenants: []string{home}, Door: ingress.DoorConfig{PerAgent: burst2}})
	a := br.Agent(t, home, "sub-ana", "ana@example.org", "agent-ana", "alp.send", "alp.read")
	get := func(path string) (int, string) {
		t.Helper()
		req, err := http.NewRequest(http.MethodGet, br.Srv.URL+path, nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer "+a.Token)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		data, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(data)
	}
	// One request on each door: the burst of two is spent.
	if status, body := get("/nlip/inbox"); status != http.StatusOK {
		t.Fatalf("NLIP inbox: %d %s", status, body)
	}
	if status, body := get(restapi.PathInbox); status != http.StatusOK {
		t.Fatalf("REST inbox: %d %s", status, body)
	}
	for _, path := range []string{restapi.PathInbox, "/nlip/inbox"} {
		status, body := get(path)
		if status != http.StatusTooManyRequests {
			t.Fatalf("a third request at %s: %d %s, want 429 (the budget is one per agent, not one per door)", path, status, body)
		}
		if path == restapi.PathInbox {
			var p struct{ Code string }
			if err := json.Unmarshal([]byte(body), &p); err != nil || p.Code != "rate_limited" {
				t.Errorf("REST's 429: %s", body)
			}
		}
	}
}
