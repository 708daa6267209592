package mcpapi_test

import (
	"context"
	"encoding/json"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/alpd-project/alpd/internal/testkit"
	"github.com/alpd-project/alpd/services/ingress/mcpapi"
)

// TestToolsHaveSchemas: every tool lists an input and an output schema
// (objects, closed to unknown arguments) and a description; the server
// sends the instructions.
func TestToolsHaveSchemas(t *testing.T) {
	r := newRig(t, mcpapi.Config{})
	cs := r.connect(t, r.token, nil)
	if got := cs.InitializeResult().Instructions; got != mcpapi.Instructions {
		t.Fatalf("instructions: %q", got)
	}
	res, err := cs.ListTools(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, tool := range res.Tools {
		names = append(names, tool.Name)
		in, _ := json.Marshal(tool.InputSchema)
		out, _ := json.Marshal(tool.OutputSchema)
		if tool.Description == "" || !strings.Contains(string(in), `"type":"object"`) || !strings.Contains(string(in), `"additionalProperties":false`) ||
			!strings.Contains(string(out), `"type":"object"`) {
			t.Errorf("tool %s: description %q, input %s, output %s", tool.Name, tool.Description, in, out)
		}
	}
	for _, want := range []string{"send_message", "envelope_status", "list_message_types", "get_message_type",
		"list_connections", "request_connection", "ledger_head"} {
		if !slices.Contains(names, want) {
			t.Errorf("tool %s missing from %v", want, names)
		}
	}
}

// TestInstructionsAreDocumented: docs/agents.md quotes the instructions
// word for word.
func TestInstructionsAreDocumented(t *testing.T) {
	doc, err := os.ReadFile("../../../docs/agents.md")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(doc), mcpapi.Instructions) {
		t.Fatal("docs/agents.md does not quote mcpapi.Instructions word for word")
	}
}

type sendOut struct {
	EnvelopeID string `json:"envelope_id"`
	Outcome    string `json:"outcome"`
	Decided    bool   `json:"decided"`
	Duplicate  bool   `json:"duplicate"`
	Reasons    []struct {
		Code string `json:"code"`
	} `json:"reasons"`
	Fields []struct {
		Pointer, Action string
	} `json:"fields"`
}

// TestSendTypedMessage: send_message goes through the door and answers
// policy's decision (a stranger is refused); a retry with the same
// idempotency key is the same envelope; envelope_status finds it.
func TestSendTypedMessage(t *testing.T) {
	r := newRig(t, mcpapi.Config{})
	cs := r.connect(t, r.token, nil)
	args := map[string]any{"to": "acct:bo@other.example", "type": "meeting.request/v1", "idempotency_key": "k1",
		"body": map[string]any{"subject": "Planning", "start": "2026-12-03T10:00:00Z", "duration": "PT30M", "attendees": []string{"bo@other.example"}}}
	var out sendOut
	if res := call(t, cs, "send_message", args, &out); res.IsError {
		t.Fatalf("send: %+v", res.Content[0])
	}
	if out.EnvelopeID == "" || out.Outcome != "refuse" || !out.Decided || len(out.Reasons) == 0 {
		t.Fatalf("send to a stranger: %+v", out)
	}
	var again sendOut
	call(t, cs, "send_message", args, &again)
	if again.EnvelopeID != out.EnvelopeID || !again.Duplicate {
		t.Fatalf("retry: %+v, first %+v", again, out)
	}
	var st sendOut
	call(t, cs, "envelope_status", map[string]any{"envelope_id": out.EnvelopeID}, &st)
	if st.EnvelopeID != out.EnvelopeID || st.Outcome != "refuse" {
		t.Fatalf("status: %+v", st)
	}
}

// TestBadInput: an unknown type, a body its schema refuses (each failure
// with its pointer), a bad recipient, an unknown envelope and arguments
// the input schema refuses are tool errors with stable codes; nothing is
// sent.
func TestBadInput(t *testing.T) {
	r := newRig(t, mcpapi.Config{})
	cs := r.connect(t, r.token, nil)
	body := map[string]any{"subject": "Planning"}
	e := errorOf(t, call(t, cs, "send_message", map[string]any{"to": "bo@other.example", "type": "nope/v1", "body": body}, nil))
	if e.Code != "unknown_message_type" || e.Status != 422 || e.Pointer != "/type" {
		t.Errorf("unknown type: %+v", e)
	}
	e = errorOf(t, call(t, cs, "send_message", map[string]any{"to": "bo@other.example", "type": "meeting.request/v1", "body": body}, nil))
	if e.Code != "invalid_body" || e.Status != 422 || e.Pointer != "/body" || !strings.Contains(string(e.Problems), `"pointer"`) {
		t.Errorf("invalid body: %+v %s", e, e.Problems)
	}
	e = errorOf(t, call(t, cs, "send_message", map[string]any{"to": "bo", "type": "note/v1", "body": map[string]any{"text": "hi"}}, nil))
	if e.Code != "invalid_argument" || e.Pointer != "/to" {
		t.Errorf("bad recipient: %+v", e)
	}
	e = errorOf(t, call(t, cs, "envelope_status", map[string]any{"envelope_id": "00000000-0000-4000-8000-000000000000"}, nil))
	if e.Code != "unknown_envelope" || e.Status != 404 {
		t.Errorf("unknown envelope: %+v", e)
	}
	e = errorOf(t, call(t, cs, "envelope_status", map[string]any{"envelope_id": "x"}, nil))
	if e.Code != "invalid_envelope_id" {
		t.Errorf("bad envelope id: %+v", e)
	}
	ctx := context.Background()
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "send_message", Arguments: map[string]any{"to": "bo@other.example", "type": "note/v1", "body": "text", "extra": 1}})
	if err != nil || !res.IsError {
		t.Errorf("arguments against the input schema: %v %+v", err, res)
	}
}

