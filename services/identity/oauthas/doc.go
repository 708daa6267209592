// Package oauthas is the broker's OAuth 2.1 authorization server for agents
// (ARCHITECTURE.md §7, federation.md §4): agents get short-lived access
// tokens (internal/accesstoken) for a person of a tenant, through the
// authorization code flow with PKCE, and rotating refresh tokens.
//
// # One authorization server per tenant
//
// Each hosted tenant T has its own issuer, <PublicURL>/oauth/T, so that the
// tenant's token keys, its OAuth clients and its people's sign-in line up:
// a client registered under tenant A is unknown at tenant B's server, and a
// person signed in to A is sent to sign in to B. Server.Handler serves:
//
//	/oauth/T/authorize                                  authorization endpoint
//	/oauth/T/token                                      token endpoint (authorization_code, refresh_token)
//	/oauth/T/revoke                                     RFC 7009 revocation
//	/oauth/T/jwks                                       the tenant's token keys (ACTIVE and RETIRED)
//	/oauth/T/register                                   dynamic registration, when Deps.Registration is set
//	/oauth/T/.well-known/openid-configuration           the RFC 8414 document again (RFC 8414 §5)
//	/.well-known/oauth-authorization-server/oauth/T     RFC 8414 metadata (path-suffixed form)
//	/.well-known/oauth-protected-resource[<path>]       RFC 9728 metadata of each resource
//
// The token and revocation endpoints take POST with the parameters in the
// body only (a query string is refused, so secrets stay out of URLs); the
// authorization endpoint takes GET or POST.
//
// The protocol machinery is zitadel/oidc's op package through its Server
// API: op routes and parses requests and formats OAuth errors; every
// decision is made here. Everything this package does not implement
// (userinfo, introspection, end session, device flow, client credentials,
// token exchange, JWT bearer grant) answers as unsupported.
//
// # Authorization requests
//
// Rules, in the order they are applied:
//   - The client must exist in this tenant (Deps.Clients) and redirect_uri
//     must equal one of its registered redirect URIs, character for
//     character. Failures here are answered with an error page (a JSON OAuth
//     error, status 400), never a redirect.
//   - Everything else fails with a redirect to the redirect URI carrying
//     error, error_description, state and iss (RFC 9207): response_type must
//     be "code" (unsupported_response_type otherwise), response_mode absent
//     or "query", PKCE with code_challenge_method=S256 and a well-formed
//     challenge (missing or plain: invalid_request), exactly one resource
//     parameter naming one of Config.Resources (invalid_target otherwise,
//     RFC 8707), scopes from Config.Scopes (invalid_scope otherwise;
//     Config.DefaultScopes when none is asked for), no request objects.
//   - The browser must carry a sign-in session (internal/signin) of a person
//     of this tenant; otherwise it is sent to sign in and come back to the
//     same authorization request (a login_hint is passed on), or, with
//     prompt=none, login_required is answered.
//
// The answer is a one-time authorization code ("alpac_" + 256 random bits)
// in the query, with state and iss.
//
// # Authorization codes
//
// Codes live in a JetStream KV bucket shared by all replicas (Deps.Codes,
// see CodesBucketConfig), keyed by the SHA-256 of the code; the entry holds
// the client, redirect URI, code challenge, resource, scopes, person and
// times, never the code. One-time use is a compare-and-set on the entry's
// revision (issued → consumed → used, with the grant id), so of two racing
// exchanges exactly one wins, and a reused code fails (invalid_grant) and
// revokes the grant issued from it (RFC 6749 §4.1.2), even when the reuse
// races the first exchange. (A revision-checked delete would enforce one-time
// use as well, but would forget the code, so a later reuse could neither be
// recognised nor revoke the grant.) A code is exchangeable for Config.CodeTTL
// (its entry says until when); the bucket's TTL, DefaultCodesRetention, is
// how long a spent code is remembered.
//
// # Clients
//
// Public clients (identitystore kinds PUBLIC_DCR, PUBLIC_CIMD,
// PUBLIC_VENDOR) use token endpoint authentication "none" and are refused
// if they send a secret. Confidential clients must authenticate, with
// client_secret_basic or client_secret_post (compared as SHA-256 with
// identitystore.Hash.Equal, in constant time) or private_key_jwt (RFC 7523:
// an assertion signed by a key of the client's registered JWK Set, iss =
// sub = client id, aud = the issuer or the token endpoint, at most 5 minutes
// of life, a jti used once — remembered in the code bucket). Clients that
// registered only a jwks_uri cannot use private_key_jwt yet.
//
// # Grants, trust class and tokens
//
// A successful code exchange issues an identitystore grant for (person,
// client, agent), where the agent id is derived from (tenant, person,
// client) (see AgentID): the same agent each time a person authorizes the
// same client, a new grant each time. The trust class is company only when
// the client is of this tenant (hence of the person's tenant) and either
// confidential and authenticated on this request, or carries a vendor
// attestation; otherwise consumer. Nothing the agent says counts.
//
// The access token is an accesstoken at+jwt for the authorized resource
// (aud), Config.AccessTokenTTL long (default 5 minutes, at most 10), signed
// with the tenant's TOKEN key. The refresh token is "alprt_" + 256 random
// bits; only its SHA-256 is stored. A refresh must present the grant's
// current refresh token from the same client; a spent one is reuse and
// revokes the grant (identitystore.RotateRefresh). Before rotating, the
// person is re-checked with their IdP (Deps.Recheck): disabled
// (ErrPersonDisabled or signin.ErrIdPRefused) revokes all of the person's
// agents and answers invalid_grant; any other failure answers
// temporarily_unavailable (status 503).
//
// # Errors and logs
//
// Error descriptions never contain tokens, codes, secrets or request
// values, and neither do this package's logs. op logs through
// slog.Default (route registration, and every OAuth error with its
// description).
package oauthas
