package identity_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/alpd-project/alpd/broker"
	alpv1 "github.com/alpd-project/alpd/gen/alp/v1"
	"github.com/alpd-project/alpd/internal/identitystore"
	"github.com/alpd-project/alpd/internal/keystore"
	"github.com/alpd-project/alpd/internal/natstest"
	"github.com/alpd-project/alpd/services/identity"
)

// TestClientSweeperExpiresUnusedDynamicClients: the identity service's
// sweeper, with the configured TTL, expires the dynamically registered
// clients nobody used and keeps the used ones (issue 10, finding 6).
func TestClientSweeperExpiresUnusedDynamicClients(t *testing.T) {
	s := natstest.RunJetStream(t)
	b, err := broker.New(broker.Config{Name: "alpd", Tenants: []string{"example.org"},
		// The background round never comes during the test; it drives
		// the sweeper itself.
		DynamicClients: identity.DynamicClients{UnusedTTL: time.Minute, SweepInterval: time.Hour}},
		broker.Deps{NATS: natstest.Connect(t, s), KeyStore: keystore.NewMemory()})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = b.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	<-b.Started()
	st := b.Identity().Store()
	cctx, ccancel := context.WithTimeout(ctx, 10*time.Second)
	defer ccancel()
	for _, id := range []string{"dcr_never_used", "dcr_used"} {
		if _, err := st.RegisterClient(cctx, identitystore.ClientSpec{Tenant: "example.org", ClientID: id,
			Kind: alpv1.ClientKind_CLIENT_KIND_PUBLIC_DCR, RedirectURIs: []string{"http://127.0.0.1:7777/cb"}}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := st.MarkClientUsed(cctx, "example.org", "dcr_used"); err != nil {
		t.Fatal(err)
	}

	sw := *b.Identity().ClientSweeper()
	if sw.TTL != time.Minute {
		t.Fatalf("sweeper TTL %v, want the configured 1m", sw.TTL)
	}
	// Within the TTL nothing expires.
	if n, err := sw.Sweep(cctx); n != 0 || err != nil {
		t.Fatalf("sweep within the TTL: %d, %v", n, err)
	}
	sw.Now = func() time.Time { return time.Now().Add(2 * time.Minute) }
	if n, err := sw.Sweep(cctx); n != 1 || err != nil {
		t.Fatalf("sweep after the TTL: %d, %v", n, err)
	}
	if _, err := st.Client("example.org", "dcr_never_used"); !errors.Is(err, identitystore.ErrNotFound) {
		t.Fatalf("unused client after the sweep: %v", err)
	}
	if _, err := st.Client("example.org", "dcr_used"); err != nil {
		t.Fatalf("used client after the sweep: %v", err)
	}
	if n, err := sw.Sweep(cctx); n != 0 || err != nil {
		t.Fatalf("second sweep: %d, %v", n, err)
	}
}
