// Package alpwire is alp-wire/v1, the format brokers exchange when they
// federate: the signed envelope one broker sends another, the signed
// Authorization header on every federation request, the discovery
// documents (a domain's DomainDoc naming its home broker, a broker's signed
// BrokerKeys) and the receiver's signed answers (Accepted, ReceiptNotice).
//
// Other brokers and tools must reproduce these bytes, so the rules are few
// and exact (docs/federation.md, spec/vectors/wire/):
//
//   - Every object is one JSON object in UTF-8 without duplicate keys; the
//     only numbers are integers within ±(2^53−1) (no fraction, no exponent,
//     no -0), so every implementation reads the same values; unknown fields
//     are refused, so a field a receiver does not understand is never
//     silently covered by a signature it trusts.
//   - A signature covers context + "\n" + RFC 8785 (JCS) of the object
//     without its "signatures" member, where context names the kind of object
//     (CtxEnvelope, ...), so a signature made for one kind never verifies as
//     another. Verification recomputes that from the exact received bytes
//     (the raw object with its "signatures" member cut out), never from a Go
//     struct marshalled again, so what was checked is what was received.
//   - Signatures are Ed25519, base64url without padding, in a Matrix-style
//     map {"<broker name>": {"ed25519:<key id>": "<sig>"}}.
//
// Every parse problem is an *Error with a stable Code and a JSON pointer.
package alpwire
