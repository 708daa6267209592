package mcpapi

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"time"

	"github.com/google/jsonschema-go/jsonschema"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	alpv1 "github.com/alpd-project/alpd/gen/alp/v1"
	"github.com/alpd-project/alpd/internal/alp"
	"github.com/alpd-project/alpd/internal/msgtypes"
	"github.com/alpd-project/alpd/services/ingress"
)

// jsonObject is a JSON object passed through as written (a message body,
// a type's schema); its schema is {"type": "object"}.
type jsonObject json.RawMessage

// MarshalJSON implements json.Marshaler.
func (o jsonObject) MarshalJSON() ([]byte, error) {
	if len(o) == 0 {
		return []byte("{}"), nil
	}
	return o, nil
}

// UnmarshalJSON implements json.Unmarshaler.
func (o *jsonObject) UnmarshalJSON(b []byte) error {
	*o = append((*o)[:0], b...)
	return nil
}

var schemaOptions = &jsonschema.ForOptions{TypeSchemas: map[reflect.Type]*jsonschema.Schema{
	reflect.TypeFor[jsonObject](): {Type: "object"},
}}

// toolDef is one tool: its name, the scopes a call needs (checked before
// the SDK sees the call, so the client can step up), and how it is added
// to a session's server.
type toolDef struct {
	name   string
	scopes []string
	add    func(*mcp.Server)
}

// The scopes tools need, as the other doors ask them: reading the inbox
// and acknowledging takes alp.read, sending alp.send, and a reply both
// (it reads the item it answers: ingress.Service.ReplyTo).
var (
	needSend        = []string{alp.ScopeSend}
	needRead        = []string{alp.ScopeRead}
	needSendAndRead = []string{alp.ScopeSend, alp.ScopeRead}
)

// call is one admitted tool call.
type call struct {
	snd ingress.Sender
	// authorization is the request's Authorization header, for the one
	// peer that checks the agent's credential itself (the ledger).
	authorization string
	req           *mcp.CallToolRequest
}

// texter is an output with a text for the model besides its structured
// form (an inbox item rendered with its sender line and markers).
type texter interface{ text() string }

// defineTool declares a tool with input and output schemas inferred from
// In and Out (descriptions from their jsonschema tags). Every call is
// admitted by the door first (credential, rate limits); a failure of the
// handler is a tool error (toolError).
func defineTool[In, Out any](a *API, name string, scopes []string, ann mcp.ToolAnnotations, desc string,
	h func(ctx context.Context, c call, in In) (Out, error)) toolDef {
	in, err := jsonschema.For[In](schemaOptions)
	if err != nil {
		panic(fmt.Sprintf("mcpapi: input schema of %s: %v", name, err))
	}
	out, err := jsonschema.For[Out](schemaOptions)
	if err != nil {
		panic(fmt.Sprintf("mcpapi: output schema of %s: %v", name, err))
	}
	tool := &mcp.Tool{Name: name, Title: ann.Title, Description: desc, Annotations: &ann, InputSchema: in, OutputSchema: out}
	handler := func(ctx context.Context, req *mcp.CallToolRequest, args In) (*mcp.CallToolResult, any, error) {
		authz := authorization(req.Extra)
		snd, err := a.door.Admit(ctx, authz)
		if err != nil {
			return a.toolError(name, err), nil, nil
		}
		o, err := h(ctx, call{snd: snd, authorization: authz, req: req}, args)
		if err != nil {
			return a.toolError(name, err), nil, nil
		}
		res := &mcp.CallToolResult{}
		if t, ok := any(o).(texter); ok {
			res.Content = []mcp.Content{&mcp.TextContent{Text: t.text()}}
		}
		return res, o, nil
	}
	return toolDef{name: name, scopes: scopes, add: func(s *mcp.Server) { mcp.AddTool(s, tool, handler) }}
}

// authorization is the Authorization header of the HTTP request that
// carried an MCP request: every tool call and resource read is admitted
// by the door with it.
func authorization(extra *mcp.RequestExtra) string {
	if extra == nil {
		return ""
	}
	return extra.Header.Get("Authorization")
}

func ptr[T any](v T) *T { return &v }

var (
	readOnly = func(title string) mcp.ToolAnnotations {
		return mcp.ToolAnnotations{Title: title, ReadOnlyHint: true, OpenWorldHint: ptr(false)}
	}
	sends = func(title string) mcp.ToolAnnotations {
		return mcp.ToolAnnotations{Title: title, DestructiveHint: ptr(false), OpenWorldHint: ptr(true)}
	}
)

