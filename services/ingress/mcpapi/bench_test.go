package mcpapi_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/alpd-project/alpd/broker"
	"github.com/alpd-project/alpd/services/ingress"
)

// BenchmarkMCPSend is one agent's send_message through an open MCP
// session over loopback HTTP (the official Go SDK's client): the bearer
// check, the scope check, the SDK's JSON-RPC and schema validation, the
// door (rate limits, the body's type, sealing, the SendRequested append)
// and waiting for policy's decision. Compare with BenchmarkMCPLoopbackEcho
// run in the same invocation:
//
//	go test -run '^$' -bench 'MCPSend|MCPLoopbackEcho' ./services/ingress/mcpapi/
func BenchmarkMCPSend(b *testing.B) {
	unlimited := ingress.Rate{Limit: 1e9, Burst: 1 << 30}
	r := newRigWith(b, broker.Config{Door: ingress.DoorConfig{PerAgent: unlimited, PerPerson: unlimited, PerTenant: unlimited}}, nil)
	cs := r.connect(b, r.token, nil)
	args := map[string]any{"to": "bo@other.example", "type": "meeting.request/v1",
		"body": map[string]any{"subject": "Planning", "start": "2026-12-03T10:00:00Z", "duration": "PT30M", "attendees": []string{"bo@other.example"}}}
	ctx := context.Background()
	for b.Loop() {
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "send_message", Arguments: args})
		if err != nil || res.IsError {
			b.Fatalf("send: %v %+v", err, res)
		}
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "req/s")
}

// BenchmarkMCPLoopbackEcho is the floor: a bare loopback HTTP round trip
// of a JSON-RPC tools/call of the same size.
func BenchmarkMCPLoopbackEcho(b *testing.B) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.Copy(w, r.Body)
	}))
	defer srv.Close()
	body := `{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"send_message","arguments":{"to":"bo@other.example","type":"meeting.request/v1","body":{"subject":"Planning","start":"2026-12-03T10:00:00Z","duration":"PT30M","attendees":["bo@other.example"]}}}}`
	client := &http.Client{}
	for b.Loop() {
		resp, err := client.Post(srv.URL+"/mcp", "application/json", strings.NewReader(body))
		if err != nil {
			b.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "req/s")
}
