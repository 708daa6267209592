package identity_test

import (
	"context"
	"testing"
	"time"

	"github.com/alpd-project/alpd/broker"
	identityv1 "github.com/alpd-project/alpd/gen/alp/identity/v1"
	alpv1 "github.com/alpd-project/alpd/gen/alp/v1"
	"github.com/alpd-project/alpd/internal/accesstoken"
	"github.com/alpd-project/alpd/internal/identitystore"
	"github.com/alpd-project/alpd/internal/keystore"
	"github.com/alpd-project/alpd/internal/natstest"
	"github.com/alpd-project/alpd/services/identity/oauthas"
)

// BenchmarkTokenCheck measures, in one run, the three ways a request's
// token can be checked: none (the floor: reading the header), local
// verification (signature, claims, revocation projection) and a gRPC
// Introspect call to identity (in-process transport, so the ratio is a
// lower bound for split mode). It reports ns per check and ratios.
func BenchmarkTokenCheck(b *testing.B) {
	s := natstest.RunJetStream(b)
	ks := keystore.NewMemory()
	br, err := broker.New(broker.Config{Name: "alpd", Tenants: []string{"example.org"}, PublicURL: "https://broker.example"},
		broker.Deps{NATS: natstest.Connect(b, s), KeyStore: ks})
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = br.Run(ctx); close(done) }()
	defer func() { cancel(); <-done }()
	<-br.Started()
	store := br.Identity().Store()
	person, _ := store.BindPerson(ctx, "example.org", "https://idp.example", "sub-1", "ana@example.org", nil)
	_, _ = store.RegisterClient(ctx, identitystore.ClientSpec{Tenant: "example.org", ClientID: "app",
		Kind: alpv1.ClientKind_CLIENT_KIND_PUBLIC_DCR, RedirectURIs: []string{"http://127.0.0.1/cb"}})
	grant, err := store.IssueGrant(ctx, identitystore.GrantSpec{Tenant: "example.org", PersonID: person.ID, ClientID: "app",
		AgentID: "agent-1", Scopes: []string{"alp.send"}, Resource: "https://broker.example"})
	if err != nil {
		b.Fatal(err)
	}
	issuer := &accesstoken.Issuer{Keys: ks, Issuers: map[string]string{"example.org": oauthas.IssuerURL("https://broker.example", "example.org")}}
	token, err := issuer.Mint(ctx, accesstoken.Claims{Subject: person.ID, Audience: "https://broker.example", Tenant: "example.org",
		ClientID: "app", AgentID: "agent-1", GrantID: grant.ID, Class: accesstoken.ClassConsumer, Scopes: []string{"alp.send"}})
	if err != nil {
		b.Fatal(err)
	}
	header := "Bearer " + token
	verifier := br.Identity().Verifier()
	conn, _ := br.Client(alpv1.Role_ROLE_IDENTITY)
	client := identityv1.NewIdentityServiceClient(conn)
	n := b.N
	b.ResetTimer()

	start := time.Now()
	for range n {
		if _, ok := accesstoken.BearerToken(header); !ok {
			b.Fatal("no token")
		}
	}
	floor := time.Since(start)

	start = time.Now()
	for range n {
		if _, err := verifier.Verify(ctx, token); err != nil {
			b.Fatal(err)
		}
	}
	local := time.Since(start)

	start = time.Now()
	for range n {
		res, err := client.Introspect(ctx, &identityv1.IntrospectRequest{Token: token})
		if err != nil || !res.GetActive() {
			b.Fatal(err, res)
		}
	}
	remote := time.Since(start)
	b.StopTimer()

	per := func(d time.Duration) float64 { return float64(d.Nanoseconds()) / float64(n) }
	b.ReportMetric(per(floor), "noauth-ns/req")
	b.ReportMetric(per(local), "local-ns/req")
	b.ReportMetric(per(remote), "introspect-ns/req")
	b.ReportMetric(float64(local)/float64(floor), "local/noauth")
	b.ReportMetric(float64(remote)/float64(floor), "introspect/noauth")
	b.ReportMetric(float64(remote)/float64(local), "introspect/local")
}
