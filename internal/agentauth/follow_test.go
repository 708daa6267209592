package agentauth_test

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	alpv1 "github.com/alpd-project/alpd/gen/alp/v1"
	"github.com/alpd-project/alpd/internal/accesstoken"
	"github.com/alpd-project/alpd/internal/agentauth"
	"github.com/alpd-project/alpd/internal/bus"
	"github.com/alpd-project/alpd/internal/identitystore"
	"github.com/alpd-project/alpd/internal/keystore"
	"github.com/alpd-project/alpd/internal/natstest"
	"github.com/alpd-project/alpd/internal/streams"
)

const (
	tenant   = "example.org"
	resource = "https://broker.example"
	metadata = "https://broker.example/.well-known/oauth-protected-resource"
)

// TestFollow follows an identity stream that appears only after Follow was
// called (split mode: identity starts later), then authenticates a real
// token on it, and stops on Close.
func TestFollow(t *testing.T) {
	nc := natstest.Connect(t, natstest.RunJetStream(t))
	b, err := bus.New(nc, bus.Options{Namespace: "t", Registerer: prometheus.NewRegistry()})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ks := keystore.NewMemory()
	if _, err := ks.Generate(ctx, tenant, accesstoken.Purpose); err != nil {
		t.Fatal(err)
	}
	if _, err := ks.Generate(ctx, tenant, alpv1.KeyPurpose_KEY_PURPOSE_DATA); err != nil {
		t.Fatal(err)
	}
	issuers := map[string]string{tenant: "https://broker.example/oauth/" + tenant}
	f := agentauth.Follow(ctx, agentauth.FollowOptions{Bus: b, Tenants: []string{tenant}, Keys: ks,
		Issuers: issuers, Resource: resource, ResourceMetadataURL: metadata, MaxStaleness: 10 * time.Second,
		Logger: slog.New(slog.DiscardHandler)})
	defer f.Close()

	// No identity stream yet: everything is temporarily unavailable.
	if err := f.Ready(); !errors.Is(err, agentauth.ErrNotFollowing) {
		t.Fatalf("Ready before the stream exists: %v", err)
	}
	if f.Verifier() != nil || f.Store() != nil {
		t.Fatal("verifier or store before the projection opened")
	}
	_, err = f.Authenticator().Authenticate(ctx, "Bearer abc.def.ghi", "alp.read")
	var ae *agentauth.Error
	if !errors.As(err, &ae) || ae.Status != http.StatusServiceUnavailable || !strings.Contains(ae.Challenge, metadata) {
		t.Fatalf("Authenticate before the projection opened: %#v", err)
	}

	// Identity starts: its stream appears, a person authorizes an agent.
	def, _ := streams.ByName(streams.Identity)
	if _, err := b.EnsureStream(ctx, def.Spec([]string{tenant}, streams.Limits{})); err != nil {
		t.Fatal(err)
	}
	cmds, err := identitystore.Open(ctx, b, ks, []string{tenant}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cmds.Close()
	person, err := cmds.BindPerson(ctx, tenant, "https://idp.example", "sub-ana", "ana@example.org", nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cmds.RegisterClient(ctx, identitystore.ClientSpec{Tenant: tenant, ClientID: "agent-app",
		Kind: alpv1.ClientKind_CLIENT_KIND_PUBLIC_DCR, RedirectURIs: []string{"http://127.0.0.1/cb"}}); err != nil {
		t.Fatal(err)
	}
	grant, err := cmds.IssueGrant(ctx, identitystore.GrantSpec{Tenant: tenant, PersonID: person.ID, ClientID: "agent-app",
		AgentID: "agent-1", Scopes: []string{"alp.read"}, Resource: resource})
	if err != nil {
		t.Fatal(err)
	}
	for f.Ready() != nil {
		if ctx.Err() != nil {
			t.Fatalf("never ready: %v", f.Ready())
		}
		time.Sleep(20 * time.Millisecond)
	}
	if f.Verifier() == nil || f.Store() == nil || f.MaxStaleness() != 10*time.Second {
		t.Fatal("ready without verifier or store")
	}
	is := &accesstoken.Issuer{Keys: ks, Issuers: issuers}
	tok, err := is.Mint(ctx, accesstoken.Claims{Subject: person.ID, Audience: resource, Tenant: tenant, ClientID: "agent-app",
		AgentID: "agent-1", GrantID: grant.ID, Class: accesstoken.ClassConsumer, Scopes: []string{"alp.read"}})
	if err != nil {
		t.Fatal(err)
	}
	// The person was bound before the token: wait until the follower saw it.
	var p agentauth.Principal
	for {
		if p, err = f.Authenticator().Authenticate(ctx, "Bearer "+tok, "alp.read"); err == nil || ctx.Err() != nil {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err != nil || p.PersonID != person.ID || p.Address != "ana@example.org" || p.AgentID != "agent-1" {
		t.Fatalf("Authenticate: %+v, %v", p, err)
	}
	if _, err := f.Authenticator().Authenticate(ctx, "Bearer "+tok, "alp.send"); !errors.As(err, &ae) || ae.Status != http.StatusForbidden {
		t.Fatalf("missing scope: %v", err)
	}

	f.Close()
	select {
	case <-f.Done():
	default:
		t.Fatal("Done not closed after Close")
	}
	if err := f.Ready(); err == nil {
		t.Fatal("ready after Close")
	}
	f.Close() // idempotent
}

// TestFollowStopsWithContext: the follower ends with its context even
// while it is still waiting for identity's stream.
func TestFollowStopsWithContext(t *testing.T) {
	nc := natstest.Connect(t, natstest.RunJetStream(t))
	b, err := bus.New(nc, bus.Options{Namespace: "t", Registerer: prometheus.NewRegistry()})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	f := agentauth.Follow(ctx, agentauth.FollowOptions{Bus: b, Tenants: []string{tenant}, Keys: keystore.NewMemory()})
	if f.MaxStaleness() != agentauth.DefaultMaxStaleness {
		t.Errorf("default staleness %v", f.MaxStaleness())
	}
	time.Sleep(150 * time.Millisecond) // at least one failed open
	cancel()
	select {
	case <-f.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("follower did not stop with its context")
	}
}
