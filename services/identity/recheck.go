package identity

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	alpv1 "github.com/alpd-project/alpd/gen/alp/v1"
	"github.com/alpd-project/alpd/internal/signin"
	"github.com/alpd-project/alpd/internal/streams"
	"github.com/alpd-project/alpd/services/identity/oauthas"
)

// idpGrantRecord is the sealed plaintext of an idp_token_stored event: the
// person's IdP grant and when the IdP last vouched for them.
type idpGrantRecord struct {
	RefreshToken string `json:"rt"`
	Nonce        string `json:"n,omitempty"`
	Subject      string `json:"s,omitempty"`
	// Confirmed is the sign-in or the last successful re-check. The grace
	// period runs from it rather than from the event's time, because a
	// rotated refresh token is stored after a failed re-check too.
	Confirmed time.Time `json:"c"`
}

// idpGrantPrefix starts a sealed idpGrantRecord. Events written before
// records existed seal the bare refresh token, which never starts with a
// NUL byte (RFC 6749 §A.17: printable ASCII).
const idpGrantPrefix = "\x00alpd-idp-grant/v1\n"

func (g idpGrantRecord) grant() signin.IdPGrant {
	return signin.IdPGrant{RefreshToken: g.RefreshToken, Nonce: g.Nonce, Subject: g.Subject}
}

// refreshKeeper stores people's IdP grants sealed with their data key, so
// erasing a person makes the refresh token (and the nonce) unreadable.
type refreshKeeper struct{ s *Service }

// KeepRefreshToken implements signin.RefreshKeeper: a sign-in's grant,
// confirmed now.
func (k refreshKeeper) KeepRefreshToken(ctx context.Context, tenant, personID string, grant signin.IdPGrant) error {
	return k.keep(ctx, tenant, personID, idpGrantRecord{
		RefreshToken: grant.RefreshToken, Nonce: grant.Nonce, Subject: grant.Subject, Confirmed: time.Now().UTC(),
	})
}

func (k refreshKeeper) keep(ctx context.Context, tenant, personID string, rec idpGrantRecord) error {
	s := k.s
	subject, err := streams.IdentitySubject(tenant, streams.IdentityIdPToken, personID)
	if err != nil {
		return err
	}
	body, err := json.Marshal(rec)
	if err != nil {
		return fmt.Errorf("identity: encode IdP grant: %w", err)
	}
	ev := s.NewEvent("idp_token_stored", tenant, nil, personID, nil)
	sealed, err := s.Sealer.Seal(ctx, tenant, personID, append([]byte(idpGrantPrefix), body...), []byte(ev.GetHeader().GetEventId()))
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
// IdP has not vouched for them for longer than the grace period. It is the
// authorization server's sentinel, which revokes the person's agents.
var ErrPersonDisabled = oauthas.ErrPersonDisabled

// ErrRecheckUnavailable: the IdP could not be asked, within the grace period.
var ErrRecheckUnavailable = errors.New("identity: the person's IdP is unavailable")

// Rechecker asks a person's IdP, with their sealed refresh token, whether
// they are still vouched for.
//
//   - The IdP refreshes (and its ID token, if any, checks out): yes; the
//     rotated refresh token is stored and the grace period starts again.
//   - The IdP refuses with an OAuth error that is not transient
//     (invalid_grant, invalid_request, invalid_client, …): no; the caller
//     revokes the person's agents and the person must sign in again.
//   - Anything else (IdP unreachable, 5xx, 429, temporarily_unavailable,
//     server_error, or a refreshed ID token that fails its checks): the last
//     good answer stands for Grace, then it fails closed. A refresh token
//     the IdP rotated meanwhile is stored all the same.
//
// Every failed re-check is logged with why, within the grace period too.
type Rechecker struct {
	s      *Service
	signin *signin.Service
	Grace  time.Duration
	mu     sync.Mutex
	// per person: serialization of refreshes (IdPs rotate refresh tokens:
	// two concurrent uses would look like reuse) and the failed re-checks
	// in a row, as seen by this replica.
	people map[string]*recheckState
}

type recheckState struct {
	sync.Mutex
	failures int
}

func (r *Rechecker) state(tenant, personID string) *recheckState {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.people == nil {
		r.people = map[string]*recheckState{}
	}
	st, ok := r.people[tenant+"/"+personID]
	if !ok {
		st = &recheckState{}
		r.people[tenant+"/"+personID] = st
	}
	return st
}

// load reads and opens the person's kept grant; nil when none is kept.
func (r *Rechecker) load(ctx context.Context, tenant, personID string) (*idpGrantRecord, error) {
	s := r.s
	subject, err := streams.IdentitySubject(tenant, streams.IdentityIdPToken, personID)
	if err != nil {
		return nil, err
	}
	ev, err := s.last(ctx, subject)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrRecheckUnavailable, err)
	}
	if ev == nil {
		return nil, nil
	}
	plain, err := s.Sealer.Open(ctx, ev.GetIdpTokenStored().GetSealed(), []byte(ev.GetHeader().GetEventId()))
	if err != nil {
		return nil, fmt.Errorf("%w: the kept IdP token cannot be opened: %v", ErrPersonDisabled, err)
	}
	body, ok := bytes.CutPrefix(plain, []byte(idpGrantPrefix))
	if !ok {
		// A bare refresh token, kept before grants were records.
		return &idpGrantRecord{RefreshToken: string(plain), Confirmed: ev.GetHeader().GetOccurred().AsTime()}, nil
	}
	var rec idpGrantRecord
	if err := json.Unmarshal(body, &rec); err != nil {
		return nil, fmt.Errorf("%w: the kept IdP grant is unreadable: %v", ErrPersonDisabled, err)
	}
	return &rec, nil
}

