// Package api lets a person read and prove their own ledger: the entries of
// their Merkle log, its latest signed checkpoint, inclusion and consistency
// proofs, and an export that `alpctl ledger verify` checks offline
// (ARCHITECTURE.md §9). It builds on storage.Reader and knows nothing of
// how logs are stored.
//
// # Whose ledger
//
// Always the caller's own: tenant and person come from the credential,
// never from the URL or the request. The credential is either an agent's
// bearer token of that person (an OAuth access token or a personal access
// token with scope alp.read, checked by agentauth against identity's
// revocations) or, where identity runs in the same process, the person's
// web session cookie — for GET only: reads need no CSRF protection, and a
// cookie never authorizes anything else. In split mode the ledger's
// processes see only bearer tokens.
//
// # Every read carries the latest checkpoint
//
// Readers keep the last checkpoint they saw and ask for consistency from
// it: that is where tamper-evidence comes from (a broker's signature alone
// proves nothing against its operator). So every successful answer holds
// the log's latest signed checkpoint — in the body and, over HTTP, in the
// Alp-Ledger-Checkpoint header (standard base64 of the signed note). A log
// whose newest entries are not signed yet still answers with the latest
// checkpoint; one with entries but no checkpoint at all answers 503
// checkpoint_pending for the fraction of a second until it is signed.
//
// # HTTP routes
//
//	GET  /v1/ledger                                head: origin, size, root, checkpoint, public keys
//	GET  /v1/ledger/entries?from=N&limit=M         a page of entries (limit 1..1000, default 100), next cursor
//	GET  /v1/ledger/proof/inclusion?index=I&size=S inclusion proof (size: default the checkpoint's)
//	GET  /v1/ledger/proof/consistency?from=A&to=B  consistency proof (to: default the checkpoint's)
//	POST /v1/ledger/proof/consistency              consistency from the signed checkpoint in the body (bearer only)
//	GET  /v1/ledger/export                         alp-ledger-export/v1 JSON Lines, streamed as a download
//
// Errors are problem details (httpjson) with the codes listed in
// errors.go, WWW-Authenticate on 401/403 and Retry-After on 429/503.
//
// The gRPC read methods of LedgerService (grpc.go) mirror these routes for
// services that act for a person; they take the person's bearer token in
// the "authorization" metadata.
//
// Every proof is checked against the log's own checkpoint before it is
// served; a checkpoint a reader sends that the log contradicts is answered
// 409 checkpoint_inconsistent and logged, never smoothed over.
package api
