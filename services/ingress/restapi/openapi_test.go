package restapi_test

import (
	"encoding/json"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/pb33f/libopenapi"
	validator "github.com/pb33f/libopenapi-validator"
	"github.com/pb33f/libopenapi-validator/schema_validation"
	"github.com/pb33f/libopenapi/datamodel/high/base"
	v3 "github.com/pb33f/libopenapi/datamodel/high/v3"

	"github.com/alpd-project/alpd/services/ingress/restapi"
)

// model loads an OpenAPI document with libopenapi and checks it is a
// valid OpenAPI 3.1 document (libopenapi-validator checks it against the
// specification's own schema).
func model(t *testing.T, doc []byte) *v3.Document {
	t.Helper()
	d, err := libopenapi.NewDocument(doc)
	if err != nil {
		t.Fatal(err)
	}
	if v := d.GetVersion(); !strings.HasPrefix(v, "3.1.") {
		t.Fatalf("the document is OpenAPI %s, want 3.1", v)
	}
	m, err := d.BuildV3Model()
	if err != nil {
		t.Fatalf("the document does not build: %v", err)
	}
	v, errs := validator.NewValidator(d)
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	if ok, verrs := v.ValidateDocument(); !ok {
		t.Fatalf("the document is not valid OpenAPI 3.1:\n%s", errList(verrs))
	}
	return &m.Model
}

// operations are the document's path+method pairs.
func operations(doc *v3.Document) map[string]*v3.Operation {
	out := map[string]*v3.Operation{}
	for path, item := range doc.Paths.PathItems.FromOldest() {
		for method, op := range item.GetOperations().FromOldest() {
			out[strings.ToUpper(method)+" "+path] = op
		}
	}
	return out
}

// agentRoutes are the routes of the agent API in the whole broker: every
// route of the REST door (restapi's declared methods) and the routes of
// policy's /v1/rules that agents read, as path+method with wildcards
// written the OpenAPI way ({name...} → {name}).
func agentRoutes(r *rig) map[string]bool {
	wild := regexp.MustCompile(`\{([a-z_]+)\.\.\.\}`)
	out := map[string]bool{}
	for _, rt := range r.br.B.Routes() {
		agentRead := strings.HasPrefix(rt.Pattern, "/v1/rules") && rt.Method == http.MethodGet
		if rt.Method == "" || !(strings.HasPrefix(rt.Pattern, restapi.Base+"/") || agentRead) {
			continue // the fallbacks (404, 405) answer for no operation
		}
		out[rt.Method+" "+wild.ReplaceAllString(rt.Pattern, "{$1}")] = true
	}
	return out
}

// The committed document is the served one but for the broker's URL and
// OAuth flow; it describes exactly the real routes, both ways.
func TestOpenAPIMatchesRoutes(t *testing.T) {
	r := newRig(t, restapi.Config{})
	committed := model(t, restapi.OpenAPI)
	served := model(t, r.served(t))
	if committed.Paths.PathItems.Len() == 0 {
		t.Fatal("no paths")
	}
	ops := operations(served)
	if !slices.Equal(slices.Sorted(keys(ops)), slices.Sorted(keys(operations(committed)))) {
		t.Error("the served document's operations differ from the committed one's")
	}
	routes := agentRoutes(r)
	for op := range ops {
		if !routes[op] {
			t.Errorf("the document has %s, which is no route", op)
		}
	}
	for rt := range routes {
		if ops[rt] == nil {
			t.Errorf("route %s is not in the document", rt)
		}
	}
	if got := served.Servers[0].URL; got != publicURL {
		t.Errorf("served servers[0] = %q", got)
	}
	flow := served.Components.SecuritySchemes.GetOrZero("oauth2").Flows.AuthorizationCode
	if flow.AuthorizationUrl != publicURL+"/oauth/example.org/authorize" || flow.TokenUrl != publicURL+"/oauth/example.org/token" {
		t.Errorf("served OAuth flow %s %s", flow.AuthorizationUrl, flow.TokenUrl)
	}
	a := r.do(t, http.MethodGet, restapi.PathOpenAPI+"?tenant=partner.example", "", nil)
	var doc struct {
		Components struct {
			SecuritySchemes struct {
				OAuth2 struct {
					Flows struct {
						AuthorizationCode struct {
							AuthorizationURL string `json:"authorizationUrl"`
						} `json:"authorizationCode"`
					} `json:"flows"`
				} `json:"oauth2"`
			} `json:"securitySchemes"`
		} `json:"components"`
	}
	if err := json.Unmarshal(a.body, &doc); err != nil || doc.Components.SecuritySchemes.OAuth2.Flows.AuthorizationCode.AuthorizationURL != publicURL+"/oauth/partner.example/authorize" {
		t.Errorf("?tenant=partner.example: %v %s", err, a.body[:min(200, len(a.body))])
	}
	if a := r.do(t, http.MethodGet, restapi.PathOpenAPI+"?tenant=nope.example", "", nil); a.status != http.StatusNotFound || a.code() != restapi.CodeTenantNotHosted {
		t.Errorf("an unknown tenant: %s", a)
	}
}

