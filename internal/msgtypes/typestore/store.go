package typestore

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/google/uuid"
	"google.golang.org/protobuf/types/known/timestamppb"

	alpv1 "github.com/alpd-project/alpd/gen/alp/v1"
	"github.com/alpd-project/alpd/internal/alp"
	"github.com/alpd-project/alpd/internal/bus"
	"github.com/alpd-project/alpd/internal/msgtypes"
	"github.com/alpd-project/alpd/internal/projection"
	"github.com/alpd-project/alpd/internal/streams"
)

// maxAttempts bounds a registration's check–append rounds on conflicts.
const maxAttempts = 5

// Errors.
var (
	// ErrInvalid: an argument other than the type itself is malformed.
	ErrInvalid = errors.New("typestore: invalid argument")
	// ErrNotHosted: the tenant is not one of this store's.
	ErrNotHosted = errors.New("typestore: tenant not hosted")
)

func invalid(field, format string, args ...any) error {
	return fmt.Errorf("%w: %s: %s", ErrInvalid, field, fmt.Sprintf(format, args...))
}

// Store is a replica of the message types of some tenants: the built-ins
// and what the tenants registered. Safe for concurrent use.
type Store struct {
	b       *bus.Bus
	f       *projection.Follower
	log     *slog.Logger
	reg     *msgtypes.Registry // written only by apply, under f's lock
	tenants map[string]bool

	// beforeCommit, in tests, runs before each append (to make another
	// writer win a race).
	beforeCommit func(subject string)
}

