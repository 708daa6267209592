// Package alp holds ALP's basic values — tenants, addresses, person ids,
// the OAuth scope names and the admin role — with the one rule for each.
// Every package that takes one of them from outside (configuration, an
// IdP's claims, an agent's message, a key file, a sealed body, a ledger
// origin) checks it here, so a value one part of the broker accepts is
// never refused by another.
//
// It imports only the standard library: it is a leaf every other package
// may link.
//
// # Tenants
//
// A tenant is the domain an organization is known by ("example.org"). Its
// canonical form is a lowercase LDH DNS name:
//
//   - 1 to 253 bytes, labels separated by single dots (no leading, trailing
//     or double dot: the absolute form "example.org." is refused, not
//     trimmed);
//   - each label 1 to 63 bytes of a-z, 0-9 and '-', not starting or ending
//     with '-';
//   - the last label not all digits, so an IP address ("10.0.0.1") is
//     never mistaken for a domain;
//   - single-label names such as "localhost" are valid: a broker for a
//     test or a closed network may host one, and then its people
//     (ana@localhost) sign in and receive like anyone else's;
//   - internationalized names are written as A-labels ("xn--bcher-kva.example");
//     the package does not decode punycode, and a non-ASCII name is refused
//     with a hint to use its xn-- form.
//
// [ValidateTenant] checks a value that must already be canonical (stored
// state, configuration, wire formats); [ParseTenant] first folds ASCII
// upper case, for names a person typed or an IdP sent. Only ASCII is folded:
// Unicode case mapping would turn the Kelvin sign into "k".
//
// [Tenants] is the set of tenants one broker hosts.
//
// # Addresses
//
// An address names a person: "local@domain", written plainly or as an
// RFC 7565 acct: URI ("acct:ana@example.org"). The local part is an
// RFC 5322 dot-atom of at most 64 bytes (ASCII only: no quoting, comments or
// display names); the domain follows the tenant rule; the whole is at most
// 254 bytes. Addresses compare case-insensitively: the canonical form is
// lowercase, which [ParseAddress] returns and [NormalizeAddress] computes.
// [ValidateAddress] checks the plain form of a stored address: its domain
// must be canonical, its local part may keep the case it was written in.
//
// # Person ids
//
// A person id is the broker's opaque name for a person (alpd makes
// "p_" + 32 hex digits). It is 1 to 128 bytes of A-Z, a-z, 0-9, '_' and '-':
// one token of a NATS subject or KV key (no '.', '*', '>' or space), so
// "<tenant>.<person>" and "<tenant>/alp/ledger/<person>" split unambiguously,
// and safe in a file name. Ids are case-sensitive and have no other form, so
// there is nothing to parse: [ValidatePersonID] checks one, [ValidatePerson]
// a tenant and id together.
//
// # Scopes
//
// [ScopeSend] and [ScopeRead] are the OAuth scopes an agent's access token
// or personal access token may carry; [Scopes] lists them all. [AdminRole]
// is the session role of an organization's admin.
package alp
