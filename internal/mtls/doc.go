// Package mtls secures gRPC between alpd's services in split mode (one
// process per service): mutual TLS with the caller's service role carried in
// its certificate, and per-method authorization on the server.
//
// # Identity
//
// A service's role is a URI SAN in its certificate:
//
//	spiffe://alpd/role/<service>   ingress, identity, policy, federation, ledger, approvals
//	spiffe://alpd/role/operator    the operator's tools
//
// A certificate must carry exactly one such URI ([RoleFromCert]); other URI
// SANs (another SPIFFE trust domain, say) are ignored. Host names and IP
// addresses are ordinary DNS/IP SANs, checked by clients as usual. Every
// certificate is used both as a server and as a client certificate, so it
// needs both the serverAuth and clientAuth extended key usages.
//
// # Where certificates come from
//
// In production the certificates are files issued by the organisation's CA
// and read with [Files]: the CA bundle used to verify peers, the service's
// certificate (chain) and its private key. In Kubernetes, cert-manager issues
// them: one Certificate per role, whose secret is mounted into that service's
// pods, for example
//
//	apiVersion: cert-manager.io/v1
//	kind: Certificate
//	metadata: {name: alpd-policy}
//	spec:
//	  secretName: alpd-policy-tls
//	  issuerRef: {name: alpd-ca, kind: Issuer}
//	  uris: ["spiffe://alpd/role/policy"]
//	  dnsNames: ["alpd-policy", "alpd-policy.alpd.svc", "alpd-policy.alpd.svc.cluster.local"]
//	  usages: ["server auth", "client auth", "digital signature"]
//	  privateKey: {algorithm: ECDSA, size: 256, rotationPolicy: Always}
//	  duration: 2160h
//	  renewBefore: 360h
//
// with Files{CA: ".../ca.crt", Cert: ".../tls.crt", Key: ".../tls.key"}.
// cert-manager (and the kubelet) replace these files in place when a
// certificate is renewed; [ServerTLS] and [ClientTLS] notice the change (a
// stat of the three files at each handshake) and use the new certificate and
// CA for new connections, without a restart. Established connections keep
// the certificate they were opened with. A half-written rotation (a new
// certificate next to the old key) is not loaded: the previous, complete pair
// stays in use until the files are consistent again.
//
// For development and tests, [NewCA] creates a throw-away CA and [CA.Issue]
// issues role certificates from it; [WriteDevCerts] (behind `alpctl certs`)
// writes a CA and one certificate per role into a directory, laid out as
// [DevFiles] expects. A development CA's key sits unencrypted next to the
// certificates: never use it in production.
//
// # Authorization
//
// A [Policy] maps each full gRPC method name to the roles that may call it;
// [DefaultPolicy] is alpd's table (see [PolicyTable] for a Markdown
// rendering). [UnaryAuthorizer] and [StreamAuthorizer] enforce it: no
// verified alpd role is codes.Unauthenticated, a role the method does not
// allow (or a method with no entry: default deny) is codes.PermissionDenied.
// Handlers read the caller's role with [CallerRole].
//
// The authorizers need the peer's verified certificate, so they belong on
// servers whose transport credentials are [ServerCredentials]; an in-process,
// plaintext server (all-in-one mode) has no peer certificate and would
// refuse every call.
package mtls
