package mcpapi_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/alpd-project/alpd/broker"
	"github.com/alpd-project/alpd/internal/brokertest"
	"github.com/alpd-project/alpd/services/ingress/mcpapi"
)

const (
	tenant    = "example.org"
	publicURL = "https://broker.example"
)

// rig is a running broker with ana, whose agent holds a token with both
// scopes.
type rig struct {
	br    *brokertest.Rig
	agent brokertest.Agent
	token string
	url   string
}

func newRig(t testing.TB, cfg mcpapi.Config) *rig {
	t.Helper()
	return newRigWith(t, broker.Config{MCP: cfg}, nil)
}

// newRigWith is the rig on a broker of cfg (its tenant and URL set here).
func newRigWith(t testing.TB, cfg broker.Config, log *slog.Logger) *rig {
	t.Helper()
	cfg.Tenants, cfg.PublicURL = []string{tenant}, publicURL
	br := brokertest.StartLogged(t, cfg, log)
	a := br.Agent(t, tenant, "sub-ana", "ana@example.org", "agent-1", "alp.send", "alp.read")
	return &rig{br: br, agent: a, token: a.Token, url: br.Srv.URL + mcpapi.Path}
}

// mint is a token for another agent of ana's (or of the person of a).
func (r *rig) mint(t testing.TB, a brokertest.Agent, agent string, scopes ...string) string {
	t.Helper()
	a.AgentID = agent
	return r.br.Mint(t, a, "consumer", scopes...)
}

// bearer adds a token to every request of an MCP client.
type bearer struct {
	token string
	base  http.RoundTripper
}

func (b *bearer) RoundTrip(req *http.Request) (*http.Response, error) {
	req = req.Clone(req.Context())
	req.Header.Set("Authorization", "Bearer "+b.token)
	return b.base.RoundTrip(req)
}

// connect opens an MCP session with the official Go SDK's client.
func (r *rig) connect(t testing.TB, token string, opts *mcp.ClientOptions) *mcp.ClientSession {
	t.Helper()
	c := mcp.NewClient(&mcp.Implementation{Name: "rig", Version: "1"}, opts)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cs, err := c.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: r.url,
		HTTPClient: &http.Client{Transport: &bearer{token: token, base: http.DefaultTransport}}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cs.Close() })
	return cs
}

// call calls a tool and decodes its structured output into out; it
// returns the result.
func call(t testing.TB, cs *mcp.ClientSession, tool string, args any, out any) *mcp.CallToolResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: tool, Arguments: args})
	if err != nil {
		t.Fatalf("%s: %v", tool, err)
	}
	if out != nil && !res.IsError {
		raw, _ := json.Marshal(res.StructuredContent)
		if err := json.Unmarshal(raw, out); err != nil {
			t.Fatalf("%s: structured content %s: %v", tool, raw, err)
		}
	}
	return res
}

// toolErr is a tool error's problem; it fails the test when res is not
// an error.
type toolErr struct {
	Status     int             `json:"status"`
	Code       string          `json:"code"`
	Message    string          `json:"message"`
	Pointer    string          `json:"pointer"`
	RetryAfter int             `json:"retry_after"`
	Problems   json.RawMessage `json:"problems"`
}

func errorOf(t testing.TB, res *mcp.CallToolResult) toolErr {
	t.Helper()
	if !res.IsError || len(res.Content) != 1 {
		t.Fatalf("want a tool error, got %+v", res)
	}
	text := res.Content[0].(*mcp.TextContent).Text
	var p struct {
		Error toolErr `json:"error"`
	}
	if err := json.Unmarshal([]byte(text), &p); err != nil || p.Error.Code == "" {
		t.Fatalf("tool error text %q is not a problem: %v", text, err)
	}
	if res.StructuredContent != nil {
		t.Fatalf("a tool error carries structured content: %v", res.StructuredContent)
	}
	return p.Error
}

// rawPost posts one JSON-RPC message to /mcp as a bare HTTP client does.
func (r *rig) rawPost(t testing.TB, token, body string, header ...string) (*http.Response, []byte) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, r.url, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	for i := 0; i+1 < len(header); i += 2 {
		if header[i] == "Host" {
			req.Host = header[i+1]
			continue
		}
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, b
}

const initialize = `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}`

// problem decodes problem details.
func problem(t testing.TB, body []byte) (code string) {
	t.Helper()
	var p struct {
		Code string `json:"code"`
	}
	if err := json.NewDecoder(bytes.NewReader(body)).Decode(&p); err != nil {
		t.Fatalf("not problem details: %s", body)
	}
	return p.Code
}

func errorf(format string, args ...any) error { return fmt.Errorf(format, args...) }
