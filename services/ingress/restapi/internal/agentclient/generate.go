// Package agentclient is a Go client of the agent API generated from its
// OpenAPI document (services/ingress/restapi/openapi.yaml) by oapi-codegen,
// pinned in tools/go.mod. It proves the document is good enough to generate
// a client from: restapi's tests drive it against a whole broker, and
// regenerate it to check that the committed code is what the document
// gives. Only tests link it.
package agentclient

//go:generate go tool -modfile=../../../../../tools/go.mod oapi-codegen -config oapi-codegen.yaml -o client.gen.go ../../openapi.yaml
