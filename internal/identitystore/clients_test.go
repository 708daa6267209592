package identitystore

import (
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	alpv1 "github.com/alpd-project/alpd/gen/alp/v1"
	"github.com/alpd-project/alpd/internal/testkit"
)

func registerDCR(t *testing.T, s *Store, tn, id string) Client {
	t.Helper()
	c, err := s.RegisterClient(ctxT(t), ClientSpec{Tenant: tn, ClientID: id, Kind: alpv1.ClientKind_CLIENT_KIND_PUBLIC_DCR,
		RedirectURIs: []string{"http://127.0.0.1:8765/callback"}})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestDynamicClientsNeverUsedExpire: a dynamically registered client that
// nobody used expires, on every replica and after a restart; a used one
// stays; first use is one event, however often it is marked (issue 10,
// finding 6).
func TestDynamicClientsNeverUsedExpire(t *testing.T) {
	t.Parallel()
	e := newRig(t)
	a, b := e.open(t), e.open(t)
	ctx := ctxT(t)
	unused := registerDCR(t, a, tenant, "dcr_unused")
	registerDCR(t, a, tenant, "dcr_used")
	registerDCR(t, a, other, "dcr_other")
	if _, err := a.RegisterClient(ctx, ClientSpec{Tenant: tenant, ClientID: "https://vendor.example/client.json",
		Kind: alpv1.ClientKind_CLIENT_KIND_PUBLIC_CIMD, RedirectURIs: []string{"https://vendor.example/cb"}}); err != nil {
		t.Fatal(err)
	}
	if n, total, err := a.UnusedDynamicClientCounts(tenant); err != nil || n != 2 || total != 3 {
		t.Fatalf("UnusedDynamicClientCounts = %d, %d, %v; want 2, 3", n, total, err)
	}

	for range 3 {
		c, err := b.MarkClientUsed(ctx, tenant, "dcr_used")
		if err != nil || c.FirstUsed.IsZero() {
			t.Fatalf("MarkClientUsed: %+v, %v", c, err)
		}
	}
	if k := e.kinds(t); k["client_first_used"] != 1 {
		t.Fatalf("first use recorded %d times: %v", k["client_first_used"], k)
	}
	testkit.Eventually(t, 5*time.Second, func() error {
		if c, _ := a.Client(tenant, "dcr_used"); c.FirstUsed.IsZero() {
			return errors.New("replica a does not see the first use")
		}
		return nil
	})
	if n, total, _ := a.UnusedDynamicClientCounts(tenant); n != 1 || total != 2 {
		t.Fatalf("after a first use: UnusedDynamicClientCounts = %d, %d; want 1, 2", n, total)
	}

	later := time.Now().Add(time.Hour)
	if ids, err := a.UnusedDynamicClients(tenant, later, 10); err != nil || !slices.Equal(ids, []string{"dcr_unused"}) {
		t.Fatalf("UnusedDynamicClients = %v, %v", ids, err)
	}
	// Too young to expire: nothing happens.
	if ok, err := a.ExpireDynamicClient(ctx, tenant, "dcr_unused", 24*time.Hour, time.Now()); ok || err != nil {
		t.Fatalf("young client expired: %v %v", ok, err)
	}
	// Used, or not dynamic: never expires.
	for _, id := range []string{"dcr_used", "https://vendor.example/client.json", "no-such-client"} {
		if ok, err := a.ExpireDynamicClient(ctx, tenant, id, time.Minute, later); ok || err != nil {
			t.Fatalf("%s expired: %v %v", id, ok, err)
		}
	}
	if ok, err := a.ExpireDynamicClient(ctx, tenant, "dcr_unused", time.Minute, later); !ok || err != nil {
		t.Fatalf("unused client not expired: %v %v", ok, err)
	}
	if ok, err := a.ExpireDynamicClient(ctx, tenant, "dcr_unused", time.Minute, later); ok || err != nil {
		t.Fatalf("expired twice: %v %v", ok, err)
	}
	gone := func(s *Store) error {
		if _, err := s.Client(tenant, unused.ID); !errors.Is(err, ErrNotFound) {
			return fmt.Errorf("expired client still there: %v", err)
		}
		if n, total, _ := s.UnusedDynamicClientCounts(tenant); n != 0 || total != 1 {
			return fmt.Errorf("UnusedDynamicClientCounts = %d, %d; want 0, 1", n, total)
		}
		return nil
	}
	if err := gone(a); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 5*time.Second, func() error { return gone(b) })
	if err := gone(e.open(t)); err != nil {
		t.Fatalf("after a restart: %v", err)
	}
	if _, err := a.MarkClientUsed(ctx, tenant, unused.ID); !errors.Is(err, ErrNotFound) {
		t.Fatalf("marking an expired client: %v", err)
	}
	if c, err := a.Client(tenant, "dcr_used"); err != nil || c.FirstUsed.IsZero() {
		t.Fatalf("used client: %+v, %v", c, err)
	}
}

