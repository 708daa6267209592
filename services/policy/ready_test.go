package policy_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/alpd-project/alpd/internal/bus"
	"github.com/alpd-project/alpd/internal/keystore"
	"github.com/alpd-project/alpd/internal/natstest"
	"github.com/alpd-project/alpd/internal/service"
	"github.com/alpd-project/alpd/internal/streams"
	"github.com/alpd-project/alpd/internal/testkit"
	"github.com/alpd-project/alpd/services/policy"
)

// startPolicy runs the policy service alone on a real NATS server (which
// the caller may shut down) until the test ends.
func startPolicy(t *testing.T, maxStaleness time.Duration) (*policy.Service, func()) {
	t.Helper()
	srv := natstest.RunJetStream(t)
	nc := natstest.Connect(t, srv, nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond))
	b, err := bus.New(nc, bus.Options{Namespace: "t", Registerer: prometheus.NewRegistry()})
	if err != nil {
		t.Fatal(err)
	}
	tenants := []string{"example.org", "other.example"}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	// Policy follows identity's stream and approvals' standing rules, and
	// consumes ingress's send stream, federation's inbound log and
	// approvals' items, which those services create.
	for _, name := range []string{streams.Identity, streams.Send, streams.Inbound, streams.Approvals} {
		st, _ := streams.ByName(name)
		if _, err := b.EnsureStream(ctx, st.Spec(tenants, streams.Limits{})); err != nil {
			t.Fatal(err)
		}
	}
	s := policy.New(service.Deps{Bus: b, Keys: keystore.NewMemory(), Tenants: tenants}, policy.Options{MaxStaleness: maxStaleness})
	if err := s.Start(ctx); err != nil {
		t.Fatal(err)
	}
	return s, srv.Shutdown
}

// A policy replica is ready only while each of its projections (people,
// relationships, rule sets, message types, standing rules) is fresh: once its NATS goes
// away it is not ready, and the reason names every stale projection (what
// /readyz?verbose=1 shows).
func TestNotReadyWhileProjectionsAreStale(t *testing.T) {
	// Staleness of 3s: a loaded machine (CI) can take over a second to
	// catch a projection up, and the test is about losing NATS.
	s, stopNATS := startPolicy(t, 3*time.Second)
	testkit.Eventually(t, 10*time.Second, s.Ready, "policy ready")
	stopNATS()
	testkit.Eventually(t, 10*time.Second, func() error {
		err := s.Ready()
		if err == nil {
			return errors.New("still ready without NATS")
		}
		for _, name := range []string{"identity", "relationships", "rules", "types", "standing rules"} {
			if !strings.Contains(err.Error(), "policy: "+name+" projection: ") {
				return errors.New("the reason does not name the stale " + name + ": " + err.Error())
			}
		}
		return nil
	}, "policy not ready, naming each stale projection")
}
