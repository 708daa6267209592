package ingress

import (
	"fmt"
	"math"
	"sync"
	"time"

	"golang.org/x/time/rate"
)

// Rate is a token bucket: Limit events per second, Burst at once.
type Rate struct {
	Limit float64
	Burst int
}

// RateLimited refuses a message over the agent's, the person's or the
// tenant's rate limit.
type RateLimited struct {
	// Kind is the limit that refused: "agent", "person" or "tenant" (the
	// one whose bucket refills last).
	Kind string
	// RetryAfter is how long until all three buckets hold a token.
	RetryAfter time.Duration
}

func (e *RateLimited) Error() string { return "ingress: " + e.Description() }

// Description says which limit refused, for the agent.
func (e *RateLimited) Description() string {
	return fmt.Sprintf("too many messages for this %s; retry later", e.Kind)
}

// RetryAfterSeconds is RetryAfter in whole seconds, rounded up, as HTTP's
// Retry-After wants it.
func (e *RateLimited) RetryAfterSeconds() int { return int(math.Ceil(e.RetryAfter.Seconds())) }

// limiters are token buckets per agent, per person and per tenant. Every
// message takes a token from all three or from none, so a refused message
// does not eat into the others' budgets.
type limiters struct {
	mu      sync.Mutex
	rates   map[string]Rate
	buckets map[string]*bucket
	swept   time.Time
}

type bucket struct {
	lim  *rate.Limiter
	used time.Time
}

// idleBucket is how long an unused bucket is kept (a full bucket is the
// same as a new one, so forgetting it after it refilled changes nothing).
const idleBucket = 10 * time.Minute

func newLimiters(cfg DoorConfig) *limiters {
	return &limiters{
		rates:   map[string]Rate{"agent": cfg.PerAgent, "person": cfg.PerPerson, "tenant": cfg.PerTenant},
		buckets: map[string]*bucket{},
	}
}

// allow takes one token for snd from each bucket, or returns *RateLimited
// with the time until all three have one.
func (l *limiters) allow(snd Sender, now time.Time) error {
	keys := [...]struct{ kind, key string }{
		{"agent", snd.Tenant + "/" + snd.AgentID},
		{"person", snd.Tenant + "/" + snd.PersonID},
		{"tenant", snd.Tenant},
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.sweep(now)
	var reservations [len(keys)]*rate.Reservation
	var wait time.Duration
	limited := ""
	for i, k := range keys {
		b := l.bucket(k.kind, k.key, now)
		reservations[i] = b.lim.ReserveN(now, 1)
		if d := reservations[i].DelayFrom(now); d > wait {
			wait, limited = d, k.kind
		}
	}
	if wait == 0 {
		return nil
	}
	for _, r := range reservations {
		r.CancelAt(now)
	}
	return &RateLimited{Kind: limited, RetryAfter: wait}
}

func (l *limiters) bucket(kind, key string, now time.Time) *bucket {
	id := kind + ":" + key
	b, ok := l.buckets[id]
	if !ok {
		r := l.rates[kind]
		b = &bucket{lim: rate.NewLimiter(rate.Limit(r.Limit), r.Burst)}
		l.buckets[id] = b
	}
	b.used = now
	return b
}

// sweep forgets idle buckets, at most once a minute.
func (l *limiters) sweep(now time.Time) {
	if now.Sub(l.swept) < time.Minute {
		return
	}
	l.swept = now
	for id, b := range l.buckets {
		if now.Sub(b.used) > idleBucket {
			delete(l.buckets, id)
		}
	}
}
