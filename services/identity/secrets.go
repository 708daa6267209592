package identity

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"sync"
	"time"

	alpv1 "github.com/alpd-project/alpd/gen/alp/v1"
	"github.com/alpd-project/alpd/internal/bus"
	"github.com/alpd-project/alpd/internal/oauthas"
	"github.com/alpd-project/alpd/internal/signin"
	"github.com/alpd-project/alpd/internal/streams"
)

// sealedSecret returns the broker secret name of tenant, creating it on
// first use: random bytes wrapped by the tenant's key of purpose and stored
// on the identity stream. The append expects an empty subject, so when
// replicas race the first one wins and the others read it.
func (s *Service) sealedSecret(ctx context.Context, tenant, name string, purpose alpv1.KeyPurpose, size int) ([]byte, error) {
	subject, err := bus.Subject(streams.Identity, tenant, "secret", name)
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

// refreshKeeper stores people's IdP refresh tokens sealed with their data
// key, so erasing a person makes the token unreadable.
type refreshKeeper struct{ s *Service }

// KeepRefreshToken implements signin.RefreshKeeper.
func (k refreshKeeper) KeepRefreshToken(ctx context.Context, tenant, personID, token string) error {
	s := k.s
	subject, err := bus.Subject(streams.Identity, tenant, "idptoken", personID)
	if err != nil {
		return err
	}
	ev := s.NewEvent("idp_token_stored", tenant, nil, personID, nil)
	sealed, err := s.Sealer.Seal(ctx, tenant, personID, []byte(token), []byte(ev.GetHeader().GetEventId()))
	if err != nil {
		return fmt.Errorf("identity: seal IdP token: %w", err)
	}
	ev.Body = &alpv1.Event_IdpTokenStored{IdpTokenStored: &alpv1.IdpTokenStored{Tenant: tenant, PersonId: personID, Sealed: sealed}}
	if _, err := s.Bus.Publish(ctx, subject, ev); err != nil {
		return fmt.Errorf("identity: store IdP token: %w", err)
	}
	return nil
}

// ErrPersonDisabled: the person's IdP refused their refresh token, or the
// IdP has been unreachable for longer than the grace period. It is the
// authorization server's sentinel, which revokes the person's agents.
var ErrPersonDisabled = oauthas.ErrPersonDisabled

// ErrRecheckUnavailable: the IdP could not be asked, within the grace period.
var ErrRecheckUnavailable = errors.New("identity: the person's IdP is unavailable")

// Rechecker asks a person's IdP, with their sealed refresh token, whether
// they are still vouched for. invalid_grant means no: the caller revokes
// their agents. When the IdP is unreachable, the last good answer stands
// for Grace; after that it fails closed.
type Rechecker struct {
	s      *Service
	signin *signin.Service
	Grace  time.Duration
	mu     sync.Mutex
	// per person: last time the IdP said yes, and serialization of refreshes
	// (IdPs rotate refresh tokens: two concurrent uses would look like reuse).
	locks map[string]*sync.Mutex
}

// Recheck implements the authorization server's re-check on every agent
// refresh.
func (r *Rechecker) Recheck(ctx context.Context, tenant, personID string) error {
	r.mu.Lock()
	if r.locks == nil {
		r.locks = map[string]*sync.Mutex{}
	}
	l, ok := r.locks[tenant+"/"+personID]
	if !ok {
		l = &sync.Mutex{}
		r.locks[tenant+"/"+personID] = l
	}
	r.mu.Unlock()
	l.Lock()
	defer l.Unlock()

	s := r.s
	subject, err := bus.Subject(streams.Identity, tenant, "idptoken", personID)
	if err != nil {
		return err
	}
	ev, err := s.last(ctx, subject)
	if err != nil {
		return fmt.Errorf("%w: %v", ErrRecheckUnavailable, err)
	}
	if ev == nil {
		return fmt.Errorf("%w: no IdP refresh token is kept for this person", ErrPersonDisabled)
	}
	stored := ev.GetIdpTokenStored()
	token, err := s.Sealer.Open(ctx, stored.GetSealed(), []byte(ev.GetHeader().GetEventId()))
	if err != nil {
		return fmt.Errorf("%w: the kept IdP token cannot be opened: %v", ErrPersonDisabled, err)
	}
	next, err := r.signin.Refresh(ctx, tenant, string(token))
	switch {
	case errors.Is(err, signin.ErrIdPRefused):
		return fmt.Errorf("%w: %v", ErrPersonDisabled, err)
	case err != nil:
		lastGood := ev.GetHeader().GetOccurred().AsTime()
		if time.Since(lastGood) > r.Grace {
			return fmt.Errorf("%w: the IdP has not confirmed the person since %s (grace %s): %v",
				ErrPersonDisabled, lastGood.Format(time.RFC3339), r.Grace, err)
		}
		return nil // within the grace period the last good answer stands
	}
	return refreshKeeper{s}.KeepRefreshToken(ctx, tenant, personID, next)
}
