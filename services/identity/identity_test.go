package identity_test

import (
	"context"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/alpd-project/alpd/broker"
	identityv1 "github.com/alpd-project/alpd/gen/alp/identity/v1"
	alpv1 "github.com/alpd-project/alpd/gen/alp/v1"
	"github.com/alpd-project/alpd/internal/keystore"
	"github.com/alpd-project/alpd/internal/natstest"
)

func TestErasePersonRPC(t *testing.T) {
	s := natstest.RunJetStream(t)
	b, err := broker.New(broker.Config{Name: "alpd", Tenants: []string{"example.org"}},
		broker.Deps{NATS: natstest.Connect(t, s), KeyStore: keystore.NewMemory()})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = b.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	<-b.Started()
	conn, err := b.Client(alpv1.Role_ROLE_IDENTITY)
	if err != nil {
		t.Fatal(err)
	}
	client := identityv1.NewIdentityServiceClient(conn)
	cctx, ccancel := context.WithTimeout(ctx, 10*time.Second)
	defer ccancel()
	if _, err := client.ErasePerson(cctx, &identityv1.ErasePersonRequest{Tenant: "example.org", PersonId: "p1"}); err != nil {
		t.Fatal(err)
	}
	for _, bad := range []*identityv1.ErasePersonRequest{
		{Tenant: "other.example", PersonId: "p1"},
		{Tenant: "example.org", PersonId: "a.b"},
		{Tenant: "example.org"},
	} {
		_, err := client.ErasePerson(cctx, bad)
		if status.Code(err) != codes.InvalidArgument {
			t.Errorf("%v: %v, want InvalidArgument", bad, err)
		}
	}
	js := b.Bus().JetStream()
	st, err := js.Stream(ctx, "ALPD_IDENTITY")
	if err != nil {
		t.Fatal(err)
	}
	m, err := st.GetLastMsgForSubject(ctx, "alp.identity.example_org.erasure.p1")
	if err != nil {
		t.Fatalf("no tombstone: %v", err)
	}
	if m.Header.Get("Alp-Event-Type") != "data_key_destroyed" {
		t.Fatalf("tombstone headers %v", m.Header)
	}
}
