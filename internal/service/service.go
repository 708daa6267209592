// Package service holds what every alpd service has in common: its
// dependencies, ownership of its streams, supervised consumers, readiness,
// its public HTTP routes, and the Ping that passes an envelope through it.
package service

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	nmpv1 "github.com/alpd-project/alpd/gen/alp/nmp/v1"
	alpv1 "github.com/alpd-project/alpd/gen/alp/v1"
	"github.com/alpd-project/alpd/internal/alp"
	"github.com/alpd-project/alpd/internal/bus"
	"github.com/alpd-project/alpd/internal/envelope"
	"github.com/alpd-project/alpd/internal/httproute"
	"github.com/alpd-project/alpd/internal/keystore"
	"github.com/alpd-project/alpd/internal/seal"
	"github.com/alpd-project/alpd/internal/streams"
)

// Service is one of the six alpd services.
type Service interface {
	Role() alpv1.Role
	// Start creates the streams the service owns and starts its consumers.
	// It returns once they are up; they run until ctx is done.
	Start(ctx context.Context) error
	// Ready is nil when the service's streams and consumers are up.
	Ready() error
	// Lag is the number of events waiting for the service's consumers.
	Lag() uint64
	// RegisterGRPC adds the service's gRPC API to s.
	RegisterGRPC(s grpc.ServiceRegistrar)
	// Stopped is closed when the consumers have drained after ctx ended.
	Stopped() <-chan struct{}
	// Pass adds the service's diagnostic trace entry to env (ping, probe).
	Pass(env *alpv1.Envelope, action string) (*alpv1.Envelope, bool)
	// HTTPRoutes are the service's public HTTP routes once it has started,
	// each within the URL space its package declares (URLSpace); the
	// broker mounts every local service's routes on one mux. Nil for a
	// service without public HTTP.
	HTTPRoutes() []httproute.Route
}

// Deps are what the broker hands every service.
type Deps struct {
	Bus     *bus.Bus
	Logger  *slog.Logger
	Keys    keystore.KeyStore
	Sealer  *seal.Sealer
	Tenants alp.Tenants
	Limits  streams.Limits
}

// Base implements the common part of Service.
type Base struct {
	Deps
	role      alpv1.Role
	started   atomic.Bool
	mu        sync.Mutex
	consumers []*bus.Consumer
}

// NewBase prepares the common part of a service of role.
func NewBase(role alpv1.Role, d Deps) Base {
	if d.Logger == nil {
		d.Logger = slog.New(slog.DiscardHandler)
	}
	d.Logger = d.Logger.With("service", envelope.ServiceName(role))
	return Base{Deps: d, role: role}
}

// Role is the service's role.
func (b *Base) Role() alpv1.Role { return b.role }

// Name is the service's name ("policy").
func (b *Base) Name() string { return envelope.ServiceName(b.role) }

// EnsureOwnedStreams creates or updates every stream the role owns. (The
// shared dead-letter stream is made by Consume: a role without consumers
// does not need it, and its NATS user may not touch it.)
func (b *Base) EnsureOwnedStreams(ctx context.Context) error {
	for _, spec := range streams.Owned(b.role, b.Tenants, b.Limits) {
		if _, err := b.Bus.EnsureStream(ctx, spec); err != nil {
			return fmt.Errorf("%s: %w", b.Name(), err)
		}
	}
	return nil
}

// EnsureStream brings back one owned stream (for a consumer's
// supervisor). It is nil for a stream another role owns (policy reads
// ingress's send log): only the owner creates it, and the consumer waits
// until it is there.
func (b *Base) EnsureStream(name string) func(context.Context) error {
	if s, ok := streams.ByName(name); ok && s.Owner != b.role {
		return nil
	}
	return func(ctx context.Context) error {
		s, ok := streams.ByName(name)
		if !ok {
			return fmt.Errorf("%s: unknown stream %q", b.Name(), name)
		}
		_, err := b.Bus.EnsureStream(ctx, s.Spec(b.Tenants, b.Limits))
		return err
	}
}

