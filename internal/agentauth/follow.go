package agentauth

import (
	"context"
	"errors"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/alpd-project/alpd/internal/accesstoken"
	"github.com/alpd-project/alpd/internal/bus"
	"github.com/alpd-project/alpd/internal/identitystore"
	"github.com/alpd-project/alpd/internal/keystore"
)

// DefaultMaxStaleness is how old the identity projection's last
// confirmation may be before every credential is refused (fail closed).
const DefaultMaxStaleness = 30 * time.Second

// ErrNotFollowing: the identity projection is not open yet (identity's
// stream does not exist yet, or NATS is unreachable), so no credential can
// be checked against revocations.
var ErrNotFollowing = errors.New("agentauth: identity's revocations are not followed yet")

// FollowOptions say which identity state to follow and how to check tokens
// against it. Every service that authenticates agents (ingress, the ledger
// API) builds the same thing from them.
type FollowOptions struct {
	// Bus is the broker's bus; its identity stream is followed.
	Bus *bus.Bus
	// Tenants are the hosted domains whose identity state is followed.
	Tenants []string
	// Keys gives the tenants' public token keys, and their DATA keys, which
	// wrap the person map's records (people's addresses).
	Keys keystore.KeyStore
	// Issuers maps each tenant to its OAuth issuer; Resource is the
	// audience agents' tokens must carry.
	Issuers  map[string]string
	Resource string
	// ResourceMetadataURL is sent in every authentication challenge (RFC
	// 9728), so a refused agent can find the authorization server.
	ResourceMetadataURL string
	// MaxStaleness of the projection before every token is refused
	// (default DefaultMaxStaleness).
	MaxStaleness time.Duration
	Logger       *slog.Logger
}

// Follower keeps an identity projection open for as long as its context
// lives and serves an Authenticator on it. It exists because the
// projection cannot always be opened at start: in split mode identity may
// come up after the service that needs it, so opening is retried in the
// background and callers see "temporarily unavailable" until it succeeds.
type Follower struct {
	o        FollowOptions
	store    atomic.Pointer[identitystore.Store]
	verifier atomic.Pointer[accesstoken.Verifier]
	auth     atomic.Pointer[Authenticator]
	cancel   context.CancelFunc
	done     chan struct{}
}

// Follow starts following identity's stream in the background: it opens
// the projection (retrying with backoff up to 5s until the stream exists)
// and keeps it open until ctx is done or Close is called.
func Follow(ctx context.Context, o FollowOptions) *Follower {
	if o.MaxStaleness <= 0 {
		o.MaxStaleness = DefaultMaxStaleness
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	ctx, cancel := context.WithCancel(ctx)
	f := &Follower{o: o, cancel: cancel, done: make(chan struct{})}
	go f.run(ctx)
	return f
}

func (f *Follower) run(ctx context.Context) {
	defer close(f.done)
	for delay := 100 * time.Millisecond; ; delay = min(2*delay, 5*time.Second) {
		store, err := identitystore.Open(ctx, f.o.Bus, f.o.Keys, f.o.Tenants, f.o.Logger)
		if err == nil {
			f.install(store)
			<-ctx.Done()
			store.Close()
			return
		}
		f.o.Logger.Debug("identity projection not available yet", "err", err)
		select {
		case <-ctx.Done():
			return
		case <-time.After(delay):
		}
	}
}

// install builds the verifiers on an open projection.
func (f *Follower) install(store *identitystore.Store) {
	a := NewAuthenticator(store, f.o)
	f.store.Store(store)
	f.verifier.Store(a.Tokens)
	f.auth.Store(a)
}

// NewAuthenticator checks credentials against an identity projection the
// caller already keeps open (o.Bus is not used): for a service that
// follows identity for its own reasons, so one process keeps one
// projection. Follow builds the same thing on a projection of its own.
func NewAuthenticator(store *identitystore.Store, o FollowOptions) *Authenticator {
	if o.MaxStaleness <= 0 {
		o.MaxStaleness = DefaultMaxStaleness
	}
	return &Authenticator{
		Tokens: &accesstoken.Verifier{
			Keys:         accesstoken.FromKeyStore(o.Keys),
			Resource:     o.Resource,
			Issuers:      o.Issuers,
			Revocations:  store,
			MaxStaleness: o.MaxStaleness,
		},
		PATs:                &PATVerifier{Store: store, Tenants: o.Tenants, MaxStaleness: o.MaxStaleness},
		People:              store,
		ResourceMetadataURL: o.ResourceMetadataURL,
	}
}

// Verifier checks access tokens locally, with revocations from the
// identity stream; nil until the projection is open.
func (f *Follower) Verifier() *accesstoken.Verifier { return f.verifier.Load() }

// Store is the identity projection (people, grants, revocations); nil
// until it is open.
func (f *Follower) Store() *identitystore.Store { return f.store.Load() }

// Authenticator checks bearer credentials (access tokens and personal
// access tokens). Before the projection is open it refuses everything as
// temporarily unavailable, with the usual challenge.
func (f *Follower) Authenticator() *Authenticator {
	if a := f.auth.Load(); a != nil {
		return a
	}
	return &Authenticator{ResourceMetadataURL: f.o.ResourceMetadataURL}
}

// MaxStaleness is the staleness the follower's checks allow.
func (f *Follower) MaxStaleness() time.Duration { return f.o.MaxStaleness }

// Ready is nil while credentials can be checked: the projection is open
// and confirmed fresh within MaxStaleness. ErrNotFollowing before it opens.
func (f *Follower) Ready() error {
	v := f.verifier.Load()
	if v == nil {
		return ErrNotFollowing
	}
	return v.Revocations.Fresh(f.o.MaxStaleness)
}

// Close stops following and waits until the projection is closed. Queries
// on it keep answering from the last state; Ready fails from then on.
func (f *Follower) Close() {
	f.cancel()
	<-f.done
}

// Done is closed once the follower has stopped (its context ended or Close).
func (f *Follower) Done() <-chan struct{} { return f.done }
