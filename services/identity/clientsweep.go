package identity

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/alpd-project/alpd/internal/identitystore"
	"github.com/alpd-project/alpd/services/identity/clientreg"
)

// DynamicClients bounds dynamically registered OAuth clients: anyone may
// register one, and every replica keeps every client in memory.
type DynamicClients struct {
	// MaxUnused and MaxUnusedPerTenant bound the clients nobody has used
	// yet, over all tenants and per tenant (clientreg's
	// MaxUnusedDynamicClients, defaults there).
	MaxUnused, MaxUnusedPerTenant int
	// UnusedTTL is how long a client may wait for its first authorization
	// before it expires (default DefaultUnusedClientTTL).
	UnusedTTL time.Duration
	// SweepInterval is how often the expiry runs (default
	// DefaultClientSweepInterval).
	SweepInterval time.Duration
}

// Defaults of DynamicClients. A client registers just before its first
// authorization (the person signs in and approves within minutes), so an
// hour is ample, and bounds how long registrations nobody used hold their
// place under the bounds.
const (
	DefaultUnusedClientTTL     = time.Hour
	DefaultClientSweepInterval = time.Minute
)

func (d *DynamicClients) complete() {
	if d.UnusedTTL <= 0 {
		d.UnusedTTL = DefaultUnusedClientTTL
	}
	if d.SweepInterval <= 0 {
		d.SweepInterval = DefaultClientSweepInterval
	}
}

// sweepBatch bounds the clients one sweep of a tenant expires, so that a
// backlog (after a flood, or a long outage) is worked off over a few rounds
// instead of in one burst of appends.
const sweepBatch = 1000

// ClientSweeper expires the dynamically registered clients that nobody
// used within TTL (identitystore.ExpireDynamicClient). Every identity
// replica may run one: an expiry appends with the client's last sequence
// expected, so replicas racing on one client write one event, and a first
// use stored meanwhile wins.
type ClientSweeper struct {
	Store   *identitystore.Store
	Tenants []string
	TTL     time.Duration
	Logger  *slog.Logger
	// Now is the clock; default time.Now.
	Now func() time.Time
}

// Sweep runs one round over every tenant and returns how many clients it
// expired. It carries on past a failing client and returns every error.
func (c *ClientSweeper) Sweep(ctx context.Context) (int, error) {
	now := time.Now()
	if c.Now != nil {
		now = c.Now()
	}
	log := c.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	var errs []error
	expired := 0
	for _, t := range c.Tenants {
		ids, err := c.Store.UnusedDynamicClients(t, now.Add(-c.TTL), sweepBatch)
		if err != nil {
			errs = append(errs, fmt.Errorf("identity: unused clients of %s: %w", t, err))
			continue
		}
		n := 0
		for _, id := range ids {
			ok, err := c.Store.ExpireDynamicClient(ctx, t, id, c.TTL, now)
			if err != nil {
				if ctx.Err() != nil {
					return expired + n, errors.Join(append(errs, ctx.Err())...)
				}
				errs = append(errs, fmt.Errorf("identity: expire client %s of %s: %w", id, t, err))
				continue
			}
			if ok {
				n++
			}
		}
		if n > 0 {
			log.InfoContext(ctx, "dynamic clients nobody used expired", "tenant", t, "expired", n, "ttl", c.TTL.String())
		}
		expired += n
	}
	return expired, errors.Join(errs...)
}

// Run sweeps every interval until ctx ends.
func (c *ClientSweeper) Run(ctx context.Context, interval time.Duration) {
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		if _, err := c.Sweep(ctx); err != nil && ctx.Err() == nil && c.Logger != nil {
			c.Logger.WarnContext(ctx, "expiring unused dynamic clients failed; the next round retries", "err", err)
		}
	}
}

// registrarConfig adds the bounds of o to a client registration config.
func (o DynamicClients) registrarConfig(cfg clientreg.Config) clientreg.Config {
	cfg.MaxUnusedDynamicClients = o.MaxUnused
	cfg.MaxUnusedDynamicClientsPerTenant = o.MaxUnusedPerTenant
	return cfg
}