// TestMessageTypes: the types are listed (built-ins), one type's schema
// comes as a tool result and as a resource, and an unknown one is a clear
// error.
func TestMessageTypes(t *testing.T) {
	r := newRig(t, mcpapi.Config{})
	cs := r.connect(t, r.token, nil)
	var list struct {
		Types []struct {
			Name, Resource string
			Builtin        bool
			Commits        []string
		}
	}
	call(t, cs, "list_message_types", map[string]any{}, &list)
	var meeting bool
	for _, ty := range list.Types {
		if ty.Name == "meeting.accept/v1" && ty.Builtin && ty.Resource == "alp://types/meeting.accept/v1" && slices.Contains(ty.Commits, "meeting") {
			meeting = true
		}
	}
	if !meeting {
		t.Fatalf("types: %+v", list)
	}
	var one struct {
		Name   string
		Schema map[string]any
	}
	call(t, cs, "get_message_type", map[string]any{"name": "note/v1"}, &one)
	if one.Name != "note/v1" || one.Schema["title"] != "note/v1" {
		t.Fatalf("get type: %+v", one)
	}
	if e := errorOf(t, call(t, cs, "get_message_type", map[string]any{"name": "nope/v1"}, nil)); e.Code != "unknown_message_type" || e.Status != 404 {
		t.Fatalf("unknown type: %+v", e)
	}
	rr, err := cs.ReadResource(context.Background(), &mcp.ReadResourceParams{URI: "alp://types/note/v1"})
	if err != nil || len(rr.Contents) != 1 || !strings.Contains(rr.Contents[0].Text, `"title":"note/v1"`) {
		t.Fatalf("type resource: %v %+v", err, rr)
	}
	if _, err := cs.ReadResource(context.Background(), &mcp.ReadResourceParams{URI: "alp://types/nope/v1"}); err == nil {
		t.Fatal("an unknown type's resource was read")
	}
}

// TestConnections: request_connection sends connection.request/v1 through
// the door (held for the other person), and list_connections shows it.
func TestConnections(t *testing.T) {
	r := newRig(t, mcpapi.Config{})
	r.br.Agent(t, tenant, "sub-lee", "lee@example.org", "lee-agent", "alp.read")
	cs := r.connect(t, r.token, nil)
	var list struct {
		Connections []struct{ With, State, Direction string }
	}
	call(t, cs, "list_connections", map[string]any{}, &list)
	if len(list.Connections) != 0 {
		t.Fatalf("connections before any: %+v", list)
	}
	var out sendOut
	if res := call(t, cs, "request_connection", map[string]any{"to": "lee@example.org", "purpose": "meeting", "message": "about the plan"}, &out); res.IsError {
		t.Fatalf("request: %+v", res.Content[0])
	}
	if out.Outcome != "hold" {
		t.Fatalf("connection request: %+v", out)
	}
	testkit.Eventually(t, 10*time.Second, func() error {
		call(t, cs, "list_connections", map[string]any{}, &list)
		if len(list.Connections) != 1 || list.Connections[0].With != "lee@example.org" || list.Connections[0].State != "requested" ||
			list.Connections[0].Direction != "outgoing" {
			return errorf("connections: %+v", list)
		}
		return nil
	})
}

// TestLedgerHead: ledger_head reads the person's ledger through the
// ledger's gRPC API with the agent's own credential.
func TestLedgerHead(t *testing.T) {
	r := newRig(t, mcpapi.Config{})
	cs := r.connect(t, r.token, nil)
	call(t, cs, "request_connection", map[string]any{"to": "bo@other.example", "purpose": "other"}, nil)
	var head struct {
		Origin     string
		Size       uint64
		Root       string
		Checkpoint struct {
			Note string
			Size uint64
		}
		Keys []struct{ KeyID string } `json:"public_keys"`
	}
	testkit.Eventually(t, 15*time.Second, func() error {
		res := call(t, cs, "ledger_head", map[string]any{}, &head)
		if res.IsError {
			return errorf("ledger head: %v", res.Content[0].(*mcp.TextContent).Text)
		}
		if head.Size == 0 || head.Checkpoint.Size == 0 || !strings.Contains(head.Checkpoint.Note, head.Origin) || len(head.Keys) == 0 {
			return errorf("head: %+v", head)
		}
		return nil
	})
	// Without alp.read the ledger is not read: 403 before the SDK.
	readless := r.mint(t, r.agent, "agent-1", "alp.send")
	resp, body := r.rawPost(t, readless, `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"ledger_head","arguments":{}}}`)
	if resp.StatusCode != 403 || problem(t, body) != "insufficient_scope" ||
		!strings.Contains(resp.Header.Get("WWW-Authenticate"), `scope="alp.read alp.send"`) {
		t.Fatalf("ledger_head without alp.read: %d %q %s", resp.StatusCode, resp.Header.Get("WWW-Authenticate"), body)
	}
}