func keys[M ~map[string]V, V any](m M) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

// policyRuleCodes are the codes policy's /v1/rules answers an agent
// besides restapi's (services/policy/api).
var policyRuleCodes = []string{"not_ready", "unknown_set"}

// Every operation is complete enough to generate a client from: an id, a
// summary, its security, an example, errors as problems with the stable
// codes, Retry-After where it applies; every example is valid.
func TestOpenAPIIsComplete(t *testing.T) {
	doc := model(t, restapi.OpenAPI)
	sv := schema_validation.NewSchemaValidator()
	check := func(where string, mt *v3.MediaType) int {
		n := 0
		if mt.Schema == nil {
			t.Errorf("%s has no schema", where)
			return 0
		}
		schema := mt.Schema.Schema()
		examples := map[string]interface{ Decode(any) error }{}
		if mt.Example != nil {
			examples["example"] = mt.Example
		}
		if mt.Examples != nil {
			for name, ex := range mt.Examples.FromOldest() {
				examples[name] = ex.Value
			}
		}
		for name, node := range examples {
			var v any
			if err := node.Decode(&v); err != nil {
				t.Errorf("%s example %s: %v", where, name, err)
				continue
			}
			raw, _ := json.Marshal(v)
			if ok, errs := sv.ValidateSchemaBytes(schema, raw); !ok {
				t.Errorf("%s example %s does not match its schema:\n%s", where, name, errList(errs))
			}
			n++
		}
		return n
	}
	ids := map[string]bool{}
	for key, op := range operations(doc) {
		if op.OperationId == "" || ids[op.OperationId] || op.Summary == "" {
			t.Errorf("%s: operationId %q (unique) and a summary are required", key, op.OperationId)
		}
		ids[op.OperationId] = true
		if op.Security == nil && key != "GET "+restapi.PathOpenAPI {
			t.Errorf("%s names no security", key)
		}
		examples := 0
		if op.RequestBody != nil {
			for media, mt := range op.RequestBody.Content.FromOldest() {
				if n := check(key+" request "+media, mt); n == 0 {
					t.Errorf("%s: the request body has no example", key)
				} else {
					examples += n
				}
			}
		}
		for status, resp := range op.Responses.Codes.FromOldest() {
			if resp.Content == nil {
				t.Errorf("%s %s has no content", key, status)
				continue
			}
			for media, mt := range resp.Content.FromOldest() {
				examples += check(key+" "+status+" "+media, mt)
				if status[0] >= '4' {
					if media != "application/problem+json" || !isProblemSchema(mt.Schema) {
						t.Errorf("%s %s does not answer the Problem schema", key, status)
					}
				}
			}
			wantHeader := map[string]string{"429": "Retry-After", "503": "Retry-After", "401": "WWW-Authenticate", "403": "WWW-Authenticate"}[status]
			if wantHeader != "" && (resp.Headers == nil || resp.Headers.GetOrZero(wantHeader) == nil) {
				t.Errorf("%s %s does not declare %s", key, status, wantHeader)
			}
		}
		if examples == 0 {
			t.Errorf("%s has no example", key)
		}
	}
	// The stable codes: exactly what the API answers.
	codes := doc.Components.Schemas.GetOrZero("ProblemCode").Schema()
	var enum []string
	for _, n := range codes.Enum {
		enum = append(enum, n.Value)
	}
	want := slices.Sorted(slices.Values(append(restapi.Codes(), policyRuleCodes...)))
	if slices.Sort(enum); !slices.Equal(enum, want) {
		t.Errorf("ProblemCode enum %v\nwant %v", enum, want)
	}
	// Security schemes: OAuth 2.1 (authorization code, the two scopes)
	// and personal access tokens.
	schemes := doc.Components.SecuritySchemes
	oauth := schemes.GetOrZero("oauth2")
	if oauth == nil || oauth.Type != "oauth2" || oauth.Flows.AuthorizationCode == nil ||
		oauth.Flows.AuthorizationCode.Scopes.GetOrZero("alp.read") == "" || oauth.Flows.AuthorizationCode.Scopes.GetOrZero("alp.send") == "" {
		t.Errorf("oauth2 scheme: %+v", oauth)
	}
	if pat := schemes.GetOrZero("pat"); pat == nil || pat.Type != "http" || pat.Scheme != "bearer" {
		t.Errorf("pat scheme: %+v", pat)
	}
}

func isProblemSchema(p *base.SchemaProxy) bool {
	return p.IsReference() && p.GetReference() == "#/components/schemas/Problem"
}