// toolDefs are every tool of the door.
func (a *API) toolDefs() []toolDef {
	tools := []toolDef{
		defineTool(a, "send_message", needSend, sends("Send a typed message"),
			"Send a typed ALP message for your person. The body must match the message type's JSON Schema: get it with "+
				"get_message_type (or read the resource alp://types/<type>). Policy decides what reaches the recipient; "+
				"the answer says deliver, deliver_partial, hold, refuse or pending, with every field's verdict. "+
				"Pass an idempotency_key to retry safely: the same key and message is the same envelope.",
			a.sendMessage),
		defineTool(a, "envelope_status", needSend, readOnly("Status of a sent message"),
			"What policy decided about a message your person sent (for a send that answered pending).",
			a.envelopeStatus),
		defineTool(a, "list_message_types", nil, readOnly("List message types"),
			"The message types you can send: the built-in ones and those your organization registered, with what "+
				"each is for and what it commits the recipient to.",
			a.listTypes),
		defineTool(a, "get_message_type", nil, readOnly("Get a message type's schema"),
			"One message type's JSON Schema (2020-12): the body send_message expects. x-alp-class says each field's "+
				"class (public, internal, confidential), x-alp-freetext marks free text.",
			a.getType),
		defineTool(a, "list_connections", needRead, readOnly("List connections"),
			"Your person's connections and connection requests: who, in which state (requested, connected, declined, "+
				"blocked) and who asked.",
			a.listConnections),
		defineTool(a, "request_connection", needSend, sends("Request a connection"),
			"Ask someone your person is not connected to for a connection (a connection.request/v1 message). It waits "+
				"for the other person's decision; messages to a stranger are refused until they accept.",
			a.requestConnection),
		defineTool(a, "ledger_head", needRead, readOnly("Read the ledger head"),
			"Where your person's tamper-evident ledger (a Merkle log of every message and decision) stands: its size, "+
				"root and latest signed checkpoint, and the keys that verify it.",
			a.ledgerHead),
	}
	return append(tools, a.inboxToolDefs()...)
}

// Send.

type sendIn struct {
	To   string     `json:"to" jsonschema:"the recipient's address, person@domain (or acct:person@domain)"`
	Type string     `json:"type" jsonschema:"the message type, e.g. meeting.request/v1 (see list_message_types)"`
	Body jsonObject `json:"body" jsonschema:"the typed body: a JSON object valid against the type's schema (get_message_type)"`
	// InReplyTo threads the message (reply does it for an inbox item).
	InReplyTo      string `json:"in_reply_to,omitempty" jsonschema:"the envelope id this message answers, if any"`
	IdempotencyKey string `json:"idempotency_key,omitempty" jsonschema:"1 to 255 visible ASCII characters; retrying with the same key and message sends nothing twice"`
}

// sendOut is policy's decision as the sender may see it.
type sendOut struct {
	EnvelopeID string      `json:"envelope_id" jsonschema:"the message's id: poll envelope_status with it while pending"`
	Type       string      `json:"type,omitempty"`
	To         string      `json:"to,omitempty"`
	Outcome    string      `json:"outcome" jsonschema:"deliver, deliver_partial, hold, refuse, or pending (not decided yet)"`
	Decided    bool        `json:"decided"`
	Duplicate  bool        `json:"duplicate,omitempty" jsonschema:"the idempotency key was used before: nothing new was sent"`
	Reasons    []reasonOut `json:"reasons,omitempty" jsonschema:"policy's reasons about the whole message"`
	Fields     []fieldOut  `json:"fields,omitempty" jsonschema:"every field's verdict (never its value)"`
	// Delivery is set by envelope_status for a recipient at another broker.
	Delivery *ingress.Delivery `json:"delivery,omitempty" jsonschema:"for a recipient at another broker: where the message stands"`
	// Approval is set by envelope_status for a recipient here asked to
	// decide part of the message.
	Approval *ingress.Approval `json:"approval,omitempty" jsonschema:"for a recipient asked to approve part of the message: held until they decide, then the outcome"`
}

type reasonOut struct {
	Party   string `json:"party,omitempty"`
	Rule    string `json:"rule,omitempty"`
	Field   string `json:"field,omitempty"`
	Code    string `json:"code"`
	Message string `json:"message,omitempty"`
}

type fieldOut struct {
	Pointer string      `json:"pointer" jsonschema:"RFC 6901 pointer into the body"`
	Class   string      `json:"class,omitempty"`
	Action  string      `json:"action" jsonschema:"allow, deny or hold"`
	Reasons []reasonOut `json:"reasons,omitempty"`
}

