package identitystore

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	alpv1 "github.com/alpd-project/alpd/gen/alp/v1"
	"github.com/alpd-project/alpd/internal/alp"
	"github.com/alpd-project/alpd/internal/bus"
	"github.com/alpd-project/alpd/internal/keystore"
	"github.com/alpd-project/alpd/internal/natsauth"
	"github.com/alpd-project/alpd/internal/personmap"
	"github.com/alpd-project/alpd/internal/projection"
	"github.com/alpd-project/alpd/internal/streams"
)

// maxAttempts bounds a command's decide–append rounds on conflicts.
const maxAttempts = 5

// Store is a replica of the identity state of some tenants, following the
// identity stream. It is safe for concurrent use.
type Store struct {
	b       *bus.Bus
	people  *personmap.Map
	log     *slog.Logger
	tenants map[string]*tenantState // by tenant domain
	// f follows the identity stream: its lock guards tenants' contents,
	// its versions are the appends' expectations.
	f *projection.Follower

	// beforeCommit, in tests, runs before each append (to make another
	// writer win a race).
	beforeCommit func(subject string)
}

// Open builds the projection of tenants' identity state from the identity
// stream of b's broker and keeps following it until Close, and opens the
// person map (the bucket <NS>_PERSONMAP, created if missing) whose records
// ks's DATA keys wrap. The stream must exist (the identity service creates
// it). Open returns once the projection has caught up with the stream, or
// with ctx's error.
func Open(ctx context.Context, b *bus.Bus, ks keystore.KeyStore, tenants []string, log *slog.Logger) (*Store, error) {
	if b == nil {
		return nil, fmt.Errorf("%w: bus: nil", ErrInvalid)
	}
	if ks == nil {
		return nil, fmt.Errorf("%w: key store: nil", ErrInvalid)
	}
	if len(tenants) == 0 {
		return nil, fmt.Errorf("%w: tenants: at least one is required", ErrInvalid)
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	s := &Store{
		b:       b,
		log:     log.With("component", "identitystore"),
		tenants: map[string]*tenantState{},
	}
	if err := alp.ValidateTenants(tenants); err != nil {
		return nil, fmt.Errorf("%w: tenants: %v", ErrInvalid, err)
	}
	var filters []string
	for _, t := range tenants {
		s.tenants[t] = newTenantState(t)
		filters = append(filters, streams.TenantFilter(streams.Identity, t))
	}
	people, err := personmap.Open(ctx, b.JetStream(), b.StreamName(natsauth.PersonMapBucket), b.Options().Replicas, ks, personmap.Options{})
	if err != nil {
		return nil, fmt.Errorf("identitystore: %w", err)
	}
	s.people = people
	f, err := projection.Open(ctx, b, projection.Config{
		Stream: streams.Identity, Filters: filters, Name: "idstore", Log: s.log,
		Apply:    func(subject string, _ uint64, ev *alpv1.Event) error { return s.apply(subject, ev) },
		ErrStale: ErrStale, ErrClosed: ErrClosed,
	})
	if err != nil {
		return nil, fmt.Errorf("identitystore: %w", err)
	}
	s.f = f
	return s, nil
}

// Close stops following the stream. Queries keep answering from the last
// state, Fresh fails and commands return ErrClosed.
func (s *Store) Close() { s.f.Close() }

// Applied is the stream sequence of the last event applied.
func (s *Store) Applied() uint64 { return s.f.Applied() }

// Fresh returns nil only if, within maxStaleness, the store confirmed that
// it had applied every event the stream held for its tenants (ErrStale
// otherwise, ErrClosed once closed). Ingress refuses tokens when it is not
// (fail closed). A healthy idle store confirms about every second, dating
// each confirmation from when its pull was sent, so its confirmations are
// up to about 2s old: maxStaleness should be a few seconds or more
// (accesstoken's default is a minute). (accesstoken.RevocationChecker)
func (s *Store) Fresh(maxStaleness time.Duration) error { return s.f.Fresh(maxStaleness) }
