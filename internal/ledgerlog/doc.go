// Package ledgerlog is the format and the mathematics of alpd's per-person
// ledger: what a leaf is, how a checkpoint is signed, what a receipt proves,
// and how an exported ledger is verified alone (Verify) or against a
// counterparty's (Match). It does no I/O of its own beyond the export
// reader/writer, so the ledger service, alpctl and tests share one definition.
//
// # Why a Merkle log and not a hash chain
//
// Each person's ledger is an RFC 6962 Merkle tree (golang.org/x/mod/sumdb/tlog):
// leaf hash SHA-256(0x00||leaf), node hash SHA-256(0x01||l||r). Proving that
// one entry is in the ledger, or that today's ledger extends yesterday's,
// costs O(log n) hashes; a hash chain would cost O(n). That matters for a
// person's client and for a counterparty who holds one receipt.
//
// # Leaves
//
// A leaf is the RFC 8785 (JCS) canonical JSON of an Entry. Canonical bytes
// make the leaf hash reproducible by anyone, in any language. Leaves hold
// decisions and salted commitments to envelope digests — never confidential
// values and never bare digests of bodies: a bare digest of a low-entropy
// body ("yes", a date) could be confirmed by guessing, and would survive an
// erasure request. The salt lives next to the leaf, outside the tree; erasing
// it leaves the tree intact and the commitment meaningless.
//
// # Checkpoints
//
// A checkpoint is a C2SP tlog-checkpoint body (origin, size, base64 root)
// signed as a C2SP signed note with the tenant's Ed25519 ledger key, which
// lives in a KeyStore and is used only through crypto.Signer. The origin of
// a person's log is "<tenant>/alp/ledger/<person>" and the key name is
// "<tenant>/alp/ledger": one key per tenant signs every person's log.
//
// # Receipts
//
// A receipt (type string "alp-receipt/v1") is a statement signed by the
// issuing broker's ledger key: "envelope E, with my commitment C, is leaf i
// of my log L, as of this signed checkpoint", plus the inclusion proof. The
// counterparty records it in its own ledger (a receipt.received entry), so
// each ledger holds a pointer into the other that an auditor can check.
//
// # Threat model in one paragraph
//
// A broker's signature on its own checkpoint proves nothing against the
// broker's operator, who holds the key. Tamper-evidence comes from
// checkpoints that others hold: the person's alpctl state, counterparties'
// receipts, and witnesses' cosignatures where there are witnesses. A rewritten history is then
// caught as a failed consistency proof from a checkpoint someone kept.
// docs/ledger.md has the long version.
package ledgerlog
