// Package keystore holds a broker's private and secret keys, separately per
// tenant (a domain) and per purpose, and is the only place they exist.
//
// Why: ALP brokers prove who sent a message by signing it, and make personal
// data erasable by sealing it. Both promises fail the moment a private key or
// a key-encryption key leaks onto the bus, into a log or into another
// tenant's hands. So keys live behind the [KeyStore] interface, which never
// hands key material out:
//
//   - Asymmetric purposes (FEDERATION, LEDGER, TOKEN) hold Ed25519 keys. The
//     store gives out a [crypto.Signer] that signs only while its key is
//     ACTIVE, and the public key (in [KeyInfo]).
//   - Symmetric purposes (COOKIE, DATA) hold 32-byte AES-256 keys that are
//     only ever used inside the store, through [KeyStore.Wrap] and
//     [KeyStore.Unwrap] (AES-256-GCM with a random nonce). DATA is the
//     tenant's key-encryption key for the per-person data keys of package
//     seal.
//
// Key lifecycle: a key is created ACTIVE (at most one ACTIVE key per tenant
// and purpose); [KeyStore.Rotate] makes a new ACTIVE key and RETIRES the old
// one, which is kept so that it still verifies (its public key stays listed)
// and still unwraps what it wrapped, but it can no longer sign or wrap
// anything new. REVOKED means compromised: the key is kept for reference, with
// the instant from which it must be distrusted, but it neither signs nor
// unwraps. Every change of state is saved durably first and then reported
// to an optional [Observer] as an [alpv1.KeyLifecycle] event carrying public
// data only, so the identity service can publish it on the bus.
//
// Backends: [OpenFile] keeps everything in one file of mode 0600 whose whole
// content is sealed with AES-256-GCM under a 32-byte key-encryption key (KEK)
// given by the operator ([ParseKEK], [GenerateKEK]); it is the embedded-mode
// backend. Several processes may share one file, as alpd's split mode does
// (every service process opens the same file; identity generates and rotates,
// the others sign and wrap): every change is made under an advisory lock on
// "<path>.lock" to the file as re-read under that lock, and every read first
// reloads the file if it changed on disk (a stat when it did not), so each
// store sees the keys the others made, and no change is lost. A file that
// cannot be reloaded (damaged, another KEK) makes reads fail closed. The
// limits: the lock is advisory (flock) and needs a local file system or one
// that supports flock across hosts, and it is a no-op where flock does not
// exist (Windows); see [FileStore]. For brokers spread over several hosts,
// e.g. on Kubernetes, the production answer is an enterprise backend, not a
// key file on a shared volume. [NewMemory] keeps keys in memory only, for
// tests and throw-away brokers. Enterprise backends (PKCS#11, cloud KMS,
// Vault Transit) are meant to implement the same interface.
//
// Every random byte a store generates comes from crypto/rand, or from the
// reader given to [WithRandom], which exists for tests and reproducible test
// provisioning only.
package keystore