func sendOutOf(o ingress.Outcome) sendOut {
	out := sendOut{EnvelopeID: o.EnvelopeID, Type: o.Type, To: o.To, Outcome: o.Outcome, Decided: o.Decided, Duplicate: o.Duplicate,
		Reasons: reasonsOut(o.Reasons), Delivery: o.Delivery, Approval: o.Approval}
	for _, f := range o.Fields {
		out.Fields = append(out.Fields, fieldOut{Pointer: f.Pointer, Class: f.Class, Action: f.Action, Reasons: reasonsOut(f.Reasons)})
	}
	return out
}

func reasonsOut(rs []ingress.Reason) []reasonOut {
	var out []reasonOut
	for _, r := range rs {
		out = append(out, reasonOut{Party: r.Party, Rule: r.Rule, Field: r.Field, Code: r.Code, Message: r.Message})
	}
	return out
}

const maxIdempotencyKey = 255

// send sends one message of snd through the door.
func (a *API) send(ctx context.Context, snd ingress.Sender, to, typ string, body []byte, inReplyTo, key string) (sendOut, error) {
	addr, err := ingress.ParseRecipient(to)
	if err != nil {
		return sendOut{}, invalidArgument("/to", "the recipient must be an address person@domain (optionally as an acct: URI)")
	}
	if typ == "" || len(typ) > 200 || strings.ContainsFunc(typ, notVisibleASCII) {
		return sendOut{}, invalidArgument("/type", "the message type is 1 to 200 visible ASCII characters, e.g. meeting.request/v1")
	}
	if len(key) > maxIdempotencyKey || strings.ContainsFunc(key, notVisibleASCII) {
		return sendOut{}, invalidArgument("/idempotency_key", "an idempotency key is 1 to %d visible ASCII characters", maxIdempotencyKey)
	}
	if len(body) == 0 || body[0] != '{' {
		return sendOut{}, invalidArgument("/body", "the body is a JSON object")
	}
	env := &alpv1.Envelope{To: addr, Type: typ, Body: body, InReplyTo: inReplyTo}
	o, err := a.door.Send(ctx, ingress.Submission{Sender: snd, Envelope: env, IdempotencyKey: key})
	if err != nil {
		return sendOut{}, err
	}
	return sendOutOf(o), nil
}

func notVisibleASCII(r rune) bool { return r <= ' ' || r > '~' }

func (a *API) sendMessage(ctx context.Context, c call, in sendIn) (sendOut, error) {
	if in.InReplyTo != "" {
		if _, err := ingress.ParseEnvelopeID(in.InReplyTo); err != nil {
			return sendOut{}, invalidArgument("/in_reply_to", "in_reply_to is the envelope id answered: %v", err)
		}
	}
	return a.send(ctx, c.snd, in.To, in.Type, in.Body, in.InReplyTo, in.IdempotencyKey)
}

type envelopeIn struct {
	EnvelopeID string `json:"envelope_id" jsonschema:"the envelope_id send_message answered"`
}

func (a *API) envelopeStatus(ctx context.Context, c call, in envelopeIn) (sendOut, error) {
	o, err := a.door.Status(ctx, c.snd, in.EnvelopeID)
	if err != nil {
		return sendOut{}, err
	}
	return sendOutOf(o), nil
}

// Message types.

type noInput struct{}

type typeOut struct {
	Name        string   `json:"name" jsonschema:"the type's name, e.g. meeting.request/v1"`
	Title       string   `json:"title,omitempty"`
	Description string   `json:"description,omitempty"`
	Builtin     bool     `json:"builtin"`
	Owner       string   `json:"owner,omitempty" jsonschema:"the organization that registered it (none for a built-in type)"`
	Commits     []string `json:"commits,omitempty" jsonschema:"what a message of this type commits the recipient to (held for the person)"`
	Resource    string   `json:"resource" jsonschema:"the MCP resource with its JSON Schema"`
}

type typesOut struct {
	Types []typeOut `json:"types"`
}

type typeSchemaOut struct {
	typeOut
	Schema jsonObject `json:"schema" jsonschema:"the JSON Schema (2020-12) of the body"`
}

func typeOf(t *msgtypes.Type) typeOut {
	var doc struct {
		Title       string `json:"title"`
		Description string `json:"description"`
	}
	_ = json.Unmarshal(t.Schema(), &doc)
	return typeOut{Name: t.Name(), Title: doc.Title, Description: doc.Description, Builtin: t.Builtin(), Owner: t.Owner(),
		Commits: t.Commits(), Resource: typeURI(t.Name())}
}

func (a *API) listTypes(_ context.Context, c call, _ noInput) (typesOut, error) {
	ts, err := a.s.Types(c.snd)
	if err != nil {
		return typesOut{}, err
	}
	out := typesOut{Types: make([]typeOut, 0, len(ts))}
	for _, t := range ts {
		out.Types = append(out.Types, typeOf(t))
	}
	return out, nil
}

