package e2e

import (
	"encoding/json"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/alpd-project/alpd/broker"
	"github.com/alpd-project/alpd/internal/config"
)

// operatorToken runs `alpctl operator-token NAME` and returns the token it
// shows and the ops.operators entry it prints for the broker's
// configuration, read as the YAML an operator pastes (unknown keys
// rejected, as alpd does).
func operatorToken(t *testing.T, b bins, name string) (token string, op config.Operator) {
	t.Helper()
	res := runTool(t, b.alpctl, hermeticEnv(), "operator-token", name)
	if res.code != 0 {
		t.Fatalf("alpctl operator-token %s: exit code %d, want 0", name, res.code)
	}
	head, snippet, ok := strings.Cut(res.stdout, "broker configuration:\n")
	if !ok {
		t.Fatalf("alpctl operator-token printed no \"broker configuration:\" section:\n%s", res.stdout)
	}
	for line := range strings.SplitSeq(head, "\n") {
		if l := strings.TrimSpace(line); strings.HasPrefix(l, broker.OperatorTokenPrefix) {
			token = l
		}
	}
	if token == "" {
		t.Fatalf("alpctl operator-token printed no %s… token:\n%s", broker.OperatorTokenPrefix, res.stdout)
	}
	var cfg config.Config
	dec := yaml.NewDecoder(strings.NewReader(snippet))
	dec.KnownFields(true)
	if err := dec.Decode(&cfg); err != nil {
		t.Fatalf("alpctl operator-token: the configuration it prints is not alpd YAML: %v\n%s", err, snippet)
	}
	if len(cfg.Ops.Operators) != 1 || cfg.Ops.Operators[0].Name != name {
		t.Fatalf("alpctl operator-token %s: ops.operators = %+v, want one operator %q", name, cfg.Ops.Operators, name)
	}
	op = cfg.Ops.Operators[0]
	if want := broker.HashOperatorToken(token); op.TokenSHA256 != want {
		t.Fatalf("alpctl operator-token: token_sha256 %s is not the SHA-256 of the token (%s)", op.TokenSHA256, want)
	}
	return token, op
}

// traceHop is one entry of `alpctl trace --json`, decoded on its own (not
// with broker.Hop) so that a renamed field fails here. Pointers tell a
// missing number from a zero one.
type traceHop struct {
	Service     string  `json:"service"`
	Action      string  `json:"action"`
	DurationUS  *uint64 `json:"duration_us"`
	Trust       *int    `json:"trust"`
	Lag         *uint64 `json:"lag"`
	Ready       bool    `json:"ready"`
	Via         string  `json:"via"`
	Error       string  `json:"error"`
	RoundTripUS *uint64 `json:"round_trip_us"`
}

// traceOrder is the order in which a trace (and a message) meets the
// services.
var traceOrder = []string{"ingress", "policy", "federation", "ledger", "approvals", "identity"}

// alpctlTrace runs `alpctl --broker http://httpAddr trace --json` with the
// extra trace arguments and, when it printed one, decodes the trace.
func alpctlTrace(t *testing.T, b bins, httpAddr string, args ...string) (toolResult, []traceHop) {
	t.Helper()
	res := runTool(t, b.alpctl, hermeticEnv(),
		append([]string{"--broker", "http://" + httpAddr, "trace", "--json"}, args...)...)
	if res.code != 0 && res.code != 1 {
		return res, nil
	}
	var out struct {
		Trace []traceHop `json:"trace"`
	}
	if err := json.Unmarshal([]byte(res.stdout), &out); err != nil {
		t.Fatalf("alpctl trace --json (exit code %d): stdout is not a trace: %v\n%s", res.code, err, res.stdout)
	}
	return res, out.Trace
}

// checkTrace requires a successful `alpctl trace --json`: exit code 0 and
// six hops in traceOrder, each ready, without error, over via (any
// transport when via is ""), the first at trust 3 (trusted) and trust never
// rising from hop to hop.
func checkTrace(t *testing.T, res toolResult, hops []traceHop, via string) {
	t.Helper()
	if res.code != 0 {
		t.Errorf("alpctl trace: exit code %d, want 0 (every hop ready)", res.code)
	}
	var got []string
	for _, h := range hops {
		got = append(got, h.Service)
	}
	if strings.Join(got, ",") != strings.Join(traceOrder, ",") {
		t.Fatalf("trace services = %q, want %q", got, traceOrder)
	}
	for i, h := range hops {
		if !h.Ready || h.Error != "" || h.Action == "" {
			t.Errorf("hop %d (%s): ready %v, action %q, error %q; want ready, an action, no error", i+1, h.Service, h.Ready, h.Action, h.Error)
		}
		if h.Trust == nil || h.DurationUS == nil || h.Lag == nil || h.RoundTripUS == nil {
			t.Errorf("hop %d (%s) lacks trust, duration_us, lag or round_trip_us: %+v", i+1, h.Service, h)
			continue
		}
		switch {
		case via != "" && h.Via != via:
			t.Errorf("hop %d (%s) went via %q, want %q", i+1, h.Service, h.Via, via)
		case via == "" && h.Via != broker.ViaGRPC && h.Via != broker.ViaBus:
			t.Errorf("hop %d (%s) went via %q, want grpc or bus", i+1, h.Service, h.Via)
		}
		if i == 0 && *h.Trust != 3 {
			t.Errorf("first hop (%s) has trust %d, want 3 (trusted)", h.Service, *h.Trust)
		}
		if i > 0 && hops[i-1].Trust != nil && *h.Trust > *hops[i-1].Trust {
			t.Errorf("trust rose at hop %d (%s): %d -> %d", i+1, h.Service, *hops[i-1].Trust, *h.Trust)
		}
	}
}
