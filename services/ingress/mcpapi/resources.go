package mcpapi

import (
	"context"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// Resources: each message type's JSON Schema at alp://types/<name> (the
// schema send_message's body must match) and the agent's inbox at
// alp://inbox, which a client subscribes to for news of new items.
const (
	typesURIPrefix = "alp://types/"
	inboxURI       = "alp://inbox"
	schemaMIME     = "application/schema+json"
)

func typeURI(name string) string { return typesURIPrefix + name }

func (a *API) addResources(srv *mcp.Server) {
	srv.AddResourceTemplate(&mcp.ResourceTemplate{
		Name: "message-type", Title: "Message type schema", URITemplate: typesURIPrefix + "{+name}", MIMEType: schemaMIME,
		Description: "The JSON Schema (2020-12) of a message type's body, e.g. alp://types/meeting.request/v1",
	}, a.readType)
	a.addInboxResource(srv)
}

// readType reads a type's schema as get_message_type does: admitted by the
// door, and only a type the agent's organization may see.
func (a *API) readType(ctx context.Context, req *mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error) {
	uri := req.Params.URI
	snd, err := a.door.Admit(ctx, authorization(req.Extra))
	if err != nil {
		return nil, err
	}
	t, err := a.s.Type(snd, strings.TrimPrefix(uri, typesURIPrefix))
	if err != nil {
		return nil, mcp.ResourceNotFoundError(uri)
	}
	return &mcp.ReadResourceResult{Contents: []*mcp.ResourceContents{{URI: uri, MIMEType: schemaMIME, Text: string(t.Schema())}}}, nil
}
