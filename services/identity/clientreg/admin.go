package clientreg

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"net/http"
	"slices"

	alpv1 "github.com/alpd-project/alpd/gen/alp/v1"
	"github.com/alpd-project/alpd/internal/httpjson"
	"github.com/alpd-project/alpd/internal/httproute"
	"github.com/alpd-project/alpd/internal/identitystore"
	"github.com/alpd-project/alpd/internal/signin"
)

// Paths of the admin endpoints.
const (
	PathAdminClients = "/v1/admin/clients"
	// PathAdminAttestation is PathAdminClients/{id}/attestation; a client
	// id with slashes (a metadata document URL) is path-escaped.
	PathAdminAttestation = PathAdminClients + "/{id}/attestation"
)

// Client secrets: "alpcs_" and 32 random bytes in unpadded base64url.
const ClientSecretPrefix = "alpcs_"

const (
	confidentialIDPrefix = "cc_"
	vendorIDPrefix       = "vnd_"
)

// Token endpoint authentication methods an admin may choose.
const (
	authMethodSecretBasic = "client_secret_basic"
	authMethodSecretPost  = "client_secret_post"
)

// NewClientSecret makes a client secret. Only its SHA-256
// (identitystore.HashSecret) is stored.
func NewClientSecret() string {
	var b [32]byte
	_, _ = rand.Read(b[:]) // never fails (Go 1.24+)
	return ClientSecretPrefix + base64.RawURLEncoding.EncodeToString(b[:])
}

// AdminClientRequest is the body of POST /v1/admin/clients.
type AdminClientRequest struct {
	Name         string   `json:"name"`
	RedirectURIs []string `json:"redirect_uris"`
	// TokenEndpointAuthMethod: client_secret_basic (default) or
	// client_secret_post register a confidential client with a secret;
	// "none" registers a vendor's public client (PUBLIC_VENDOR).
	TokenEndpointAuthMethod string `json:"token_endpoint_auth_method,omitempty"`
	// ClientID: only for a vendor's public client, its published id
	// (random when empty). Confidential clients get a random id.
	ClientID string `json:"client_id,omitempty"`
	// VendorAttestation: only for a vendor's public client; it makes its
	// agents company class. (Confidential clients are company class
	// anyway.)
	VendorAttestation string `json:"vendor_attestation,omitempty"`
}

// AttestationRequest is the body of POST /v1/admin/clients/{id}/attestation.
type AttestationRequest struct {
	VendorAttestation string `json:"vendor_attestation"`
}

// AdminClient describes a client to an admin.
type AdminClient struct {
	ClientID string `json:"client_id"`
	// ClientSecret is only in the answer to the registration, and never
	// again: it is not stored.
	ClientSecret            string   `json:"client_secret,omitempty"`
	Name                    string   `json:"name,omitempty"`
	RedirectURIs            []string `json:"redirect_uris"`
	TokenEndpointAuthMethod string   `json:"token_endpoint_auth_method"`
	Kind                    string   `json:"kind"`
	Class                   string   `json:"class"`
	RegisteredBy            string   `json:"registered_by"`
	VendorAttestation       string   `json:"vendor_attestation,omitempty"`
	AttestedBy              string   `json:"attested_by,omitempty"`
	ClientIDIssuedAt        int64    `json:"client_id_issued_at"`
}

// KindName is the JSON name of a client kind.
func KindName(k alpv1.ClientKind) string {
	switch k {
	case alpv1.ClientKind_CLIENT_KIND_CONFIDENTIAL:
		return "confidential"
	case alpv1.ClientKind_CLIENT_KIND_PUBLIC_DCR:
		return "public_dcr"
	case alpv1.ClientKind_CLIENT_KIND_PUBLIC_CIMD:
		return "public_cimd"
	case alpv1.ClientKind_CLIENT_KIND_PUBLIC_VENDOR:
		return "public_vendor"
	}
	return "unspecified"
}

// ClassName is the JSON name of a trust class.
func ClassName(c alpv1.TrustClass) string {
	switch c {
	case alpv1.TrustClass_TRUST_CLASS_COMPANY:
		return "company"
	case alpv1.TrustClass_TRUST_CLASS_CONSUMER:
		return "consumer"
	}
	return "unspecified"
}

