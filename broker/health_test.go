package broker_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"golang.org/x/time/rate"

	"github.com/alpd-project/alpd/broker"
	"github.com/alpd-project/alpd/internal/brokertest"
	"github.com/alpd-project/alpd/internal/httpjson"
	"github.com/alpd-project/alpd/internal/testkit"
)

// get fetches url with an optional Authorization header.
func get(t *testing.T, url, auth string) (*http.Response, []byte) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, body
}

// TestHealthzFailsWhileNATSClosed (issue 10 finding 1): once the client
// has closed the NATS connection for good (here as the 4000-byte id did:
// a protocol line nats-server refuses), /healthz answers 503 with a code,
// so a liveness probe restarts the process. It used to stay 200 while
// nothing worked.
func TestHealthzFailsWhileNATSClosed(t *testing.T) {
	r := brokertest.Start(t, broker.Config{Tenants: []string{"example.org"}})
	if resp, body := get(t, r.Srv.URL+"/healthz", ""); resp.StatusCode != http.StatusOK {
		t.Fatalf("/healthz of a running broker: %d %s", resp.StatusCode, body)
	}

	// Straight on the connection, past the bus's checks.
	if err := r.NC.Publish("alp."+strings.Repeat("a", 5000), nil); err != nil {
		t.Fatal(err)
	}
	_ = r.NC.Flush()
	testkit.Eventually(t, 10*time.Second, func() error {
		if !r.NC.IsClosed() {
			return fmt.Errorf("connection %s", r.NC.Status())
		}
		return nil
	}, "the server closes the connection")

	resp, body := get(t, r.Srv.URL+"/healthz", "")
	var e httpjson.Problem
	if resp.StatusCode != http.StatusServiceUnavailable || json.Unmarshal(body, &e) != nil || e.Error.Code != "nats_closed" {
		t.Fatalf("/healthz with the NATS connection closed: %d %s; want 503 nats_closed", resp.StatusCode, body)
	}
	if !strings.Contains(e.Error.Message, "closed") || !strings.Contains(e.Error.Message, "maximum control line") {
		t.Errorf("/healthz message %q: want it to say the connection is closed and why", e.Error.Message)
	}
	if resp, body := get(t, r.Srv.URL+"/readyz", ""); resp.StatusCode != http.StatusServiceUnavailable {
		t.Errorf("/readyz with the NATS connection closed: %d %s; want 503", resp.StatusCode, body)
	}
}

// TestVerboseReadyzIsForOperators (issue 10 finding 12): plain /readyz
// stays open for probes and says no more than ready or not; the verbose
// form (services, errors, lag, streams) needs an operator token, and is
// not counted against the operator's trace rate.
func TestVerboseReadyzIsForOperators(t *testing.T) {
	token, hash := broker.NewOperatorToken()
	r := brokertest.Start(t, broker.Config{Tenants: []string{"example.org"},
		Operators: []broker.Operator{{Name: "ops-1", TokenSHA256: hash}},
		OpsLimits: broker.OpsLimits{Rate: rate.Every(time.Hour), Burst: 1}})

	resp, body := get(t, r.Srv.URL+"/readyz", "")
	var plain map[string]any
	if resp.StatusCode != http.StatusOK || json.Unmarshal(body, &plain) != nil || plain["ready"] != true {
		t.Fatalf("plain /readyz: %d %s; want 200 ready", resp.StatusCode, body)
	}
	if _, ok := plain["services"]; ok {
		t.Errorf("plain /readyz lists services: %s", body)
	}
	if _, ok := plain["streams"]; ok {
		t.Errorf("plain /readyz lists streams: %s", body)
	}

	for _, auth := range []string{"", "Bearer alpop_not-configured", "Bearer " + strings.TrimPrefix(token, broker.OperatorTokenPrefix), "Basic " + token} {
		resp, body := get(t, r.Srv.URL+"/readyz?verbose=1", auth)
		var e httpjson.Problem
		if resp.StatusCode != http.StatusUnauthorized || json.Unmarshal(body, &e) != nil || e.Error.Code != "unauthorized" ||
			!strings.Contains(e.Error.Message, "operator") || resp.Header.Get("WWW-Authenticate") == "" {
			t.Errorf("verbose /readyz with Authorization %q: %d %s; want 401 unauthorized naming the operator token", auth, resp.StatusCode, body)
		}
		if strings.Contains(string(body), "ALPD_") || strings.Contains(string(body), `"services"`) {
			t.Errorf("refused verbose /readyz shows detail: %s", body)
		}
	}

	// Twice: the burst of one trace is not what limits it.
	for i := range 2 {
		resp, body := get(t, r.Srv.URL+"/readyz?verbose=1", "Bearer "+token)
		var v broker.Readiness
		if resp.StatusCode != http.StatusOK || json.Unmarshal(body, &v) != nil || !v.Ready || len(v.Services) != 6 || len(v.Streams) == 0 {
			t.Fatalf("verbose /readyz %d with the operator's token: %d %s; want 200 with six services and the streams", i+1, resp.StatusCode, body)
		}
	}
}
