package federation

import (
	"errors"
	"testing"
	"time"

	"github.com/sony/gobreaker/v2"

	alpv1 "github.com/alpd-project/alpd/gen/alp/v1"
	"github.com/alpd-project/alpd/internal/bus"
)

// The outbox's backoff doubles from the floor, never passes the cap, and
// spreads retries over the upper half of each step.
func TestBackoff(t *testing.T) {
	lo, hi := time.Second, time.Minute
	for attempt := uint64(1); attempt < 64; attempt++ {
		step := min(time.Duration(float64(lo)*float64(uint64(1)<<min(attempt-1, 20))), hi)
		for range 50 {
			d := backoff(attempt, lo, hi)
			if d < step/2 || d > step {
				t.Fatalf("attempt %d: %s, want within [%s, %s]", attempt, d, step/2, step)
			}
		}
	}
}

// A nonce is a replay within the window, new again after it; nonces of
// two origins are apart.
func TestNonceCache(t *testing.T) {
	c := newNonceCache(time.Minute)
	now := time.Now()
	if c.seen("a", "n1", now) || !c.add("a", "n1", now) {
		t.Fatal("a first nonce was seen")
	}
	if !c.seen("a", "n1", now.Add(30*time.Second)) || c.add("a", "n1", now.Add(30*time.Second)) {
		t.Error("a nonce within the window was new")
	}
	if c.seen("b", "n1", now) {
		t.Error("another origin's nonce was seen")
	}
	if c.seen("a", "n1", now.Add(2*time.Minute)) || !c.add("a", "n1", now.Add(2*time.Minute)) {
		t.Error("a nonce past the window was a replay")
	}
}

// Strangers' requests take a token per sender and per broker, from both
// or from neither: a sender over its rate costs its broker nothing.
func TestStrangerLimits(t *testing.T) {
	l := newStrangerLimits(Rate{PerMinute: 2, Burst: 2})
	now := time.Now()
	for i := range 2 {
		if ok, _ := l.allow("ana@a.example", "broker.a.example", now); !ok {
			t.Fatalf("request %d within the burst refused", i+1)
		}
	}
	ok, wait := l.allow("ana@a.example", "broker.a.example", now)
	if ok || wait <= 0 || wait > 30*time.Second {
		t.Fatalf("third request: %v, wait %s; want refused for up to 30s", ok, wait)
	}
	// The broker's bucket is empty too (two tokens taken): another sender
	// of that broker waits, one of another broker does not.
	if ok, _ := l.allow("bob@a.example", "broker.a.example", now); ok {
		t.Error("the broker's rate let another sender through")
	}
	if ok, _ := l.allow("bob@c.example", "broker.c.example", now); !ok {
		t.Error("another broker's sender was refused")
	}
	if ok, _ := l.allow("ana@a.example", "broker.a.example", now.Add(31*time.Second)); !ok {
		t.Error("a token did not come back after its period")
	}
}

// A status never goes back: QUEUED after SENT, SENT after a receipt.
func TestStatusRank(t *testing.T) {
	q, sent, failed := alpv1.DeliveryState_DELIVERY_STATE_QUEUED, alpv1.DeliveryState_DELIVERY_STATE_SENT, alpv1.DeliveryState_DELIVERY_STATE_FAILED
	for _, r := range []alpv1.DeliveryState{alpv1.DeliveryState_DELIVERY_STATE_DELIVERED, alpv1.DeliveryState_DELIVERY_STATE_PARTIAL,
		alpv1.DeliveryState_DELIVERY_STATE_HELD, alpv1.DeliveryState_DELIVERY_STATE_REFUSED} {
		if statusRank(r) <= statusRank(sent) || statusRank(r) <= statusRank(failed) {
			t.Errorf("%s does not rank above sent and failed", r)
		}
	}
	if statusRank(q) >= statusRank(sent) {
		t.Error("queued does not rank below sent")
	}
}

// TestBreakerCountsOnlyTheRemote: this broker's own trouble before a
// request (its ledger behind, a bus.Later from preparing the item) never
// opens a remote's breaker, and does not reset the count of the remote's
// own failures either; five failures of the remote in a row open it.
func TestBreakerCountsOnlyTheRemote(t *testing.T) {
	r := newRemotes(8, time.Minute).get("b.example")
	fail := func(err error) {
		t.Helper()
		done, aerr := r.breaker.Allow()
		if aerr != nil {
			t.Fatalf("breaker %s before it should be: %v", r.breaker.State(), aerr)
		}
		done(err)
	}
	local := bus.Later(time.Second, errors.New("ledger: not recorded yet"))
	for range 20 {
		fail(local)
	}
	for range 4 {
		fail(&remoteError{message: "connection refused"})
		fail(local)
	}
	if s := r.breaker.State(); s != gobreaker.StateClosed {
		t.Fatalf("after 20 local failures and 4 of the remote, the breaker is %s, want closed", s)
	}
	fail(&remoteError{message: "connection refused"})
	if s := r.breaker.State(); s != gobreaker.StateOpen {
		t.Fatalf("after 5 failures of the remote in a row, the breaker is %s, want open", s)
	}
}