func adminView(c identitystore.Client, secret, method string) AdminClient {
	if method == "" {
		method = authMethodNone
		if c.Kind == alpv1.ClientKind_CLIENT_KIND_CONFIDENTIAL {
			method = authMethodSecretBasic
			if c.JWKSURI != "" || len(c.JWKS) > 0 {
				method = "private_key_jwt"
			}
		}
	}
	return AdminClient{
		ClientID: c.ID, ClientSecret: secret, Name: c.Name, RedirectURIs: c.RedirectURIs,
		TokenEndpointAuthMethod: method, Kind: KindName(c.Kind), Class: ClassName(c.Class()),
		RegisteredBy: c.RegisteredBy, VendorAttestation: c.VendorAttestation, AttestedBy: c.AttestedBy,
		ClientIDIssuedAt: c.Registered.Unix(),
	}
}

// AdminHandler serves, for a signed-in admin of a tenant (session role
// Config.AdminRole) with a valid CSRF token (X-CSRF-Token header):
//
//	POST /v1/admin/clients                      register a client under the admin's tenant (201)
//	POST /v1/admin/clients/{id}/attestation     bind a vendor attestation to a public client (200)
//
// Mount it for "/v1/admin/clients" and "/v1/admin/clients/". Answers 401
// without a session, 403 for a missing CSRF token or role; errors are
// problem details (httpjson).
func (reg *Registrar) AdminHandler() http.Handler { return httproute.Handler(reg.AdminRoutes()) }

// admin authenticates a state-changing admin request: session (401), CSRF
// (403), role (403).
func (reg *Registrar) admin(w http.ResponseWriter, r *http.Request) (*signin.Session, bool) {
	sess, ok := reg.person(w, r, true)
	if !ok {
		return nil, false
	}
	if !slices.Contains(sess.Roles, reg.cfg.AdminRole) {
		reg.log.WarnContext(r.Context(), "admin action refused: role missing", "tenant", sess.Tenant, "person_id", sess.PersonID, "path", r.URL.Path)
		httpjson.WriteError(w, apiError(http.StatusForbidden, CodeForbidden, "this needs the "+reg.cfg.AdminRole+" role"))
		return nil, false
	}
	return sess, true
}

// person authenticates a request of a signed-in person: session (401) and,
// when mutate, CSRF (403).
func (reg *Registrar) person(w http.ResponseWriter, r *http.Request, mutate bool) (*signin.Session, bool) {
	if reg.cfg.Sessions == nil {
		reg.log.ErrorContext(r.Context(), "clientreg: Config.Sessions is not set; refusing")
		httpjson.WriteError(w, apiError(http.StatusInternalServerError, CodeInternal, "sign-in is not configured"))
		return nil, false
	}
	sess, err := reg.cfg.Sessions.Session(r)
	if err != nil {
		httpjson.WriteError(w, err)
		return nil, false
	}
	if mutate {
		if err := reg.cfg.Sessions.CheckCSRF(r); err != nil {
			httpjson.WriteError(w, err)
			return nil, false
		}
	}
	return sess, true
}

func actorCtx(ctx context.Context, sess *signin.Session) context.Context {
	return identitystore.WithActor(ctx, &alpv1.Actor{Kind: alpv1.ActorKind_ACTOR_KIND_PERSON, Id: sess.PersonID})
}

// adminPost admits an admin's POST with a JSON body read into req, or
// answers the refusal itself.
func (reg *Registrar) adminPost(w http.ResponseWriter, r *http.Request, req any) (*signin.Session, bool) {
	if r.Method != http.MethodPost {
		methodNotAllowed(w, http.MethodPost)
		return nil, false
	}
	sess, ok := reg.admin(w, r)
	if !ok {
		return nil, false
	}
	if e := readJSONBody(w, r, reg.cfg.MaxBodyBytes, req, true); e != nil {
		httpjson.WriteError(w, bodyAPIError(e))
		return nil, false
	}
	return sess, true
}

// requiredName is checkClientName for a field that must be given.
func requiredName(field, v string) (string, *metadataError) {
	name, merr := checkClientName(field, v)
	if merr == nil && name == "" {
		merr = badMetadata("%s: required", field)
	}
	return name, merr
}