// Recheck implements the authorization server's re-check on every agent
// refresh.
func (r *Rechecker) Recheck(ctx context.Context, tenant, personID string) error {
	st := r.state(tenant, personID)
	st.Lock()
	defer st.Unlock()

	rec, err := r.load(ctx, tenant, personID)
	if err != nil {
		return err
	}
	if rec == nil {
		return fmt.Errorf("%w: no IdP refresh token is kept for this person", ErrPersonDisabled)
	}
	log := r.s.Logger.With("tenant", tenant, "person_id", personID, "issuer", r.signin.Issuer(tenant))

	next, err := r.signin.Refresh(ctx, tenant, rec.grant())
	if err == nil {
		if st.failures > 0 {
			log.InfoContext(ctx, "identity: re-check with the IdP succeeded again", "failed_attempts", st.failures)
		}
		st.failures = 0
		confirmed := *rec
		confirmed.RefreshToken, confirmed.Nonce, confirmed.Subject = next.RefreshToken, next.Nonce, next.Subject
		confirmed.Confirmed = time.Now().UTC()
		return refreshKeeper{r.s}.keep(ctx, tenant, personID, confirmed)
	}

	st.failures++
	code := ""
	if re := (*signin.RefreshError)(nil); errors.As(err, &re) {
		code = re.Code
	}
	if errors.Is(err, signin.ErrIdPRefused) {
		log.WarnContext(ctx, "identity: the IdP refused the person's refresh token; they must sign in again",
			"error_code", code, "attempt", st.failures, "err", err)
		return fmt.Errorf("%w: %v", ErrPersonDisabled, err)
	}

	// The IdP may have rotated the token even though this re-check failed
	// (its new ID token did not check out): the old one is spent now.
	if next.RefreshToken != "" && next.RefreshToken != rec.RefreshToken {
		kept := *rec
		kept.RefreshToken, kept.Nonce, kept.Subject = next.RefreshToken, next.Nonce, next.Subject
		if kerr := (refreshKeeper{r.s}).keep(ctx, tenant, personID, kept); kerr != nil {
			log.ErrorContext(ctx, "identity: storing the IdP's rotated refresh token after a failed re-check", "err", kerr)
		}
	}
	since := time.Since(rec.Confirmed)
	within := since <= r.Grace
	level := slog.LevelWarn
	if !within {
		level = slog.LevelError
	}
	log.Log(ctx, level, "identity: re-check with the IdP failed",
		"error_code", code, "attempt", st.failures, "within_grace", within,
		"confirmed", rec.Confirmed.UTC().Format(time.RFC3339), "grace", r.Grace.String(), "err", err)
	if !within {
		return fmt.Errorf("%w: the IdP has not confirmed the person since %s (grace %s): %v",
			ErrPersonDisabled, rec.Confirmed.UTC().Format(time.RFC3339), r.Grace, err)
	}
	return nil // within the grace period the last good answer stands
}
