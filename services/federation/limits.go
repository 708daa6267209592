package federation

import (
	"errors"
	"math"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/sony/gobreaker/v2"
	"golang.org/x/time/rate"
)

// remote is what the outbox keeps per remote domain: a circuit breaker
// (after consecutive failures nothing is tried for a while, then one
// request probes) and a cap on the items in flight to it, so a slow or
// dead remote holds at most PerRemote of the senders.
type remote struct {
	breaker  *gobreaker.TwoStepCircuitBreaker[struct{}]
	inflight chan struct{}
	openFor  time.Duration
}

// remotes are the outbox's remotes, made on first use.
type remotes struct {
	mu        sync.Mutex
	byDomain  map[string]*remote
	perRemote int
	openFor   time.Duration
}

func newRemotes(perRemote int, openFor time.Duration) *remotes {
	return &remotes{byDomain: map[string]*remote{}, perRemote: perRemote, openFor: openFor}
}

func (rs *remotes) get(domain string) *remote {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	r := rs.byDomain[domain]
	if r == nil {
		r = &remote{inflight: make(chan struct{}, rs.perRemote), openFor: rs.openFor,
			breaker: gobreaker.NewTwoStepCircuitBreaker[struct{}](gobreaker.Settings{
				Name: domain, Timeout: rs.openFor,
				ReadyToTrip: func(c gobreaker.Counts) bool { return c.ConsecutiveFailures >= 5 },
				// Only the remote's failures count against it: this
				// broker's own trouble before the request (its ledger not
				// caught up with the send, its bus away) says nothing of
				// the remote, and must not open its breaker.
				IsExcluded: func(err error) bool {
					var re *remoteError
					return !errors.As(err, &re)
				},
			})}
		rs.byDomain[domain] = r
	}
	return r
}

// acquire takes one of the remote's in-flight slots, without waiting.
func (r *remote) acquire() (release func(), ok bool) {
	select {
	case r.inflight <- struct{}{}:
		return func() { <-r.inflight }, true
	default:
		return nil, false
	}
}

// backoff is the delay before the attempt-th retry: exponential from min,
// capped at max, with full jitter over its upper half (so retries of many
// items spread out instead of arriving together).
func backoff(attempt uint64, lo, hi time.Duration) time.Duration {
	d := float64(lo) * math.Pow(2, float64(min(attempt, 40))-1)
	d = min(d, float64(hi))
	return time.Duration(d/2 + rand.Float64()*d/2)
}

// strangerLimits are token buckets for connection requests from
// strangers: one per sender address and one per sending broker. A request
// takes a token from both or from neither.
type strangerLimits struct {
	mu      sync.Mutex
	rate    Rate
	buckets map[string]*rate.Limiter
}

func newStrangerLimits(r Rate) *strangerLimits {
	return &strangerLimits{rate: r, buckets: map[string]*rate.Limiter{}}
}

// maxStrangerBuckets bounds the buckets kept: beyond it the idle ones are
// dropped (a full bucket is what a new one would be).
const maxStrangerBuckets = 100_000

// allow takes a token for sender and broker; when either is empty it
// reports how long until both have one.
func (l *strangerLimits) allow(sender, broker string, now time.Time) (bool, time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.buckets) > maxStrangerBuckets {
		for k, b := range l.buckets {
			if b.TokensAt(now) >= float64(l.rate.Burst) {
				delete(l.buckets, k)
			}
		}
	}
	a, b := l.bucket("s:"+sender), l.bucket("b:"+broker)
	ra, rb := a.ReserveN(now, 1), b.ReserveN(now, 1)
	wait := max(ra.DelayFrom(now), rb.DelayFrom(now))
	if wait == 0 {
		return true, 0
	}
	ra.CancelAt(now)
	rb.CancelAt(now)
	return false, wait
}

func (l *strangerLimits) bucket(key string) *rate.Limiter {
	b := l.buckets[key]
	if b == nil {
		b = rate.NewLimiter(rate.Limit(l.rate.PerMinute/60), l.rate.Burst)
		l.buckets[key] = b
	}
	return b
}

// nonceCache remembers the nonces of requests seen within the skew window
// (a request older than that is refused by its time): a captured request
// sent again is a replay. It is this process's memory; a replay reaching
// another replica of the receiver finds the envelope id recorded and
// delivers nothing twice.
type nonceCache struct {
	mu     sync.Mutex
	ttl    time.Duration
	seenAt map[string]time.Time
	pruned time.Time
}

func newNonceCache(ttl time.Duration) *nonceCache {
	return &nonceCache{ttl: ttl, seenAt: map[string]time.Time{}}
}

// seen reports whether origin's nonce was recorded within the window.
func (c *nonceCache) seen(origin, nonce string, now time.Time) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	t, ok := c.seenAt[origin+" "+nonce]
	return ok && now.Sub(t) <= c.ttl
}

// add records origin's nonce and reports whether it was new.
func (c *nonceCache) add(origin, nonce string, now time.Time) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if now.Sub(c.pruned) > c.ttl/4 {
		for k, t := range c.seenAt {
			if now.Sub(t) > c.ttl {
				delete(c.seenAt, k)
			}
		}
		c.pruned = now
	}
	key := origin + " " + nonce
	if t, ok := c.seenAt[key]; ok && now.Sub(t) <= c.ttl {
		return false
	}
	c.seenAt[key] = now
	return true
}
