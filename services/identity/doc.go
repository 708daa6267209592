// Package identity owns who is who: people, agents, OAuth clients, tokens,
// revocations and the broker's keys. It provisions the per-tenant broker keys
// in the KeyStore at start-up, publishes their public halves and lifecycle on
// the identity stream (private keys never go on the bus), erases a person's
// data key (crypto-shredding), signs people in, runs the agents' OAuth 2.1
// authorization server and answers Introspect.
//
// # What it links
//
// Only the identity process runs these (they live under services/identity):
//
//   - oauthas: the agents' OAuth 2.1 authorization server per tenant and its
//     consent page.
//   - clientreg: dynamic client registration, Client ID Metadata Documents,
//     admin company clients, the PAT endpoints.
//
// Shared with other services, so they stay in internal/:
//
//   - internal/identitystore: the event-sourced identity state every service
//     that checks agents' credentials follows.
//   - internal/accesstoken: the access-token format (identity issues, every
//     agent-facing service verifies) and the PAT format.
//   - internal/agentauth: bearer credentials (access tokens, PATs) to the
//     person and agent they prove, for ingress and the ledger API.
//   - internal/signin: people's OIDC sign-in and sessions, which the ledger
//     API's person routes check too.
//   - internal/testidp: the in-process OpenID provider of tests and the demo
//     (the daemon starts it).
//
// # What it exports to the broker
//
// The services that verify agents' tokens run in other processes, yet must
// name the same issuer and resource metadata identity serves: [IssuerURL],
// [Issuers] and [ResourceMetadataPath] are that contract, so the broker wires
// them without reaching into oauthas.
package identity
