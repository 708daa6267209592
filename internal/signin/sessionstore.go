package signin

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// SessionStore is the server's record of web sessions. The cookie says who
// the session is for; the record says that it still exists. A cookie is
// honored only while its record does, so signing out (DeleteSession) and
// an operator's revocation end a session everywhere, including copies of
// its cookie.
type SessionStore interface {
	// CreateSession records a new session.
	CreateSession(ctx context.Context, s *Session) error
	// CheckSession is nil while the session may be used. It wraps
	// ErrSessionRevoked when the session was signed out, revoked or never
	// recorded; any other error means it could not be checked (the
	// request is refused as temporarily unavailable: fail closed).
	CheckSession(ctx context.Context, s *Session) error
	// DeleteSession ends the session. Ending an ended session is no error.
	DeleteSession(ctx context.Context, s *Session) error
}

// ErrSessionRevoked: the session was signed out or revoked.
var ErrSessionRevoked = errors.New("signin: the session was signed out or revoked")

// SessionsBucketConfig is the KV bucket of KVSessions named name: one value
// per key, no history, file storage (sessions outlive a restart), and a
// TTL of sessionTTL plus a minute, so records go away with their cookies.
func SessionsBucketConfig(name string, sessionTTL time.Duration, replicas int) jetstream.KeyValueConfig {
	if sessionTTL <= 0 {
		sessionTTL = DefaultSessionTTL
	}
	return jetstream.KeyValueConfig{
		Bucket:      name,
		Description: "Web sessions of people (internal/signin): a cookie is honored while its record exists",
		History:     1,
		TTL:         sessionTTL + time.Minute,
		Storage:     jetstream.FileStorage,
		Replicas:    max(replicas, 1),
	}
}

// KVSessions keeps session records in a JetStream KV bucket (see
// SessionsBucketConfig), shared by every replica. A record is keyed
// "<tenant>.<hash of the session id>" and holds the person id and the
// session's times, no cookie and no address.
type KVSessions struct {
	KV jetstream.KeyValue
	// Valid, when set, is asked too on every check, e.g. whether the
	// person was erased or an operator revoked all their sessions. An
	// error it returns wraps ErrSessionRevoked when the session must end.
	Valid func(ctx context.Context, tenant, personID string, issued time.Time) error
}

type sessionRecord struct {
	Format   int       `json:"format"`
	PersonID string    `json:"person_id"`
	Issued   time.Time `json:"issued"`
	Expires  time.Time `json:"expires"`
}

// recordKey names a session's record by a hash of its id: the bucket
// holds nothing a cookie could be rebuilt from.
func recordKey(s *Session) string {
	h := sha256.Sum256([]byte("alpd/signin/session/v1\x00" + s.Tenant + "\x00" + s.ID))
	return s.Tenant + "." + hex.EncodeToString(h[:20])
}

// CreateSession implements SessionStore.
func (k KVSessions) CreateSession(ctx context.Context, s *Session) error {
	v, err := json.Marshal(sessionRecord{Format: 1, PersonID: s.PersonID, Issued: s.Issued, Expires: s.Expires})
	if err != nil {
		return err
	}
	if _, err := k.KV.Create(ctx, recordKey(s), v); err != nil {
		return fmt.Errorf("signin: record the session: %w", err)
	}
	return nil
}

// CheckSession implements SessionStore.
func (k KVSessions) CheckSession(ctx context.Context, s *Session) error {
	e, err := k.KV.Get(ctx, recordKey(s))
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return ErrSessionRevoked
	}
	if err != nil {
		return fmt.Errorf("signin: read the session's record: %w", err)
	}
	var r sessionRecord
	if err := json.Unmarshal(e.Value(), &r); err != nil || r.Format != 1 {
		return fmt.Errorf("signin: the session's record is malformed")
	}
	if r.PersonID != s.PersonID || !r.Issued.Equal(s.Issued) {
		return fmt.Errorf("%w: the record is another session's", ErrSessionRevoked)
	}
	if k.Valid != nil {
		return k.Valid(ctx, s.Tenant, s.PersonID, s.Issued)
	}
	return nil
}

// DeleteSession implements SessionStore. The purge drops the record at
// once on every replica.
func (k KVSessions) DeleteSession(ctx context.Context, s *Session) error {
	if err := k.KV.Purge(ctx, recordKey(s)); err != nil {
		return fmt.Errorf("signin: delete the session's record: %w", err)
	}
	return nil
}