type typeIn struct {
	Name string `json:"name" jsonschema:"the message type, e.g. meeting.request/v1"`
}

func (a *API) getType(_ context.Context, c call, in typeIn) (typeSchemaOut, error) {
	t, err := a.s.Type(c.snd, in.Name)
	if err != nil {
		return typeSchemaOut{}, err
	}
	return typeSchemaOut{typeOut: typeOf(t), Schema: t.Schema()}, nil
}

// Connections.

type connectionOut struct {
	ID        string `json:"id"`
	With      string `json:"with" jsonschema:"the other party's address"`
	State     string `json:"state" jsonschema:"requested, connected, declined or blocked"`
	Direction string `json:"direction" jsonschema:"incoming (they asked) or outgoing (your person asked)"`
	Requested string `json:"requested,omitempty" jsonschema:"RFC 3339"`
	Decided   string `json:"decided,omitempty" jsonschema:"RFC 3339; absent while the request waits"`
}

type connectionsOut struct {
	Connections []connectionOut `json:"connections"`
}

func rfc3339(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.UTC().Format(time.RFC3339)
}

func (a *API) listConnections(ctx context.Context, c call, _ noInput) (connectionsOut, error) {
	cs, err := a.s.Connections(ctx, c.snd)
	if err != nil {
		return connectionsOut{}, err
	}
	out := connectionsOut{Connections: make([]connectionOut, 0, len(cs))}
	for _, x := range cs {
		out.Connections = append(out.Connections, connectionOut{ID: x.ID, With: x.With, State: x.State, Direction: x.Direction,
			Requested: rfc3339(x.Requested), Decided: rfc3339(x.Decided)})
	}
	return out, nil
}

type connectIn struct {
	To             string `json:"to" jsonschema:"the address of the person to connect with"`
	Purpose        string `json:"purpose" jsonschema:"meeting, introduction, partnership, sales, support or other"`
	Message        string `json:"message,omitempty" jsonschema:"why your person wants to connect (free text, up to 280 characters)"`
	ReferredBy     string `json:"referred_by,omitempty" jsonschema:"the address of whoever referred your person, if anyone"`
	IdempotencyKey string `json:"idempotency_key,omitempty" jsonschema:"retrying with the same key sends nothing twice"`
}

func (a *API) requestConnection(ctx context.Context, c call, in connectIn) (sendOut, error) {
	return a.send(ctx, c.snd, in.To, msgtypes.ConnectionRequest,
		ingress.ConnectionRequestBody(in.Purpose, in.Message, in.ReferredBy), "", in.IdempotencyKey)
}

// The ledger.

type ledgerHeadOut struct {
	Origin     string         `json:"origin" jsonschema:"the log's name"`
	Size       uint64         `json:"size" jsonschema:"the number of entries"`
	Root       string         `json:"root" jsonschema:"the RFC 6962 root over all entries, hex"`
	Checkpoint checkpointOut  `json:"checkpoint" jsonschema:"the latest signed checkpoint"`
	Keys       []ledgerKeyOut `json:"public_keys" jsonschema:"every ledger key of the organization, oldest first"`
}

type checkpointOut struct {
	Note string `json:"note" jsonschema:"the C2SP signed note, as text: keep it to ask for consistency later"`
	Size uint64 `json:"size"`
	Root string `json:"root" jsonschema:"hex"`
}

type ledgerKeyOut struct {
	KeyID       string `json:"key_id"`
	VerifierKey string `json:"verifier_key" jsonschema:"the signed-note verifier key"`
	State       string `json:"state"`
}

func (a *API) ledgerHead(ctx context.Context, c call, _ noInput) (ledgerHeadOut, error) {
	h, err := a.s.LedgerHead(ctx, c.authorization)
	if err != nil {
		return ledgerHeadOut{}, err
	}
	out := ledgerHeadOut{Origin: h.GetOrigin(), Size: h.GetSize(), Root: hex.EncodeToString(h.GetRoot()),
		Checkpoint: checkpointOut{Note: string(h.GetCheckpoint().GetNote()), Size: h.GetCheckpoint().GetSize(),
			Root: hex.EncodeToString(h.GetCheckpoint().GetRoot())},
		Keys: make([]ledgerKeyOut, 0, len(h.GetPublicKeys()))}
	for _, k := range h.GetPublicKeys() {
		out.Keys = append(out.Keys, ledgerKeyOut{KeyID: k.GetKeyId(), VerifierKey: k.GetVerifierKey(),
			State: strings.ToLower(strings.TrimPrefix(k.GetState().String(), "KEY_STATE_"))})
	}
	return out, nil
}