// Consume starts a supervised consumer that counts towards readiness.
// It first creates the shared dead-letter stream.
func (b *Base) Consume(ctx context.Context, spec bus.ConsumerSpec, h bus.Handler) error {
	if err := b.Bus.EnsureShared(ctx); err != nil {
		return fmt.Errorf("%s: %w", b.Name(), err)
	}
	c, err := b.Bus.Consume(ctx, spec, h)
	if err != nil {
		return fmt.Errorf("%s: %w", b.Name(), err)
	}
	b.mu.Lock()
	b.consumers = append(b.consumers, c)
	b.mu.Unlock()
	return nil
}

// HTTPRoutes is nil: a service with public HTTP overrides it.
func (b *Base) HTTPRoutes() []httproute.Route { return nil }

// MarkStarted is called at the end of a successful Start.
func (b *Base) MarkStarted() {
	b.started.Store(true)
	b.Logger.Info("service started")
}

// Ready is nil once started and while every consumer is pulling.
func (b *Base) Ready() error {
	if !b.started.Load() {
		return errors.New(b.Name() + ": not started")
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, c := range b.consumers {
		if !c.Ready() {
			return fmt.Errorf("%s: consumer %s is not pulling", b.Name(), c.Name())
		}
	}
	return nil
}

// Lag sums the consumers' pending messages.
func (b *Base) Lag() uint64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	var n uint64
	for _, c := range b.consumers {
		n += c.Lag()
	}
	return n
}

// Stopped is closed when every consumer has drained.
func (b *Base) Stopped() <-chan struct{} {
	b.mu.Lock()
	cs := append([]*bus.Consumer(nil), b.consumers...)
	b.mu.Unlock()
	done := make(chan struct{})
	go func() {
		for _, c := range cs {
			<-c.Done()
		}
		close(done)
	}()
	return done
}

// Pass passes env through the service for a ping or probe: one trace entry
// with the service's readiness and consumer lag. Ingress, the entry point
// and a trust-setting point, stamps trust as the broker's own diagnostic
// (the callers are authenticated operators and services); every other
// service leaves it as it is.
func (b *Base) Pass(env *alpv1.Envelope, action string) (*alpv1.Envelope, bool) {
	if env == nil {
		env = &alpv1.Envelope{}
	} else {
		env = proto.CloneOf(env)
	}
	ready := b.Ready() == nil
	hop := envelope.Begin(b.role, action)
	if b.role == alpv1.Role_ROLE_INGRESS {
		_ = hop.SetTrust(nmpv1.TrustLevel_TRUST_LEVEL_TRUSTED, "broker diagnostic from an authenticated caller")
	}
	hop.Status(ready, b.Lag())
	hop.End(env)
	return env, ready
}

// NewEvent starts an event of this service: header filled, body to be set by
// the caller. cause is the event that led to it (nil for a command).
func (b *Base) NewEvent(kind, tenant string, cause *alpv1.Event, correlation string, actor *alpv1.Actor) *alpv1.Event {
	h := &alpv1.EventHeader{
		Type:          kind,
		SchemaVersion: 1,
		EventId:       uuid.Must(uuid.NewV7()).String(),
		CorrelationId: correlation,
		Actor:         actor,
		Tenant:        tenant,
		ProducerRole:  b.role,
		Occurred:      timestamppb.New(time.Now()),
	}
	if cause != nil {
		h.CausationId = cause.GetHeader().GetEventId()
		if h.CorrelationId == "" {
			h.CorrelationId = cause.GetHeader().GetCorrelationId()
		}
	}
	if actor == nil {
		h.Actor = &alpv1.Actor{Kind: alpv1.ActorKind_ACTOR_KIND_SERVICE, Id: b.Name()}
	}
	return &alpv1.Event{Header: h}
}
