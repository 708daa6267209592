package discovery

import (
	"context"
	"crypto/ed25519"
	"time"

	"github.com/alpd-project/alpd/internal/alpwire"
)

// KeyResolver returns the alpwire.KeyResolver of brokers reached at
// brokerURL (the broker_url of the sender domain's DomainDoc, which the
// caller has already checked names the signer): it answers the key a
// broker published under keyID if alp-wire's rule (alpwire.BrokerKeys.Key)
// lets it verify something made at at, fetching the keys (cached, so
// never used past their CacheUntil) on ctx. A key id the cached keys do not hold triggers one
// Refresh (the broker may have rotated since), then the answer stands.
//
// Key-state refusals are *alpwire.Error with alpwire's codes (unknown_key,
// key_expired, key_revoked); failures to fetch are *Error.
func (r *Resolver) KeyResolver(ctx context.Context, brokerURL string) alpwire.KeyResolver {
	return func(broker, keyID string, at time.Time) (ed25519.PublicKey, error) {
		e, err := r.brokerKeys(ctx, brokerURL, broker)
		if err != nil {
			return nil, err
		}
		pub, err := e.val.Key(keyID, at)
		if alpwire.CodeOf(err) != alpwire.CodeUnknownKey {
			return pub, err
		}
		bk, rerr := r.Refresh(ctx, broker)
		if rerr != nil || bk == e.val {
			return nil, err
		}
		return bk.Key(keyID, at)
	}
}
