package identity

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"

	alpv1 "github.com/alpd-project/alpd/gen/alp/v1"
	"github.com/alpd-project/alpd/internal/bus"
	"github.com/alpd-project/alpd/internal/streams"
)

// sealedSecret returns the broker secret name of tenant, creating it on
// first use: random bytes wrapped by the tenant's key of purpose and stored
// on the identity stream. The append expects an empty subject, so when
// replicas race the first one wins and the others read it.
func (s *Service) sealedSecret(ctx context.Context, tenant, name string, purpose alpv1.KeyPurpose, size int) ([]byte, error) {
	subject, err := streams.IdentitySubject(tenant, streams.IdentitySecret, name)
	if err != nil {
		return nil, err
	}
	aad := []byte("alpd sealed secret\x00" + tenant + "\x00" + name)
	for range 3 {
		if wrapped, err := s.lastSecret(ctx, subject); err != nil {
			return nil, err
		} else if wrapped != nil {
			return s.Keys.Unwrap(ctx, tenant, purpose, wrapped, aad)
		}
		secret := make([]byte, size)
		if _, err := rand.Read(secret); err != nil {
			return nil, err
		}
		wrapped, err := s.Keys.Wrap(ctx, tenant, purpose, secret, aad)
		if err != nil {
			return nil, fmt.Errorf("identity: wrap %s: %w", name, err)
		}
		ev := s.NewEvent("sealed_secret_created", tenant, nil, name, nil)
		ev.Body = &alpv1.Event_SealedSecretCreated{SealedSecretCreated: &alpv1.SealedSecretCreated{
			Tenant: tenant, Name: name, Purpose: purpose, Wrapped: wrapped}}
		if _, err := s.Bus.Append(ctx, subject, 0, ev); errors.Is(err, bus.ErrConflict) {
			continue // another replica created it: read theirs
		} else if err != nil {
			return nil, fmt.Errorf("identity: store %s: %w", name, err)
		}
		return secret, nil
	}
	return nil, fmt.Errorf("identity: secret %s: too many conflicting writers", name)
}

func (s *Service) lastSecret(ctx context.Context, subject string) ([]byte, error) {
	ev, err := s.last(ctx, subject)
	if err != nil || ev == nil {
		return nil, err
	}
	return ev.GetSealedSecretCreated().GetWrapped(), nil
}

// last reads the newest event on an identity subject, nil when none.
func (s *Service) last(ctx context.Context, subject string) (*alpv1.Event, error) {
	m, err := s.Bus.LastMessage(ctx, subject)
	if err != nil || m == nil {
		return nil, err
	}
	ev, err := bus.Decode(m.Data)
	if err != nil {
		return nil, err
	}
	if err := streams.CheckProducer(subject, ev); err != nil {
		return nil, err
	}
	return ev, nil
}
