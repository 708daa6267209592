// Package accesstoken is the format, minting and local verification of the
// OAuth 2.1 access tokens that alpd's authorization server gives to agents,
// and of the personal access tokens (PATs) of REST-only agents.
//
// Why: ingress checks a token on every agent request, so verification has to
// be local (no call to the authorization server) and cheap, and it has to be
// strict, because an access token is the whole of an agent's authority.
// ARCHITECTURE.md §7 and the MCP authorization rules (federation.md §4) ask
// for:
//
//   - Audience binding (RFC 8707 resource indicators): a token names exactly
//     one resource, and the [Verifier] accepts only tokens for its own
//     [Verifier.Resource]; tokens minted for another resource are rejected,
//     never passed through.
//   - Short lives: at most [MaxLifetime] (10 minutes), enforced when minting
//     and again when verifying, which bounds how long a revocation that the
//     revocation projection has not seen yet can be ignored.
//   - Keys that never leave the key store: tokens are signed with the
//     tenant's ACTIVE KEY_PURPOSE_TOKEN Ed25519 key through the store's
//     crypto.Signer. Tokens signed by a key that was since RETIRED still
//     verify (they expire within minutes); tokens signed by a REVOKED key
//     never do, whatever their iat says, since whoever holds a compromised
//     key can write any iat.
//   - Fail closed: if the revocation projection is staler than
//     [Verifier.MaxStaleness], no token is accepted ([ErrStale],
//     "temporarily_unavailable").
//
// # Token format
//
// A JWT in compact JWS form, RFC 9068 shape: protected header
// {"alg":"EdDSA","kid":<key id>,"typ":"at+jwt"}; claims iss, sub (opaque
// person id), aud (one string), exp, iat, jti, client_id, scope
// (space-separated, omitted when empty) and the private claims tenant,
// agent, grant and class ("company" or "consumer"). Only EdDSA is accepted:
// "none", HMAC, RSA and ECDSA tokens are refused before any key is looked at,
// so there is no algorithm confusion. Times are whole seconds.
//
// # Errors
//
// Verify and [RequireScopes] return *[Error], whose Code is the RFC 6750
// error code ("invalid_token", "insufficient_scope") or
// "temporarily_unavailable" / "server_error", and which matches one sentinel
// with errors.Is ([ErrExpired], [ErrWrongAudience], ...).
// [Error.WWWAuthenticate] builds the RFC 6750 / RFC 9728 challenge. Neither
// errors nor descriptions ever contain the token or any part of it, nor
// values taken from a token whose signature did not verify; the package does
// not log.
//
// # Personal access tokens
//
// [NewPAT] makes "alppat_<id>_<secret>"; the broker shows the token once and
// stores only the id and the SHA-256 of the token. [ParsePAT] checks the
// format of a presented token and returns the id to look up and the hash to
// compare with [PATHashEqual].
package accesstoken
