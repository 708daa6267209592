package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/alpd-project/alpd/broker"
	"github.com/alpd-project/alpd/internal/keystore"
	"github.com/alpd-project/alpd/internal/natstest"
)

func runBroker(t *testing.T, ops ...broker.Operator) string {
	t.Helper()
	s := natstest.RunJetStream(t)
	b, err := broker.New(broker.Config{Name: "alpd", Tenants: []string{"example.org"}, Operators: ops},
		broker.Deps{NATS: natstest.Connect(t, s), KeyStore: keystore.NewMemory()})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = b.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	<-b.Started()
	deadline := time.Now().Add(10 * time.Second)
	for b.Ready() != nil {
		if time.Now().After(deadline) {
			t.Fatal(b.Ready())
		}
		time.Sleep(20 * time.Millisecond)
	}
	srv := httptest.NewServer(b.Handler())
	t.Cleanup(srv.Close)
	return srv.URL
}

func alpctl(args ...string) (int, string, string) {
	var out, errOut bytes.Buffer
	code := run(args, &out, &errOut)
	return code, out.String(), errOut.String()
}

func TestStatusAndTrace(t *testing.T) {
	token, hash := broker.NewOperatorToken()
	url := runBroker(t, broker.Operator{Name: "ops", TokenSHA256: hash})

	// Without a token: the plain /readyz, and a hint where the rest is.
	code, out, errOut := alpctl("--broker", url, "status")
	if code != 0 || !strings.Contains(out, "READY") || strings.Contains(out, "ALPD_LEDGER") || !strings.Contains(errOut, "--operator-token") {
		t.Fatalf("status without a token: %d\n%s%s", code, out, errOut)
	}
	// An operator sees the services and streams (the verbose /readyz).
	code, out, errOut = alpctl("--broker", url, "status", "--operator-token", token)
	if code != 0 || !strings.Contains(out, "READY") || !strings.Contains(out, "ALPD_LEDGER") || !strings.Contains(out, "ingress") {
		t.Fatalf("status with the operator token: %d\n%s%s", code, out, errOut)
	}
	t.Setenv("ALPCTL_OPERATOR_TOKEN", token)
	code, out, errOut = alpctl("--broker", url, "status", "--json")
	var r broker.Readiness
	if code != 0 || json.Unmarshal([]byte(out), &r) != nil || len(r.Services) != 6 {
		t.Fatalf("status --json with the token from the environment: %d\n%s%s", code, out, errOut)
	}
	code, _, errOut = alpctl("--broker", url, "status", "--operator-token", broker.OperatorTokenPrefix+"not-configured")
	if code != 3 || !strings.Contains(errOut, "401") || !strings.Contains(errOut, "unauthorized") {
		t.Fatalf("status with a wrong token: %d %s; want exit 3, 401 unauthorized", code, errOut)
	}
	t.Setenv("ALPCTL_OPERATOR_TOKEN", "")
	if code, _, errOut := alpctl("--broker", url, "trace"); code != 3 || !strings.Contains(errOut, "unauthorized") {
		t.Fatalf("trace without token: %d %s", code, errOut)
	}
	code, out, errOut = alpctl("--broker", url, "trace", "--json", "--operator-token", token)
	if code != 0 {
		t.Fatalf("trace: %d %s", code, errOut)
	}
	var res struct {
		Trace []map[string]any `json:"trace"`
	}
	if err := json.Unmarshal([]byte(out), &res); err != nil || len(res.Trace) != 6 {
		t.Fatalf("trace json: %v %s", err, out)
	}
	for _, key := range []string{"service", "action", "duration_us", "trust", "lag"} {
		if _, ok := res.Trace[0][key]; !ok {
			t.Errorf("trace entry lacks %q: %v", key, res.Trace[0])
		}
	}
	code, out, _ = alpctl("--broker", url, "trace", "--via", "bus", "--operator-token", token)
	if code != 0 || !strings.Contains(out, "identity") {
		t.Fatalf("trace table: %d %s", code, out)
	}
}

func TestUsageErrors(t *testing.T) {
	cases := [][]string{
		{},
		{"frobnicate"},
		{"--broker", "ftp://x", "status"},
		{"operator-token"},
	}
	for _, args := range cases {
		if code, _, _ := alpctl(args...); code != 2 {
			t.Errorf("%v: exit %d, want 2", args, code)
		}
	}
	if code, _, errOut := alpctl("--broker", "http://127.0.0.1:1", "--timeout", "1s", "status"); code != 1 || !strings.Contains(errOut, "unreachable") {
		t.Errorf("unreachable broker: %d %s", code, errOut)
	}
	code, out, _ := alpctl("operator-token", "ana")
	if code != 0 || !strings.Contains(out, broker.OperatorTokenPrefix) || !strings.Contains(out, "token_sha256") {
		t.Errorf("operator-token: %d %s", code, out)
	}
}
