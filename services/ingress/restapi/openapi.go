package restapi

import (
	_ "embed"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/alpd-project/alpd/internal/httpjson"
)

// OpenAPI is the committed OpenAPI 3.1 document of the agent API, as
// written (openapi.yaml). The served copy fills in the broker's URL and an
// organization's OAuth flow.
//
//go:embed openapi.yaml
var OpenAPI []byte

// document is the parsed OpenAPI document, as JSON values.
type document struct {
	root map[string]any
}

// mustDocument parses the embedded document. It is part of the binary, so
// a document that does not parse is a build error every test shows.
func mustDocument() *document {
	var root map[string]any
	if err := yaml.Unmarshal(OpenAPI, &root); err != nil {
		panic(fmt.Sprintf("restapi: openapi.yaml: %v", err))
	}
	if _, err := json.Marshal(root); err != nil {
		panic(fmt.Sprintf("restapi: openapi.yaml is not JSON-compatible: %v", err))
	}
	return &document{root: root}
}

// render is the document as served by the broker at publicURL, with the
// OAuth flow of the authorization server at issuer (none: as committed).
func (d *document) render(publicURL, issuer string) map[string]any {
	root := maps.Clone(d.root)
	root["servers"] = []any{map[string]any{"url": publicURL, "description": "this broker"}}
	if issuer == "" {
		return root
	}
	// Copy the path down to the flow: the parsed document is shared.
	comps := maps.Clone(root["components"].(map[string]any))
	schemes := maps.Clone(comps["securitySchemes"].(map[string]any))
	oauth := maps.Clone(schemes["oauth2"].(map[string]any))
	flows := maps.Clone(oauth["flows"].(map[string]any))
	code := maps.Clone(flows["authorizationCode"].(map[string]any))
	// The authorization server's endpoints, as identity lays them out
	// under each issuer (docs/identity.md); its RFC 8414 metadata, which
	// the description points to, says the same.
	code["authorizationUrl"] = issuer + "/authorize"
	code["tokenUrl"] = issuer + "/token"
	code["refreshUrl"] = issuer + "/token"
	flows["authorizationCode"] = code
	oauth["flows"] = flows
	schemes["oauth2"] = oauth
	comps["securitySchemes"] = schemes
	root["components"] = comps
	return root
}

// openAPI is GET /v1/agent/openapi.json: public, so an agent's developer
// can build a client before holding a credential.
func (a *API) openAPI(w http.ResponseWriter, r *http.Request) {
	tenant := r.URL.Query().Get("tenant")
	if tenant == "" {
		if tenants := slices.Sorted(maps.Keys(a.cfg.Issuers)); len(tenants) > 0 {
			tenant = tenants[0]
		}
	}
	issuer, ok := a.cfg.Issuers[tenant]
	if !ok && tenant != "" && r.URL.Query().Has("tenant") {
		httpjson.WriteError(w, httpjson.Errorf(http.StatusNotFound, CodeTenantNotHosted, "this broker is not home for %q", truncate(tenant)))
		return
	}
	httpjson.WritePublic(w, r, a.doc.render(a.cfg.PublicURL, issuer), 5*time.Minute)
}
