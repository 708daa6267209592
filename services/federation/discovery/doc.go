// Package discovery finds a domain's home broker and that broker's keys, and
// serves this broker's own discovery documents.
//
// The client side is [Resolver]: [Resolver.HomeBroker] reads
// https://<domain>/.well-known/alp (alpwire.DomainDoc) and
// [Resolver.BrokerKeys] reads <broker_url>/.well-known/alp/broker
// (alpwire.BrokerKeys, self-signed). Both are cached as Matrix caches its
// server discovery: Cache-Control and the document's own max_age are
// honoured (the shorter wins), 24 h when neither says, never more than 48 h;
// a failure is cached too, first for a minute and twice as long at each
// failure in a row, up to an hour, so a broken or hostile domain costs one
// request per backoff period however many messages name it. Concurrent
// lookups of one name share one request.
//
// Everything fetched here comes from an address a stranger chose (an
// envelope's sender domain), so the fetch is fenced: HTTPS only (plain HTTP
// only with Config.AllowPlainHTTPLoopback, and then only to a loopback
// target), no redirect off the host (three on it at most), a size and a
// time limit, no proxy from the environment, and a guard at dial time that
// refuses private, loopback, link-local, multicast and unspecified
// addresses (checked on the address actually dialled, after DNS, so a name
// that resolves to 10.0.0.1 or rebinds between two lookups is still
// refused). Config.Resolve pins names to loopback addresses for tests and
// the federation harness, like curl --resolve; TLS still verifies the
// original name.
//
// Every failure is an [*Error] with a stable code (CodeUnreachable, …).
//
// The serving side is [Publisher]: the DomainDoc of each hosted tenant and
// the signed BrokerKeys built from the KeyStore.
package discovery
