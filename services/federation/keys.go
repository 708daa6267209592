package federation

import (
	"context"
	"crypto"
	"crypto/ed25519"
	"fmt"

	alpv1 "github.com/alpd-project/alpd/gen/alp/v1"
	"github.com/alpd-project/alpd/internal/alpwire"
	"github.com/alpd-project/alpd/services/federation/discovery"
)

// brokerSigner is the broker's active federation key: the KeyStore's slot
// named by the broker name (not a tenant's: the broker signs for every
// domain it hosts), and its wire key id.
type brokerSigner struct {
	keyID  string
	signer crypto.Signer
}

// brokerKey returns the broker's active federation key (discovery's one
// definition of it), generating the first one.
func (s *Service) brokerKey(ctx context.Context) (brokerSigner, error) {
	info, err := discovery.BrokerKey(ctx, s.Keys, s.opts.BrokerName)
	if err != nil {
		return brokerSigner{}, fmt.Errorf("federation: %w", err)
	}
	signer, err := s.Keys.Signer(ctx, s.opts.BrokerName, alpv1.KeyPurpose_KEY_PURPOSE_FEDERATION, info.KeyID)
	if err != nil {
		return brokerSigner{}, fmt.Errorf("federation: the broker's federation key: %w", err)
	}
	pub, ok := signer.Public().(ed25519.PublicKey)
	if !ok {
		return brokerSigner{}, fmt.Errorf("federation: the broker's federation key %s is not Ed25519", info.KeyID)
	}
	return brokerSigner{keyID: alpwire.KeyID(pub), signer: signer}, nil
}
