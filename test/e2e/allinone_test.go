package e2e

import (
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestAllInOne runs `alpd` with no service: all six services in one process
// on the embedded NATS. It checks readiness (every service ready and
// answering a Ping through the in-process gRPC), the streams, /healthz,
// /metrics, `alpctl status` and an operator's `alpctl trace`, and a clean
// SIGTERM shutdown; then restarts on the same data directory and checks
// the keys are reused, not generated again.
func TestAllInOne(t *testing.T) {
	b := binaries(t)
	alpd := b.alpd
	dataDir := t.TempDir()
	env := hermeticEnv("ALPD_TENANTS=example.org")

	// An operator, configured by the hash alpctl prints.
	token, op := operatorToken(t, b, "e2e-operator")
	configFile := filepath.Join(t.TempDir(), "alpd.yaml")
	writeYAML(t, configFile, map[string]any{
		"ops": map[string]any{"operators": []map[string]string{{"name": op.Name, "token_sha256": op.TokenSHA256}}},
	})

	// First run: a fresh data directory.
	addr := freeAddr(t)
	p := startProc(t, "alpd (first run)", alpd, env, "--config", configFile, "--data-dir", dataDir, "--http-addr", addr)
	took := waitReady(t, p, addr)
	t.Logf("first run ready in %s", took.Round(time.Millisecond))
	checkAllInOne(t, addr, token)
	if res := runTool(t, b.alpctl, hermeticEnv("ALPCTL_OPERATOR_TOKEN="+token), "--broker", "http://"+addr, "status"); res.code != 0 {
		t.Errorf("alpctl status: exit code %d, want 0 (ready)", res.code)
	} else if !strings.Contains(res.stdout, "READY") || !strings.Contains(res.stdout, "ALPD_LEDGER") {
		t.Errorf("alpctl status with the operator token printed no READY or no streams:\n%s", res.stdout)
	}
	// Without a token: readiness only (the verbose /readyz is refused).
	if res := runTool(t, b.alpctl, hermeticEnv(), "--broker", "http://"+addr, "status"); res.code != 0 || !strings.Contains(res.stdout, "READY") || strings.Contains(res.stdout, "ALPD_") {
		t.Errorf("alpctl status without a token: exit code %d, want 0 and only the readiness:\n%s", res.code, res.stdout)
	}
	if status, body, err := get("http://" + addr + "/readyz?verbose=1"); err != nil || status != http.StatusUnauthorized || !strings.Contains(string(body), `"unauthorized"`) {
		t.Errorf("GET /readyz?verbose=1 without a token: %d %s %v; want 401 unauthorized", status, body, err)
	}
	res, hops := alpctlTrace(t, b, addr, "--operator-token", token)
	checkTrace(t, res, hops, "")
	var vias []string
	for _, h := range hops {
		vias = append(vias, h.Service+" via "+h.Via)
	}
	t.Logf("alpctl trace: %s", strings.Join(vias, ", "))
	if msgs := p.logMessages(); !slices.Contains(msgs, "key generated") {
		t.Errorf("first run on an empty data dir logged no \"key generated\"; messages: %q", msgs)
	}
	took = p.stop(t)
	t.Logf("first run stopped in %s", took.Round(time.Millisecond))
	if msgs := p.logMessages(); !slices.Contains(msgs, "alpd stopped") {
		t.Errorf("first run: log has no \"alpd stopped\"; messages: %q", msgs)
	}
	if t.Failed() {
		return
	}

	// Second run: same data directory; keys and streams are reused.
	addr = freeAddr(t)
	p = startProc(t, "alpd (second run)", alpd, env, "--config", configFile, "--data-dir", dataDir, "--http-addr", addr)
	took = waitReady(t, p, addr)
	t.Logf("second run ready in %s", took.Round(time.Millisecond))
	checkAllInOne(t, addr, token)
	took = p.stop(t)
	t.Logf("second run stopped in %s", took.Round(time.Millisecond))
	if out := p.output.String(); strings.Contains(out, "key generated") {
		t.Errorf("second run on the same data dir generated keys again")
	}
	if msgs := p.logMessages(); !slices.Contains(msgs, "alpd stopped") {
		t.Errorf("second run: log has no \"alpd stopped\"; messages: %q", msgs)
	}
}

// checkAllInOne checks /readyz?verbose=1 (as the operator with token),
// /healthz and /metrics of an all-in-one alpd at addr.
func checkAllInOne(t *testing.T, addr, token string) {
	t.Helper()
	status, r := readiness(t, addr, token)
	if status != http.StatusOK || !r.Ready {
		t.Errorf("/readyz?verbose=1: status %d, ready %v, error %q; want 200 and ready", status, r.Ready, r.Error)
	}
	want := []string{"ingress", "identity", "policy", "federation", "ledger", "approvals"}
	var got []string
	for _, s := range r.Services {
		got = append(got, s.Name)
		if !s.Ready || s.GRPC != "ok" || s.Error != "" {
			t.Errorf("/readyz service %s: ready %v, grpc %q, error %q; want ready, grpc \"ok\", no error", s.Name, s.Ready, s.GRPC, s.Error)
		}
		if s.Lag == nil {
			t.Errorf("/readyz service %s has no lag", s.Name)
		}
	}
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("/readyz services = %q, want %q", got, want)
	}

	streams := map[string]int{}
	for i, s := range r.Streams {
		streams[s.Name] = i
	}
	for _, name := range []string{"ALPD_SEND", "ALPD_LEDGER_WORK", "ALPD_LEDGER"} {
		if _, ok := streams[name]; !ok {
			t.Errorf("/readyz streams lack %s; have %v", name, streams)
		}
	}
	if i, ok := streams["ALPD_LEDGER_WORK"]; ok {
		if s := r.Streams[i]; s.Retention != "WorkQueue" || s.Owner != "ledger" {
			t.Errorf("ALPD_LEDGER_WORK: retention %q, owner %q; want WorkQueue, ledger", s.Retention, s.Owner)
		}
	}
	if i, ok := streams["ALPD_LEDGER"]; ok {
		if s := r.Streams[i]; !s.AppendOnly || s.Owner != "ledger" {
			t.Errorf("ALPD_LEDGER: append_only %v, owner %q; want true, ledger", s.AppendOnly, s.Owner)
		}
	}
	if i, ok := streams["ALPD_SEND"]; ok {
		if s := r.Streams[i]; s.AppendOnly || s.Owner != "ingress" {
			t.Errorf("ALPD_SEND: append_only %v, owner %q; want false, ingress", s.AppendOnly, s.Owner)
		}
	}

	status, body, err := get("http://" + addr + "/healthz")
	if err != nil || status != http.StatusOK {
		t.Errorf("GET /healthz: %d %s %v; want 200", status, body, err)
	}
	status, body, err = get("http://" + addr + "/metrics")
	switch {
	case err != nil || status != http.StatusOK:
		t.Errorf("GET /metrics: %d %v; want 200", status, err)
	case !strings.Contains(string(body), "alpd_bus_"):
		t.Errorf("GET /metrics has no alpd_bus_ metric:\n%s", body)
	}
}
