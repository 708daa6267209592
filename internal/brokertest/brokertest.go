// Package brokertest runs a whole broker for tests of the code around it:
// a real nats-server on a random port with a temp store, an in-memory
// KeyStore, the broker's handler on a loopback HTTP server, and people whose
// agents hold real access tokens minted by the tenant's issuer.
package brokertest

import (
	"context"
	"log/slog"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"google.golang.org/grpc/metadata"

	"github.com/alpd-project/alpd/broker"
	policyv1 "github.com/alpd-project/alpd/gen/alp/policy/v1"
	alpv1 "github.com/alpd-project/alpd/gen/alp/v1"
	"github.com/alpd-project/alpd/internal/accesstoken"
	"github.com/alpd-project/alpd/internal/bus"
	"github.com/alpd-project/alpd/internal/identitystore"
	"github.com/alpd-project/alpd/internal/keystore"
	"github.com/alpd-project/alpd/internal/natstest"
	"github.com/alpd-project/alpd/internal/streams"
	"github.com/alpd-project/alpd/internal/testkit"
	"github.com/alpd-project/alpd/services/identity"
	"github.com/alpd-project/alpd/services/policy"
	"github.com/alpd-project/alpd/services/policy/rules"
)

// PublicURL is the broker's public URL unless the config names another.
const PublicURL = "https://broker.example"

// ClientID is the OAuth client every test agent uses (a public, consumer
// class client).
const ClientID = "agent-app"

// Rig is a running broker.
type Rig struct {
	B   *broker.Broker
	KS  keystore.KeyStore
	NC  *nats.Conn
	Srv *httptest.Server
	cfg broker.Config
	// clients records the tenants whose ClientID is registered.
	clients map[string]bool
}

// Start runs a broker with cfg (Name "alpd" and PublicURL when unset) until
// the test ends, and waits until it is ready.
func Start(t testing.TB, cfg broker.Config) *Rig {
	t.Helper()
	return StartLogged(t, cfg, nil)
}

// StartLogged is Start with the broker logging to log (nil: discarded), for
// tests that check what the broker logs.
func StartLogged(t testing.TB, cfg broker.Config, log *slog.Logger) *Rig {
	t.Helper()
	return StartWithStreamsOf(t, cfg, log)
}

