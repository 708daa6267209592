package identity_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/alpd-project/alpd/broker"
	identityv1 "github.com/alpd-project/alpd/gen/alp/identity/v1"
	alpv1 "github.com/alpd-project/alpd/gen/alp/v1"
	"github.com/alpd-project/alpd/internal/accesstoken"
	"github.com/alpd-project/alpd/internal/identitystore"
	"github.com/alpd-project/alpd/internal/keystore"
	"github.com/alpd-project/alpd/internal/natstest"
	"github.com/alpd-project/alpd/services/identity/oauthas"
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

func TestIntrospect(t *testing.T) {
	s := natstest.RunJetStream(t)
	ks := keystore.NewMemory()
	b, err := broker.New(broker.Config{Name: "alpd", Tenants: []string{"example.org"}, PublicURL: "https://broker.example"},
		broker.Deps{NATS: natstest.Connect(t, s), KeyStore: ks})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = b.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	<-b.Started()
	if err := b.StartError(); err != nil {
		t.Fatal(err)
	}
	id := b.Identity()
	store := id.Store()
	person, err := store.BindPerson(ctx, "example.org", "https://idp.example", "sub-1", "ana@example.org", []string{"staff"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := store.RegisterClient(ctx, identitystore.ClientSpec{Tenant: "example.org", ClientID: "agent-app",
		Kind: alpv1.ClientKind_CLIENT_KIND_PUBLIC_DCR, RedirectURIs: []string{"http://127.0.0.1/cb"}}); err != nil {
		t.Fatal(err)
	}
	grant, err := store.IssueGrant(ctx, identitystore.GrantSpec{Tenant: "example.org", PersonID: person.ID, ClientID: "agent-app",
		AgentID: "agent-1", Scopes: []string{"alp.send"}, Resource: "https://broker.example"})
	if err != nil {
		t.Fatal(err)
	}
	issuer := &accesstoken.Issuer{Keys: ks, Issuers: map[string]string{"example.org": oauthas.IssuerURL("https://broker.example", "example.org")}}
	mint := func(aud string) string {
		tok, err := issuer.Mint(ctx, accesstoken.Claims{Subject: person.ID, Audience: aud, Tenant: "example.org",
			ClientID: "agent-app", AgentID: "agent-1", GrantID: grant.ID, Class: accesstoken.ClassConsumer, Scopes: []string{"alp.send"}})
		if err != nil {
			t.Fatal(err)
		}
		return tok
	}
	conn, err := b.Client(alpv1.Role_ROLE_IDENTITY)
	if err != nil {
		t.Fatal(err)
	}
	client := identityv1.NewIdentityServiceClient(conn)
	good := mint("https://broker.example")
	res, err := client.Introspect(ctx, &identityv1.IntrospectRequest{Token: good})
	if err != nil || !res.GetActive() || res.GetPersonId() != person.ID || res.GetTrustClass() != "consumer" || res.GetAgentId() != "agent-1" {
		t.Fatalf("introspect: %v %v", res, err)
	}
	res, _ = client.Introspect(ctx, &identityv1.IntrospectRequest{Token: mint("https://other.example")})
	if res.GetActive() || res.GetErrorCode() != "invalid_token" {
		t.Fatalf("other resource: %v", res)
	}
	// Ingress verifies locally on its own projection of identity's stream.
	var iv *accesstoken.Verifier
	for deadline := time.Now().Add(10 * time.Second); iv == nil; time.Sleep(20 * time.Millisecond) {
		if iv = b.Ingress().Verifier(); iv == nil && time.Now().After(deadline) {
			t.Fatal("ingress has no verifier")
		}
	}
	if c, err := iv.Verify(ctx, good); err != nil || c.Subject != person.ID {
		t.Fatalf("ingress verify: %v %v", c, err)
	}
	if err := store.RevokeGrant(ctx, "example.org", grant.ID, "test"); err != nil {
		t.Fatal(err)
	}
	// The revocation reaches ingress through the bus.
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if _, err := iv.Verify(ctx, good); errors.Is(err, accesstoken.ErrRevoked) {
			break
		} else if time.Now().After(deadline) {
			t.Fatalf("ingress still accepts a revoked grant: %v", err)
		}
	}
	res, _ = client.Introspect(ctx, &identityv1.IntrospectRequest{Token: good})
	if res.GetActive() {
		t.Fatalf("revoked grant still active: %v", res)
	}
	if strings.Contains(res.String(), good) {
		t.Fatal("the token is echoed in the answer")
	}
}
