package broker_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/time/rate"

	"github.com/alpd-project/alpd/broker"
	alpv1 "github.com/alpd-project/alpd/gen/alp/v1"
	"github.com/alpd-project/alpd/internal/bus"
	"github.com/alpd-project/alpd/internal/httpjson"
	"github.com/alpd-project/alpd/internal/keystore"
	"github.com/alpd-project/alpd/internal/natstest"
	"github.com/alpd-project/alpd/internal/streams"
	"github.com/alpd-project/alpd/internal/testkit"
)

var order = []string{"ingress", "policy", "federation", "ledger", "approvals", "identity"}

func checkTrace(t *testing.T, hops []broker.Hop, via string) {
	t.Helper()
	if len(hops) != len(order) {
		t.Fatalf("%d hops: %+v", len(hops), hops)
	}
	prev := 3
	for i, h := range hops {
		if h.Service != order[i] || !h.Ready || h.Error != "" || h.Via != via {
			t.Errorf("hop %d: %+v", i, h)
		}
		if h.Trust > prev {
			t.Errorf("trust rose at %s: %d > %d", h.Service, h.Trust, prev)
		}
		prev = h.Trust
	}
	if hops[0].Trust != 3 {
		t.Errorf("ingress did not set trust: %+v", hops[0])
	}
}

func TestTraceBothTransports(t *testing.T) {
	s := natstest.RunJetStream(t)
	r := start(t, natstest.Connect(t, s), nil, "alpd", "example.org")
	for _, via := range []string{broker.ViaGRPC, broker.ViaBus} {
		hops, err := r.b.Trace(context.Background(), via)
		if err != nil {
			t.Fatal(err)
		}
		checkTrace(t, hops, via)
	}
	// Probes are never stored: no stream gained a message.
	for _, name := range []string{"ALPD_SEND", "ALPD_DECIDED", "ALPD_LEDGER", "ALPD_LEDGER_WORK"} {
		if n := streamMsgs(t, r.b.Bus().JetStream(), name); n != 0 {
			t.Errorf("%s holds %d messages after traces", name, n)
		}
	}
	if _, err := r.b.Trace(context.Background(), "carrier-pigeon"); err == nil {
		t.Fatal("unknown transport accepted")
	}
}

// TestTraceReportsUnreachableService runs a broker with only some services:
// the others are reported unreachable, and the trace still covers all six.
func TestTraceReportsUnreachableService(t *testing.T) {
	s := natstest.RunJetStream(t)
	nc := natstest.Connect(t, s)
	// Federation and approvals run elsewhere and have made their streams,
	// which policy and ingress read (federation's inbound log, approvals'
	// decisions).
	fb, err := bus.New(nc, bus.Options{Namespace: "alpd", Registerer: prometheus.NewRegistry()})
	if err != nil {
		t.Fatal(err)
	}
	for _, role := range []alpv1.Role{alpv1.Role_ROLE_FEDERATION, alpv1.Role_ROLE_APPROVALS} {
		for _, spec := range streams.Owned(role, []string{"example.org"}, streams.Limits{}) {
			if _, err := fb.EnsureStream(context.Background(), spec); err != nil {
				t.Fatal(err)
			}
		}
	}
	b, err := broker.New(broker.Config{Name: "alpd", Tenants: []string{"example.org"}, Services: []string{"identity", "ingress", "policy"}},
		broker.Deps{NATS: nc, KeyStore: keystore.NewMemory()})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { _ = b.Run(ctx) }()
	<-b.Started()
	// (Ingress files policy's deliverables: it is ready once policy has
	// made their stream.)
	testkit.Eventually(t, 20*time.Second, b.Ready, "the three services ready")
	hops, err := b.Trace(ctx, broker.ViaAuto)
	if err != nil {
		t.Fatal(err)
	}
	if len(hops) != 6 || !hops[0].Ready || !hops[1].Ready || hops[2].Action != "unreachable" || hops[2].Error == "" || hops[5].Service != "identity" || !hops[5].Ready {
		t.Fatalf("%+v", hops)
	}
}

func TestTraceEndpointAuthAndRateLimit(t *testing.T) {
	s := natstest.RunJetStream(t)
	token, hash := broker.NewOperatorToken()
	b, err := broker.New(broker.Config{Name: "alpd", Tenants: []string{"example.org"},
		Operators: []broker.Operator{{Name: "ops-1", TokenSHA256: hash}},
		OpsLimits: broker.OpsLimits{Rate: rate.Every(time.Hour), Burst: 2}},
		broker.Deps{NATS: natstest.Connect(t, s), KeyStore: keystore.NewMemory()})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { _ = b.Run(ctx) }()
	<-b.Started()
	testkit.Eventually(t, 10*time.Second, b.Ready)
	srv := httptest.NewServer(b.Handler())
	defer srv.Close()

	call := func(auth, query string) (*http.Response, []byte) {
		req, _ := http.NewRequest(http.MethodPost, srv.URL+"/v1/ops/trace"+query, nil)
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var buf [1 << 16]byte
		n, _ := resp.Body.Read(buf[:])
		return resp, buf[:n]
	}
	for _, auth := range []string{"", "Bearer wrong", "Bearer alpop_wrong", "Basic " + token} {
		resp, body := call(auth, "")
		var e httpjson.Problem
		if resp.StatusCode != http.StatusUnauthorized || resp.Header.Get("WWW-Authenticate") == "" ||
			json.Unmarshal(body, &e) != nil || e.Error.Code != "unauthorized" {
			t.Errorf("auth %q: %d %s", auth, resp.StatusCode, body)
		}
	}
	resp, body := call("Bearer "+token, "?via=telepathy")
	if resp.StatusCode != http.StatusBadRequest {
		t.Errorf("bad via: %d %s", resp.StatusCode, body)
	}
	resp, body = call("Bearer "+token, "?via=bus")
	var res broker.TraceResult
	if resp.StatusCode != http.StatusOK || json.Unmarshal(body, &res) != nil || !res.Ready {
		t.Fatalf("trace: %d %s", resp.StatusCode, body)
	}
	checkTrace(t, res.Trace, broker.ViaBus)
	// The burst (2) is spent: the third call is rate limited.
	resp, body = call("Bearer "+token, "")
	if resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Retry-After") == "" {
		t.Fatalf("over the limit: %d %s", resp.StatusCode, body)
	}
}

func TestOperatorConfigValidated(t *testing.T) {
	s := natstest.RunJetStream(t)
	_, err := broker.New(broker.Config{Name: "alpd", Tenants: []string{"example.org"},
		Operators: []broker.Operator{{Name: "x", TokenSHA256: "nothex"}}},
		broker.Deps{NATS: natstest.Connect(t, s), KeyStore: keystore.NewMemory()})
	if err == nil {
		t.Fatal("bad operator hash accepted")
	}
}