// Open builds the registry of tenants' types from the policy stream of b's
// broker and keeps following the stream's type subjects until Close. The
// stream must exist (the policy service creates it).
func Open(ctx context.Context, b *bus.Bus, tenants []string, log *slog.Logger) (*Store, error) {
	if b == nil {
		return nil, invalid("bus", "nil")
	}
	if len(tenants) == 0 {
		return nil, invalid("tenants", "at least one is required")
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	reg, err := msgtypes.New()
	if err != nil {
		return nil, fmt.Errorf("typestore: %w", err)
	}
	s := &Store{b: b, log: log.With("component", "typestore"), reg: reg, tenants: map[string]bool{}}
	if err := alp.ValidateTenants(tenants); err != nil {
		return nil, invalid("tenants", "%v", err)
	}
	var filters []string
	for _, t := range tenants {
		s.tenants[t] = true
		filters = append(filters, streams.PolicyTypeFilter(t))
	}
	f, err := projection.Open(ctx, b, projection.Config{
		Stream: streams.Policy, Filters: filters, Apply: s.apply, Name: "typestore", Log: s.log,
	})
	if err != nil {
		return nil, fmt.Errorf("typestore: %w", err)
	}
	s.f = f
	return s, nil
}

// Close stops following the stream. The registry keeps answering with
// what it holds; Fresh and Register return projection.ErrClosed.
func (s *Store) Close() { s.f.Close() }

// Fresh returns nil only if the projection confirmed within maxStaleness
// that it had applied everything on the stream (see internal/projection),
// projection.ErrStale otherwise: a replica validating bodies against a
// stale registry may refuse a type registered meanwhile.
func (s *Store) Fresh(maxStaleness time.Duration) error { return s.f.Fresh(maxStaleness) }

// Applied is the stream sequence of the last event applied.
func (s *Store) Applied() uint64 { return s.f.Applied() }

// Registry is the replica's registry: the built-in types and every
// registration applied so far. Lookups need no lock.
func (s *Store) Registry() *msgtypes.Registry { return s.reg }

// Register registers tenant's type name with schema on behalf of by (an
// admin of the tenant or an operator: the event's actor) and answers it
// once this replica has applied it. Refusals are the registry's
// *msgtypes.RegistrationError (CodeTypeExists for a different schema under
// a registered name) and append nothing; the identical schema again
// answers the registered type without a second event.
func (s *Store) Register(ctx context.Context, tenant, name string, schema []byte, by *alpv1.Actor) (*msgtypes.Type, error) {
	if s.f.Closed() {
		return nil, projection.ErrClosed
	}
	if !s.tenants[tenant] {
		return nil, fmt.Errorf("%w: %q", ErrNotHosted, tenant)
	}
	if by.GetId() == "" || by.GetKind() == alpv1.ActorKind_ACTOR_KIND_UNSPECIFIED {
		return nil, invalid("by", "an actor with kind and id is required")
	}
	// Check validated the name, so it hashes to a well-formed token.
	subj, err := streams.PolicySubject(tenant, streams.PolicyType, streams.PolicyTypeID(name))
	if err != nil {
		return nil, fmt.Errorf("typestore: %w", err)
	}
	for attempt := 1; ; attempt++ {
		s.f.RLock()
		version := s.f.Version(subj)
		t, err := s.reg.Check(tenant, name, schema)
		_, registered := s.reg.Lookup(name)
		s.f.RUnlock()
		if err != nil || registered {
			return t, err
		}
		if s.beforeCommit != nil {
			s.beforeCommit(subj)
		}
		seq, err := s.b.Append(ctx, subj, version, registeredEvent(tenant, t, by))
		if err == nil {
			if err := s.f.WaitApplied(ctx, seq); err != nil {
				return nil, fmt.Errorf("typestore: %s stored at %d but not yet applied: %w", name, seq, err)
			}
			if got, ok := s.reg.Lookup(name); ok && got.Digest() == t.Digest() {
				return got, nil
			}
			return nil, fmt.Errorf("typestore: %s stored at %d but not registered on apply (see the log)", name, seq)
		}
		if !errors.Is(err, bus.ErrConflict) {
			return nil, fmt.Errorf("typestore: register %s: %w", name, err)
		}
		if attempt == maxAttempts {
			return nil, fmt.Errorf("typestore: register %s: still conflicting after %d attempts: %w", name, attempt, err)
		}
		if err := s.f.WaitSubject(ctx, subj); err != nil {
			return nil, fmt.Errorf("typestore: register %s: reload after conflict: %w", name, err)
		}
	}
}

func registeredEvent(tenant string, t *msgtypes.Type, by *alpv1.Actor) *alpv1.Event {
	return &alpv1.Event{
		Header: &alpv1.EventHeader{
			Type:          "message_type_registered",
			SchemaVersion: 1,
			EventId:       uuid.Must(uuid.NewV7()).String(),
			CorrelationId: streams.PolicyTypeID(t.Name()),
			Actor:         by,
			Tenant:        tenant,
			ProducerRole:  alpv1.Role_ROLE_POLICY,
			Occurred:      timestamppb.Now(),
		},
		Body: &alpv1.Event_MessageTypeRegistered{MessageTypeRegistered: &alpv1.MessageTypeRegistered{
			Tenant: tenant, Name: t.Name(), Schema: t.Schema(), Digest: t.Digest(),
		}},
	}
}

// apply registers one event's type (under the follower's write lock). It
// depends on nothing but the registry and the event, so every replica
// applying the same stream ends with the same registry; an event that does
// not fit its subject, or whose schema does not register, is refused (the
// follower logs the error) and changes nothing.
func (s *Store) apply(subject string, _ uint64, ev *alpv1.Event) error {
	if err := streams.CheckProducer(subject, ev); err != nil {
		return err
	}
	tok, aggregate, id, ok := streams.ParsePolicySubject(subject)
	if !ok || aggregate != streams.PolicyType {
		return fmt.Errorf("not a message type subject")
	}
	r := ev.GetMessageTypeRegistered()
	if r == nil {
		return fmt.Errorf("%s is no message type event", bus.Kind(ev))
	}
	tenant := ev.GetHeader().GetTenant()
	if !s.tenants[tenant] || bus.TenantToken(tenant) != tok || r.GetTenant() != tenant {
		return fmt.Errorf("tenant %q is not hosted here or not the subject's", tenant)
	}
	if streams.PolicyTypeID(r.GetName()) != id {
		return fmt.Errorf("message type %q stands on the wrong subject", r.GetName())
	}
	if sum := sha256.Sum256(r.GetSchema()); hex.EncodeToString(sum[:]) != r.GetDigest() {
		return fmt.Errorf("message type %q: digest does not match the schema", r.GetName())
	}
	t, err := s.reg.Check(tenant, r.GetName(), r.GetSchema())
	if err != nil {
		return fmt.Errorf("refused: %w", err)
	}
	// A schema not in canonical form would register under another digest
	// than the event names: refuse it rather than keep a type the event
	// does not describe.
	if t.Digest() != r.GetDigest() {
		return fmt.Errorf("message type %q: schema not in canonical form", r.GetName())
	}
	if _, err := s.reg.Register(tenant, r.GetName(), r.GetSchema()); err != nil {
		return fmt.Errorf("refused: %w", err)
	}
	return nil
}
