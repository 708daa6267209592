package oauthas

import (
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/go-jose/go-jose/v4"
	"github.com/zitadel/oidc/v3/pkg/oidc"

	"github.com/alpd-project/alpd/internal/httpjson"
)

// ASMetadata is a tenant's authorization server metadata (RFC 8414 §2).
type ASMetadata struct {
	Issuer                                     string   `json:"issuer"`
	AuthorizationEndpoint                      string   `json:"authorization_endpoint"`
	TokenEndpoint                              string   `json:"token_endpoint"`
	RevocationEndpoint                         string   `json:"revocation_endpoint"`
	JWKSURI                                    string   `json:"jwks_uri"`
	RegistrationEndpoint                       string   `json:"registration_endpoint,omitempty"`
	ScopesSupported                            []string `json:"scopes_supported"`
	ResponseTypesSupported                     []string `json:"response_types_supported"`
	ResponseModesSupported                     []string `json:"response_modes_supported"`
	GrantTypesSupported                        []string `json:"grant_types_supported"`
	TokenEndpointAuthMethodsSupported          []string `json:"token_endpoint_auth_methods_supported"`
	TokenEndpointAuthSigningAlgValuesSupported []string `json:"token_endpoint_auth_signing_alg_values_supported"`
	RevocationEndpointAuthMethodsSupported     []string `json:"revocation_endpoint_auth_methods_supported"`
	RevocationEndpointAuthSigningAlgValues     []string `json:"revocation_endpoint_auth_signing_alg_values_supported"`
	CodeChallengeMethodsSupported              []string `json:"code_challenge_methods_supported"`
	AuthorizationResponseIssParameterSupported bool     `json:"authorization_response_iss_parameter_supported"`
	ClientIDMetadataDocumentSupported          bool     `json:"client_id_metadata_document_supported"`
}

// ResourceMetadata is protected resource metadata (RFC 9728 §2).
type ResourceMetadata struct {
	Resource               string   `json:"resource"`
	AuthorizationServers   []string `json:"authorization_servers"`
	ScopesSupported        []string `json:"scopes_supported"`
	BearerMethodsSupported []string `json:"bearer_methods_supported"`
}

// authMethods are the client authentication methods of the token and
// revocation endpoints.
var authMethods = []string{
	string(oidc.AuthMethodNone), string(oidc.AuthMethodBasic), string(oidc.AuthMethodPost), string(oidc.AuthMethodPrivateKeyJWT),
}

// Metadata returns tenant's RFC 8414 metadata; ok is false for a tenant not
// hosted.
func (s *Server) Metadata(tenant string) (md ASMetadata, ok bool) {
	t := s.tenants[tenant]
	if t == nil {
		return ASMetadata{}, false
	}
	return t.metadata(), true
}

func (t *tenantAS) metadata() ASMetadata {
	reg := ""
	switch {
	case t.s.cfg.RegistrationEndpoint != "":
		reg = strings.ReplaceAll(t.s.cfg.RegistrationEndpoint, "{tenant}", t.tenant)
	case t.s.deps.Registration != nil:
		reg = t.issuer + PathRegister
	}
	return ASMetadata{
		Issuer:                            t.issuer,
		AuthorizationEndpoint:             t.issuer + PathAuthorize,
		TokenEndpoint:                     t.issuer + PathToken,
		RevocationEndpoint:                t.issuer + PathRevoke,
		JWKSURI:                           t.issuer + PathJWKS,
		RegistrationEndpoint:              reg,
		ScopesSupported:                   slices.Clone(t.s.cfg.Scopes),
		ResponseTypesSupported:            []string{string(oidc.ResponseTypeCode)},
		ResponseModesSupported:            []string{string(oidc.ResponseModeQuery)},
		GrantTypesSupported:               []string{string(oidc.GrantTypeCode), string(oidc.GrantTypeRefreshToken)},
		TokenEndpointAuthMethodsSupported: slices.Clone(authMethods),
		TokenEndpointAuthSigningAlgValuesSupported: slices.Clone(assertionAlgs),
		RevocationEndpointAuthMethodsSupported:     slices.Clone(authMethods),
		RevocationEndpointAuthSigningAlgValues:     slices.Clone(assertionAlgs),
		CodeChallengeMethodsSupported:              []string{string(oidc.CodeChallengeMethodS256)},
		AuthorizationResponseIssParameterSupported: true,
		ClientIDMetadataDocumentSupported:          t.s.cfg.ClientIDMetadataDocumentSupported,
	}
}

// resourceMetadata is the RFC 9728 metadata of resource (one of
// Config.Resources): every tenant's issuer is an authorization server for
// it.
func (s *Server) resourceMetadata(resource string) ResourceMetadata {
	var as []string
	for _, t := range s.cfg.Tenants {
		as = append(as, s.tenants[t].issuer)
	}
	return ResourceMetadata{
		Resource:               resource,
		AuthorizationServers:   as,
		ScopesSupported:        slices.Clone(s.cfg.Scopes),
		BearerMethodsSupported: []string{"header"},
	}
}

// assertionAlgs are the JWS algorithms accepted in private_key_jwt client
// assertions.
var assertionAlgs = []string{string(jose.EdDSA), string(jose.ES256), string(jose.ES384), string(jose.RS256), string(jose.PS256)}

// metadataHandler serves a JSON document built by doc on GET and HEAD, to
// any origin (metadata is public, RFC 8414 §3 / RFC 9728 §3).
func metadataHandler(doc func() any) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Access-Control-Allow-Origin", "*")
		switch r.Method {
		case http.MethodGet, http.MethodHead:
		case http.MethodOptions:
			w.Header().Set("Access-Control-Allow-Methods", "GET, HEAD")
			w.Header().Set("Access-Control-Allow-Headers", "MCP-Protocol-Version, Accept")
			w.WriteHeader(http.StatusNoContent)
			return
		default:
			w.Header().Set("Allow", "GET, HEAD")
			httpjson.WriteError(w, httpjson.Errorf(http.StatusMethodNotAllowed, "method_not_allowed", "use GET or HEAD"))
			return
		}
		httpjson.WritePublic(w, r, doc(), 5*time.Minute)
	})
}