// TestDynamicClientFirstUseWinsOverExpiry: a first use and an expiry racing
// on two replicas cannot both win; the one that loses the race finds the
// client used, and it stays.
func TestDynamicClientFirstUseWinsOverExpiry(t *testing.T) {
	t.Parallel()
	e := newRig(t)
	a, b := e.open(t), e.open(t)
	ctx := ctxT(t)
	registerDCR(t, a, tenant, "dcr_raced")
	testkit.Eventually(t, 5*time.Second, func() error {
		_, err := b.Client(tenant, "dcr_raced")
		return err
	})
	// b decides to expire, but a's first use is stored just before b's
	// append.
	b.beforeCommit = func(string) {
		b.beforeCommit = nil
		if _, err := a.MarkClientUsed(ctx, tenant, "dcr_raced"); err != nil {
			t.Error(err)
		}
	}
	if ok, err := b.ExpireDynamicClient(ctx, tenant, "dcr_raced", time.Minute, time.Now().Add(time.Hour)); ok || err != nil {
		t.Fatalf("expiry after a first use: %v %v", ok, err)
	}
	if c, err := b.Client(tenant, "dcr_raced"); err != nil || c.FirstUsed.IsZero() {
		t.Fatalf("client after the race: %+v, %v", c, err)
	}
	if k := e.kinds(t); k["dynamic_client_expired"] != 0 {
		t.Fatalf("events %v", k)
	}
}

// TestDynamicClientExpiryRefusedForUsedClients: an expiry event for a client
// that was used, or that is not a dynamic one, is refused by every
// projection (it could only come from a bug or a forger).
func TestDynamicClientExpiryRefusedForUsedClients(t *testing.T) {
	t.Parallel()
	e := newRig(t)
	s := e.open(t)
	ctx := ctxT(t)
	registerDCR(t, s, tenant, "dcr_kept")
	if _, err := s.MarkClientUsed(ctx, tenant, "dcr_kept"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.RegisterClient(ctx, ClientSpec{Tenant: tenant, ClientID: "https://vendor.example/c.json",
		Kind: alpv1.ClientKind_CLIENT_KIND_PUBLIC_CIMD, RedirectURIs: []string{"https://vendor.example/cb"}}); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"dcr_kept", "https://vendor.example/c.json"} {
		ev := s.newEvent(ctx, "dynamic_client_expired", tenant, id, nil)
		ev.Body = &alpv1.Event_DynamicClientExpired{DynamicClientExpired: &alpv1.DynamicClientExpired{Tenant: tenant, ClientId: id}}
		ack, err := e.b.Publish(ctx, subject(tenant, "client", clientToken(id)), ev)
		if err != nil {
			t.Fatal(err)
		}
		if err := s.f.WaitApplied(ctx, ack.Sequence); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Client(tenant, id); err != nil {
			t.Errorf("%s dropped by a refused expiry: %v", id, err)
		}
	}
	if n, _, _ := s.UnusedDynamicClientCounts(tenant); n != 0 {
		t.Errorf("unused count %d after refused expiries", n)
	}
}