// StartWithStreamsOf is StartLogged on a NATS that already holds the
// streams of owners, as if those services had run and stopped: a broker
// running only some services (cfg.Services) still finds the streams it
// follows (ingress follows the message types on policy's stream).
func StartWithStreamsOf(t testing.TB, cfg broker.Config, log *slog.Logger, owners ...alpv1.Role) *Rig {
	t.Helper()
	if cfg.Name == "" {
		cfg.Name = "alpd"
	}
	if cfg.PublicURL == "" {
		cfg.PublicURL = PublicURL
	}
	nc := natstest.Connect(t, natstest.RunJetStream(t))
	if len(owners) > 0 {
		b, err := bus.New(nc, bus.Options{Namespace: cfg.Name})
		if err != nil {
			t.Fatal(err)
		}
		for _, role := range owners {
			for _, spec := range streams.Owned(role, cfg.Tenants, streams.Limits{}) {
				if _, err := b.EnsureStream(context.Background(), spec); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	ks := keystore.NewMemory()
	b, err := broker.New(cfg, broker.Deps{NATS: nc, KeyStore: ks, Logger: log})
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
	r := &Rig{B: b, KS: ks, NC: nc, cfg: cfg, clients: map[string]bool{}}
	r.Srv = httptest.NewServer(b.Handler())
	t.Cleanup(r.Srv.Close)
	testkit.Eventually(t, 20*time.Second, b.Ready, "broker ready")
	return r
}

// Agent is one person's agent with its token.
type Agent struct {
	Person  identitystore.Person
	Grant   identitystore.Grant
	AgentID string
	Token   string
}

// Agent binds the person (subject at the test IdP, address) if new, grants
// an agent of theirs scopes, and mints it a consumer-class token. It waits
// until ingress (when it runs here) accepts the token, so callers never
// race the identity projection.
func (r *Rig) Agent(t testing.TB, tenant, subject, address, agentID string, scopes ...string) Agent {
	t.Helper()
	ctx := context.Background()
	store := r.B.Identity().Store()
	if !r.clients[tenant] {
		if _, err := store.RegisterClient(ctx, identitystore.ClientSpec{Tenant: tenant, ClientID: ClientID,
			Kind: alpv1.ClientKind_CLIENT_KIND_PUBLIC_DCR, RedirectURIs: []string{"http://127.0.0.1/cb"}}); err != nil {
			t.Fatal(err)
		}
		r.clients[tenant] = true
	}
	p, err := store.PersonBySubject(ctx, tenant, "https://idp.example", subject)
	if err != nil {
		if p, err = store.BindPerson(ctx, tenant, "https://idp.example", subject, address, nil); err != nil {
			t.Fatal(err)
		}
	}
	g, err := store.IssueGrant(ctx, identitystore.GrantSpec{Tenant: tenant, PersonID: p.ID, ClientID: ClientID,
		AgentID: agentID, Scopes: scopes, Resource: r.cfg.PublicURL})
	if err != nil {
		t.Fatal(err)
	}
	a := Agent{Person: p, Grant: g, AgentID: agentID}
	a.Token = r.Mint(t, a, accesstoken.ClassConsumer, scopes...)
	if in := r.B.Ingress(); in != nil {
		testkit.Eventually(t, 10*time.Second, func() error {
			_, err := in.Authenticator().Authenticate(ctx, "Bearer "+a.Token)
			return err
		}, "ingress accepts the token")
	}
	return a
}

// AgentSpec describes an agent of a person for NamedAgent.
type AgentSpec struct {
	Tenant, Subject, Address string
	AgentID                  string
	// Name is the client's registered name (what the sender line says).
	Name string
	// Company registers the client as a confidential client of the
	// tenant, so the agent is company class; otherwise a public client,
	// consumer class.
	Company bool
	Scopes  []string
}

// NamedAgent is Agent with a client of its own: named, and confidential
// (company class, attested by the tenant) or public (consumer,
// self-attested), the token of the matching class.
func (r *Rig) NamedAgent(t testing.TB, spec AgentSpec) Agent {
	t.Helper()
	ctx := context.Background()
	store := r.B.Identity().Store()
	clientID := "client-" + spec.AgentID
	cs := identitystore.ClientSpec{Tenant: spec.Tenant, ClientID: clientID, Name: spec.Name,
		Kind: alpv1.ClientKind_CLIENT_KIND_PUBLIC_DCR, RedirectURIs: []string{"http://127.0.0.1/cb"}}
	p, err := store.PersonBySubject(ctx, spec.Tenant, "https://idp.example", spec.Subject)
	if err != nil {
		if p, err = store.BindPerson(ctx, spec.Tenant, "https://idp.example", spec.Subject, spec.Address, nil); err != nil {
			t.Fatal(err)
		}
	}
	class := accesstoken.ClassConsumer
	if spec.Company {
		// The registration names a person of the tenant (an admin in
		// life); the agent's own person will do for a test.
		cs.Kind, cs.RegisteredBy, cs.SecretSHA256, class = alpv1.ClientKind_CLIENT_KIND_CONFIDENTIAL, p.ID, identitystore.Hash{1}, accesstoken.ClassCompany
	}
	if _, err := store.RegisterClient(ctx, cs); err != nil {
		t.Fatal(err)
	}
	g, err := store.IssueGrant(ctx, identitystore.GrantSpec{Tenant: spec.Tenant, PersonID: p.ID, ClientID: clientID,
		AgentID: spec.AgentID, Scopes: spec.Scopes, Resource: r.cfg.PublicURL})
	if err != nil {
		t.Fatal(err)
	}
	a := Agent{Person: p, Grant: g, AgentID: spec.AgentID}
	issuer := &accesstoken.Issuer{Keys: r.KS, Issuers: map[string]string{p.Tenant: identity.IssuerURL(r.cfg.PublicURL, p.Tenant)}}
	if a.Token, err = issuer.Mint(ctx, accesstoken.Claims{Subject: p.ID, Audience: r.cfg.PublicURL, Tenant: p.Tenant,
		ClientID: clientID, AgentID: spec.AgentID, GrantID: g.ID, Class: class, Scopes: spec.Scopes}); err != nil {
		t.Fatal(err)
	}
	if in := r.B.Ingress(); in != nil {
		testkit.Eventually(t, 10*time.Second, func() error {
			_, err := in.Authenticator().Authenticate(ctx, "Bearer "+a.Token)
			return err
		}, "ingress accepts the token")
	}
	return a
}

// Mint issues a's agent another token, of class and with scopes (which may
// exceed the grant's: the token is what is tested).
func (r *Rig) Mint(t testing.TB, a Agent, class string, scopes ...string) string {
	t.Helper()
	issuer := &accesstoken.Issuer{Keys: r.KS, Issuers: map[string]string{a.Person.Tenant: identity.IssuerURL(r.cfg.PublicURL, a.Person.Tenant)}}
	tok, err := issuer.Mint(context.Background(), accesstoken.Claims{Subject: a.Person.ID, Audience: r.cfg.PublicURL,
		Tenant: a.Person.Tenant, ClientID: ClientID, AgentID: a.AgentID, GrantID: a.Grant.ID, Class: class, Scopes: scopes})
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// OptInFreeText has the operator push person's recipient rules without the
// template's free-text forbid (freetext-off), as the person would by
// deleting it: free-text fields then reach their agents.
func (r *Rig) OptInFreeText(t testing.TB, tenant, personID string) {
	t.Helper()
	template, err := rules.Template(rules.PartyRecipient)
	if err != nil {
		t.Fatal(err)
	}
	text := string(template)
	start := strings.Index(text, `@id("freetext-off")`)
	if start < 0 {
		t.Fatal(`the recipient template has no @id("freetext-off")`)
	}
	end := start + strings.Index(text[start:], "};") + 2
	conn, err := r.B.Client(alpv1.Role_ROLE_POLICY)
	if err != nil {
		t.Fatal(err)
	}
	ctx := metadata.AppendToOutgoingContext(context.Background(), policy.OperatorMetadata, "brokertest")
	if _, err := policyv1.NewPolicyServiceClient(conn).PushRuleSet(ctx, &policyv1.PushRuleSetRequest{
		Tenant: tenant, Party: string(rules.PartyRecipient), Owner: personID, Text: text[:start] + text[end:]}); err != nil {
		t.Fatal(err)
	}
}
