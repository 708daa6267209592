// Package clientreg is how agents' OAuth clients and credentials come to
// exist in a broker (ARCHITECTURE.md §7, federation.md §4): dynamic client
// registration for consumer agents, Client ID Metadata Documents, an
// organization admin's registration of company clients and vendor
// attestations, and people's personal access tokens for REST-only agents.
// Everything is recorded in internal/identitystore; this package holds the
// HTTP surfaces and the rules.
//
// # Trust class
//
// The trust class comes from the credential, never from what an agent
// claims (identitystore.Client.Class): dynamic registration and metadata
// documents only ever create public clients (consumer class); only a signed-in
// admin of the tenant registers confidential clients (company class) or binds
// a vendor attestation to a public client.
//
// # Dynamic client registration (RFC 7591)
//
// [Registrar.DCRHandler] serves POST /oauth/<tenant>/register. Public
// clients only (token_endpoint_auth_method "none" or absent), redirect URIs
// https or loopback http (RFC 8252 native apps: 127.0.0.1, [::1], localhost)
// without fragments or user information, grant types within
// authorization_code and refresh_token, response type code. Requests are
// limited per remote IP (IPv6 per /64) with a token bucket; the key comes
// from the connection's address unless Config.ClientIP says otherwise (set
// it only behind a proxy you trust). Anything that is not an address shares
// one key. The limiter tracks at most DCRLimiterCapacity addresses; beyond,
// the least recently seen is forgotten, so a flood of addresses makes it
// lenient rather than refusing everyone. The client gets a random id and no
// registration access token (no RFC 7592 management).
//
// Anyone can register, and every replica keeps every client in memory, so
// the clients nobody has used yet are bounded: MaxUnusedDynamicClients over
// all tenants, MaxUnusedDynamicClientsPerTenant per tenant (503
// temporarily_unavailable at the bound). A client's first authorization
// marks it used (identitystore.MarkClientUsed, one event per client); the
// identity service expires those never used (identitystore's
// DynamicClientExpired).
//
// # Client ID Metadata Documents
//
// [CIMDSource] is the authorization server's [ClientSource]: a client id that
// is an https URL is fetched (no redirects, size and time limits, JSON only),
// must name itself as client_id and carry valid redirect URIs, and is
// registered as a PUBLIC_CIMD client on first use. The fetch dials only public
// addresses: the host is resolved once, every address must be public, and the
// connection goes to a checked address (no DNS rebinding between check and
// dial; no proxy). Documents are cached for CacheTTL.
//
// identitystore cannot update a registered client, so the first registration
// of a metadata document stays: a later document whose redirect URIs differ is
// refused (ErrInvalidClientMetadata) until an operator deals with it. A
// changed client_name is ignored (the stored name is returned). Once the
// cached copy is older than CacheTTL, a document that cannot be fetched fails
// the lookup (fail closed), even for a registered client.
//
// # Admin registration
//
// [Registrar.AdminHandler] serves POST /v1/admin/clients and
// POST /v1/admin/clients/{id}/attestation for a signed-in person whose
// session roles include Config.AdminRole, with a valid CSRF token. A
// confidential client gets a random secret "alpcs_<base64url of 32 bytes>"
// shown once; only its SHA-256 goes on the identity stream.
//
// # Personal access tokens
//
// [Registrar.PATHandler] serves POST, GET /v1/pats and DELETE /v1/pats/{id}
// for the signed-in person. Presented tokens are checked by
// agentauth.PATVerifier, which every service that authenticates agents
// links.
//
// identitystore has no query for "the PATs of a person", so listing uses a
// [PATLister]; [StreamPATLister] asks JetStream for the tenant's PAT subjects
// on the identity stream (alp.identity.<tenant>.pat.<id>) and reads each from
// the store's projection. That costs one stream-info request and is linear in
// the tenant's PATs; identitystore could index them by person later, behind
// the same interface.
package clientreg