func (reg *Registrar) serveRegisterClient(w http.ResponseWriter, r *http.Request) {
	var req AdminClientRequest
	sess, ok := reg.adminPost(w, r, &req)
	if !ok {
		return
	}
	name, merr := requiredName("name", req.Name)
	if merr != nil {
		httpjson.WriteError(w, apiError(http.StatusBadRequest, merr.code, merr.desc))
		return
	}
	uris, merr := checkRedirectURIs(req.RedirectURIs)
	if merr != nil {
		httpjson.WriteError(w, apiError(http.StatusBadRequest, merr.code, merr.desc))
		return
	}
	spec := identitystore.ClientSpec{
		Tenant: sess.Tenant, RedirectURIs: uris, Name: name, RegisteredBy: sess.PersonID,
	}
	secret := ""
	method := req.TokenEndpointAuthMethod
	switch method {
	case "", authMethodSecretBasic, authMethodSecretPost:
		if method == "" {
			method = authMethodSecretBasic
		}
		if req.ClientID != "" || req.VendorAttestation != "" {
			httpjson.WriteError(w, apiError(http.StatusBadRequest, CodeInvalidClientMetadata,
				"client_id and vendor_attestation are only for a vendor's public client (token_endpoint_auth_method \"none\"); a confidential client gets a random id and is company class anyway"))
			return
		}
		secret = NewClientSecret()
		spec.Kind = alpv1.ClientKind_CLIENT_KIND_CONFIDENTIAL
		spec.ClientID = randomID(confidentialIDPrefix)
		spec.SecretSHA256 = identitystore.HashSecret(secret)
	case authMethodNone:
		spec.Kind = alpv1.ClientKind_CLIENT_KIND_PUBLIC_VENDOR
		spec.ClientID = req.ClientID
		if spec.ClientID == "" {
			spec.ClientID = randomID(vendorIDPrefix)
		} else if len(spec.ClientID) > maxURILen || !printableASCII(spec.ClientID) {
			httpjson.WriteError(w, apiError(http.StatusBadRequest, CodeInvalidClientMetadata, "client_id: printable ASCII of at most 2048 bytes"))
			return
		}
		att, merr := checkClientName("vendor_attestation", req.VendorAttestation)
		if merr != nil {
			httpjson.WriteError(w, apiError(http.StatusBadRequest, merr.code, merr.desc))
			return
		}
		spec.VendorAttestation = att
	default:
		httpjson.WriteError(w, apiError(http.StatusBadRequest, CodeInvalidClientMetadata,
			"token_endpoint_auth_method: client_secret_basic, client_secret_post or none"))
		return
	}
	c, err := reg.cfg.Store.RegisterClient(actorCtx(r.Context(), sess), spec)
	if err != nil {
		httpjson.WriteError(w, reg.storeAPIError(r.Context(), "client registration", err))
		return
	}
	reg.log.InfoContext(r.Context(), "client registered by an admin", "tenant", c.Tenant, "client_id", c.ID,
		"kind", KindName(c.Kind), "class", ClassName(c.Class()), "by", sess.PersonID)
	httpjson.Write(w, http.StatusCreated, adminView(c, secret, method))
}

func (reg *Registrar) serveAttestation(w http.ResponseWriter, r *http.Request) {
	var req AttestationRequest
	sess, ok := reg.adminPost(w, r, &req)
	if !ok {
		return
	}
	att, merr := requiredName("vendor_attestation", req.VendorAttestation)
	if merr != nil {
		httpjson.WriteError(w, apiError(http.StatusBadRequest, merr.code, merr.desc))
		return
	}
	clientID := r.PathValue("id")
	c, err := reg.cfg.Store.BindVendorAttestation(actorCtx(r.Context(), sess), sess.Tenant, clientID, att, sess.PersonID)
	if err != nil {
		httpjson.WriteError(w, reg.storeAPIError(r.Context(), "binding the attestation", err))
		return
	}
	reg.log.InfoContext(r.Context(), "vendor attestation bound", "tenant", c.Tenant, "client_id", c.ID, "by", sess.PersonID)
	httpjson.Write(w, http.StatusOK, adminView(c, "", ""))
}
