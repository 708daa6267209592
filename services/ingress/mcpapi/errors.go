package mcpapi

import (
	"encoding/json"
	"errors"
	"net/http"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/alpd-project/alpd/internal/httpjson"
	"github.com/alpd-project/alpd/services/ingress"
	"github.com/alpd-project/alpd/services/ingress/inbox"
)

// toolProblem is a refused tool call as the agent reads it: the text of
// the tool error is this object as JSON (MCP tool errors carry content,
// not structured output: a client validates structuredContent against
// the tool's output schema). The fields and codes are those of every
// other door's problem details (internal/httpjson).
type toolProblem struct {
	Error toolErrorBody `json:"error"`
}

type toolErrorBody struct {
	// Status is the HTTP status the same refusal has on the REST door.
	Status  int    `json:"status"`
	Code    string `json:"code"`
	Message string `json:"message"`
	// Pointer is the JSON pointer into the tool's arguments at fault.
	Pointer    string `json:"pointer,omitempty"`
	RetryAfter int    `json:"retry_after,omitempty"`
	Problems   any    `json:"problems,omitempty"`
}

// toolError is err as a tool error result.
func (a *API) toolError(tool string, err error) *mcp.CallToolResult {
	e := classify(err)
	if e.Status >= 500 && e.Cause != nil {
		a.log.Warn("mcp tool call failed", "tool", tool, "code", e.Code, "err", e.Cause)
	}
	body, _ := json.Marshal(toolProblem{Error: toolErrorBody{Status: e.Status, Code: e.Code, Message: e.Message,
		Pointer: e.Pointer, RetryAfter: e.RetryAfter, Problems: e.Problems}})
	return &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: string(body)}}}
}

// CodeInvalidArgument is the one code of tool errors this door adds: an
// argument the tool's schema cannot refuse itself. Every other refusal has
// the code every door gives it (ingress.Problem).
const CodeInvalidArgument = "invalid_argument"

// classify turns an error of a tool call into its problem
// (ingress.Problem), with the pointer into the tool's arguments where one
// names the argument at fault.
func classify(err error) *httpjson.Error {
	e := ingress.Problem(err)
	var body *ingress.BodyError
	var cursor *inbox.CursorError
	var limit *inbox.LimitError
	switch {
	case errors.As(err, &body):
		e.Pointer = "/type"
		if body.Code == ingress.CodeInvalidBody {
			e.Pointer = "/body"
		}
	case errors.Is(err, ingress.ErrInvalidEnvelopeID):
		e.Pointer = "/envelope_id"
	case errors.As(err, &cursor):
		e.Pointer = "/after"
	case errors.As(err, &limit):
		e.Pointer = "/limit"
	case errors.Is(err, inbox.ErrInvalid):
		e.Pointer = "/ids"
	}
	return e
}

// invalidArgument refuses an argument the schema cannot express.
func invalidArgument(pointer, format string, args ...any) *httpjson.Error {
	e := httpjson.Errorf(http.StatusBadRequest, CodeInvalidArgument, format, args...)
	e.Pointer = pointer
	return e
}
