package nlipapi

import (
	"math"
	"net/http"
	"sync"
	"time"

	"golang.org/x/time/rate"

	"github.com/alpd-project/alpd/internal/agentauth"
)

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

func newLimiters(cfg Config) *limiters {
	return &limiters{
		rates:   map[string]Rate{"agent": cfg.PerAgent, "person": cfg.PerPerson, "tenant": cfg.PerTenant},
		buckets: map[string]*bucket{},
	}
}

// allow takes one token for p from each bucket, or returns 429 with the
// seconds until all three have one.
func (l *limiters) allow(p agentauth.Principal, now time.Time) *apiError {
	keys := [...]struct{ kind, key string }{
		{"agent", p.Tenant + "/" + p.AgentID},
		{"person", p.Tenant + "/" + p.PersonID},
		{"tenant", p.Tenant},
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
	e := newError(http.StatusTooManyRequests, "rate_limited", "too many messages for this %s; retry later", limited)
	e.RetryAfter = int(math.Ceil(wait.Seconds()))
	return e
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
