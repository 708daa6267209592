package identitystore

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/protobuf/types/known/timestamppb"

	alpv1 "github.com/alpd-project/alpd/gen/alp/v1"
	"github.com/alpd-project/alpd/internal/bus"
	"github.com/alpd-project/alpd/internal/keystore"
	"github.com/alpd-project/alpd/internal/natstest"
	"github.com/alpd-project/alpd/internal/streams"
	"github.com/alpd-project/alpd/internal/testkit"
)

const (
	tenant = "example.org"
	other  = "other.example"
	iss    = "https://idp.example.org"
)

var hosted = []string{tenant, other}

// rig is a broker's identity stream on a real JetStream server.
type rig struct {
	b  *bus.Bus
	js jetstream.JetStream
	ks keystore.KeyStore
}

func connect(t *testing.T, srv *server.Server) *rig {
	t.Helper()
	nc := natstest.Connect(t, srv, nats.MaxReconnects(-1), nats.ReconnectWait(100*time.Millisecond))
	b, err := bus.New(nc, bus.Options{Namespace: "t", Registerer: prometheus.NewRegistry()})
	if err != nil {
		t.Fatal(err)
	}
	ks := keystore.NewMemory()
	for _, tn := range hosted {
		if _, err := ks.Generate(context.Background(), tn, alpv1.KeyPurpose_KEY_PURPOSE_DATA); err != nil {
			t.Fatal(err)
		}
	}
	return &rig{b: b, js: b.JetStream(), ks: ks}
}

// newEnv starts a server and creates the identity stream, as the identity
// service does at start.
func newRig(t *testing.T) *rig {
	t.Helper()
	e := connect(t, natstest.RunJetStream(t))
	e.ensureStream(t)
	return e
}

func (e *rig) ensureStream(t *testing.T) {
	t.Helper()
	def, _ := streams.ByName(streams.Identity)
	if _, err := e.b.EnsureStream(context.Background(), def.Spec(hosted, streams.Limits{})); err != nil {
		t.Fatal(err)
	}
}

func (e *rig) open(t *testing.T, tenants ...string) *Store {
	t.Helper()
	if len(tenants) == 0 {
		tenants = hosted
	}
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	s, err := Open(ctx, e.b, e.ks, tenants, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s
}

// messages returns every message of the identity stream.
func (e *rig) messages(t *testing.T) []*jetstream.RawStreamMsg {
	t.Helper()
	ctx := context.Background()
	st, err := e.js.Stream(ctx, e.b.StreamName(streams.Identity))
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var out []*jetstream.RawStreamMsg
	for seq := info.State.FirstSeq; seq <= info.State.LastSeq && info.State.Msgs > 0; seq++ {
		m, err := st.GetMsg(ctx, seq)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, m)
	}
	return out
}

// kinds counts the stream's events by kind.
func (e *rig) kinds(t *testing.T) map[string]int {
	t.Helper()
	out := map[string]int{}
	for _, m := range e.messages(t) {
		out[m.Header.Get(bus.HeaderEventType)]++
	}
	return out
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func mustBind(t *testing.T, s *Store, subject, address string, roles ...string) Person {
	t.Helper()
	p, err := s.BindPerson(ctxT(t), tenant, iss, subject, address, roles)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func wantErr(t *testing.T, err, target error, field string) {
	t.Helper()
	if !errors.Is(err, target) || !strings.Contains(fmt.Sprint(err), field) {
		t.Errorf("got %v, want %v naming %q", err, target, field)
	}
}

func TestBindPerson(t *testing.T) {
	t.Parallel()
	e := newRig(t)
	s := e.open(t)
	ana := mustBind(t, s, "sub-ana", "ana@example.org", "staff", "admin", "staff")
	if !strings.HasPrefix(ana.ID, "p_") || len(ana.ID) != 34 || ana.Tenant != tenant || ana.Issuer != iss ||
		ana.Subject != "sub-ana" || ana.Address != "ana@example.org" || !slices.Equal(ana.Roles, []string{"admin", "staff"}) ||
		ana.Bound.IsZero() {
		t.Fatalf("bound %+v", ana)
	}
	if got, err := s.PersonBySubject(ctxT(t), tenant, iss, "sub-ana"); err != nil || !reflect.DeepEqual(got, ana) {
		t.Fatalf("PersonBySubject = %+v, %v", got, err)
	}
	if got, err := s.Person(ctxT(t), tenant, ana.ID); err != nil || !reflect.DeepEqual(got, ana) {
		t.Fatalf("Person = %+v, %v", got, err)
	}
	// The same account again: the same person, nothing stored.
	again := mustBind(t, s, "sub-ana", "ana@example.org", "admin", "staff")
	if !reflect.DeepEqual(again, ana) {
		t.Fatalf("second sign-in %+v, want %+v", again, ana)
	}
	if k := e.kinds(t); k["person_bound"] != 1 || k["person_updated"] != 0 {
		t.Fatalf("events %v", k)
	}
	// Roles changed at the IdP: one PersonUpdated.
	upd := mustBind(t, s, "sub-ana", "ana@example.org", "staff")
	if upd.ID != ana.ID || !slices.Equal(upd.Roles, []string{"staff"}) {
		t.Fatalf("updated %+v", upd)
	}
	if k := e.kinds(t); k["person_bound"] != 1 || k["person_updated"] != 1 {
		t.Fatalf("events %v", k)
	}
	// Another issuer's account with the same subject is another person.
	bo, err := s.BindPerson(ctxT(t), tenant, "https://other-idp.example", "sub-ana", "bo@example.org", nil)
	if err != nil || bo.ID == ana.ID {
		t.Fatalf("other issuer: %+v, %v", bo, err)
	}
	if id, err := (PersonIDBinder{s}).BindPerson(ctxT(t), tenant, iss, "sub-ana", "ana@example.org", []string{"staff"}); err != nil || id != ana.ID {
		t.Fatalf("PersonIDBinder = %q, %v", id, err)
	}
	// Tenants are separate.
	if _, err := s.PersonBySubject(ctxT(t), other, iss, "sub-ana"); !errors.Is(err, ErrNotFound) {
		t.Errorf("other tenant: %v", err)
	}
	if _, err := s.Person(ctxT(t), tenant, "p_nobody"); !errors.Is(err, ErrNotFound) {
		t.Errorf("unknown person: %v", err)
	}
	if _, err := s.BindPerson(ctxT(t), "unhosted.example", iss, "x", "x@unhosted.example", nil); !errors.Is(err, ErrNotHosted) {
		t.Errorf("unhosted tenant: %v", err)
	}
	if _, err := s.Person(ctxT(t), "unhosted.example", ana.ID); !errors.Is(err, ErrNotHosted) {
		t.Errorf("unhosted tenant query: %v", err)
	}
}

func TestBindPersonValidation(t *testing.T) {
	t.Parallel()
	e := newRig(t)
	s := e.open(t)
	before := len(e.messages(t))
	for _, tc := range []struct {
		issuer, subject, address string
		roles                    []string
		field                    string
	}{
		{"", "s", "a@example.org", nil, "issuer"},
		{"ftp://idp.example", "s", "a@example.org", nil, "issuer"},
		{"https://idp.example?x=1", "s", "a@example.org", nil, "issuer"},
		{"https://u:p@idp.example", "s", "a@example.org", nil, "issuer"},
		{iss, "", "a@example.org", nil, "subject"},
		{iss, "a\nb", "a@example.org", nil, "subject"},
		{iss, strings.Repeat("s", 300), "a@example.org", nil, "subject"},
		{iss, "s", "", nil, "address"},
		{iss, "s", "ana", nil, "address"},
		{iss, "s", "ana@Example.org", nil, "address"},
		{iss, "s", "a@b@example.org", nil, "address"},
		{iss, "s", "a@example.org", []string{""}, "roles"},
	} {
		_, err := s.BindPerson(ctxT(t), tenant, tc.issuer, tc.subject, tc.address, tc.roles)
		wantErr(t, err, ErrInvalid, tc.field)
	}
	if after := len(e.messages(t)); after != before {
		t.Errorf("invalid input stored %d events", after-before)
	}
}

func TestClients(t *testing.T) {
	t.Parallel()
	e := newRig(t)
	s := e.open(t)
	ctx := ctxT(t)
	admin := mustBind(t, s, "sub-admin", "admin@example.org", "admin")
	conf, err := s.RegisterClient(ctx, ClientSpec{Tenant: tenant, ClientID: "corp-agent", Kind: alpv1.ClientKind_CLIENT_KIND_CONFIDENTIAL,
		RedirectURIs: []string{"https://agent.example.org/cb"}, Name: "Corp agent", SecretSHA256: HashSecret("s3cret-value"), RegisteredBy: admin.ID})
	if err != nil {
		t.Fatal(err)
	}
	if conf.Class() != alpv1.TrustClass_TRUST_CLASS_COMPANY || conf.RegisteredBy != admin.ID || !conf.SecretSHA256.Equal(HashSecret("s3cret-value")) ||
		conf.Registered.IsZero() {
		t.Fatalf("confidential %+v", conf)
	}
	if got, err := s.Client(tenant, "corp-agent"); err != nil || !reflect.DeepEqual(got, conf) {
		t.Fatalf("Client = %+v, %v", got, err)
	}
	if _, err := s.RegisterClient(ctx, ClientSpec{Tenant: tenant, ClientID: "corp-agent", Kind: alpv1.ClientKind_CLIENT_KIND_PUBLIC_DCR,
		RedirectURIs: []string{"http://127.0.0.1:9999/cb"}}); !errors.Is(err, ErrExists) {
		t.Fatalf("second registration: %v", err)
	}
	// A CIMD client id is a URL: its subject token is a hash.
	cimdID := "https://vendor.example/.well-known/client.json"
	cimd, err := s.RegisterClient(ctx, ClientSpec{Tenant: tenant, ClientID: cimdID, Kind: alpv1.ClientKind_CLIENT_KIND_PUBLIC_CIMD,
		RedirectURIs: []string{"https://vendor.example/cb"}})
	if err != nil {
		t.Fatal(err)
	}
	if cimd.RegisteredBy != RegisteredByCIMD || cimd.Class() != alpv1.TrustClass_TRUST_CLASS_CONSUMER {
		t.Fatalf("cimd %+v", cimd)
	}
	last := e.messages(t)
	if subj := last[len(last)-1].Subject; subj != "alp.identity.example_org.client."+shortHash(cimdID) {
		t.Errorf("CIMD client on %s", subj)
	}
	jwks := []byte(`{"keys":[{"kty":"OKP","crv":"Ed25519","x":"11qYAYKxCrfVS_7TyWQHOg7hcvPapiMlrwIaaPcHURo"}]}`)
	if _, err := s.RegisterClient(ctx, ClientSpec{Tenant: tenant, ClientID: "jwt-agent", Kind: alpv1.ClientKind_CLIENT_KIND_CONFIDENTIAL,
		RedirectURIs: []string{"https://agent.example.org/cb"}, JWKS: jwks, RegisteredBy: admin.ID}); err != nil {
		t.Fatal(err)
	}
	// A public vendor client becomes company class once an admin binds an
	// attestation.
	dcr, err := s.RegisterClient(ctx, ClientSpec{Tenant: tenant, ClientID: "dcr-123", Kind: alpv1.ClientKind_CLIENT_KIND_PUBLIC_DCR,
		RedirectURIs: []string{"http://127.0.0.1:8765/callback"}})
	if err != nil || dcr.RegisteredBy != RegisteredByDCR || dcr.Class() != alpv1.TrustClass_TRUST_CLASS_CONSUMER {
		t.Fatalf("dcr %+v, %v", dcr, err)
	}
	att, err := s.BindVendorAttestation(ctx, tenant, "dcr-123", "vendor-x attested 2026", admin.ID)
	if err != nil {
		t.Fatal(err)
	}
	if att.VendorAttestation != "vendor-x attested 2026" || att.AttestedBy != admin.ID || att.Class() != alpv1.TrustClass_TRUST_CLASS_COMPANY {
		t.Fatalf("attested %+v", att)
	}
	if again, err := s.BindVendorAttestation(ctx, tenant, "dcr-123", "vendor-x attested 2026", admin.ID); err != nil || !reflect.DeepEqual(again, att) {
		t.Fatalf("same attestation again: %+v, %v", again, err)
	}
	if k := e.kinds(t); k["vendor_attestation_bound"] != 1 || k["client_registered"] != 4 {
		t.Fatalf("events %v", k)
	}
	if _, err := s.BindVendorAttestation(ctx, tenant, "corp-agent", "x", admin.ID); !errors.Is(err, ErrInvalid) {
		t.Errorf("attestation on a confidential client: %v", err)
	}
	if _, err := s.BindVendorAttestation(ctx, tenant, "nope", "x", admin.ID); !errors.Is(err, ErrNotFound) {
		t.Errorf("attestation on an unknown client: %v", err)
	}
	if _, err := s.BindVendorAttestation(ctx, tenant, "dcr-123", "y", "p_nobody"); !errors.Is(err, ErrNotFound) {
		t.Errorf("attestation by an unknown admin: %v", err)
	}

	before := len(e.messages(t))
	good := func() ClientSpec {
		return ClientSpec{Tenant: tenant, ClientID: "c", Kind: alpv1.ClientKind_CLIENT_KIND_CONFIDENTIAL,
			RedirectURIs: []string{"https://a.example/cb"}, SecretSHA256: HashSecret("x"), RegisteredBy: admin.ID}
	}
	for _, tc := range []struct {
		mod   func(c *ClientSpec)
		err   error
		field string
	}{
		{func(c *ClientSpec) { c.ClientID = "" }, ErrInvalid, "client_id"},
		{func(c *ClientSpec) { c.Kind = alpv1.ClientKind_CLIENT_KIND_UNSPECIFIED }, ErrInvalid, "kind"},
		{func(c *ClientSpec) { c.RedirectURIs = nil }, ErrInvalid, "redirect_uris"},
		{func(c *ClientSpec) { c.RedirectURIs = []string{"https://a.example/cb#frag"} }, ErrInvalid, "redirect_uris"},
		{func(c *ClientSpec) { c.RedirectURIs = []string{"javascript:alert(1)"} }, ErrInvalid, "redirect_uris"},
		{func(c *ClientSpec) { c.SecretSHA256 = Hash{} }, ErrInvalid, "secret_sha256"},
		{func(c *ClientSpec) { c.JWKSURI = "https://a.example/jwks" }, ErrInvalid, "secret_sha256"},
		{func(c *ClientSpec) { c.SecretSHA256 = Hash{}; c.JWKSURI = "http://a.example/jwks" }, ErrInvalid, "jwks_uri"},
		{func(c *ClientSpec) {
			c.SecretSHA256 = Hash{}
			c.JWKS = []byte(`{"keys":[{"kty":"OKP","crv":"Ed25519","x":"AA","d":"BB"}]}`)
		}, ErrInvalid, "jwks"},
		{func(c *ClientSpec) {
			c.SecretSHA256 = Hash{}
			c.JWKS = []byte(`{"keys":[{"kty":"oct","k":"c2VjcmV0"}]}`)
		}, ErrInvalid, "jwks"},
		{func(c *ClientSpec) { c.SecretSHA256 = Hash{}; c.JWKS = []byte(`not json`) }, ErrInvalid, "jwks"},
		{func(c *ClientSpec) { c.VendorAttestation = "x" }, ErrInvalid, "vendor_attestation"},
		{func(c *ClientSpec) { c.RegisteredBy = "p_nobody" }, ErrNotFound, "registered_by"},
		{func(c *ClientSpec) { c.Kind = alpv1.ClientKind_CLIENT_KIND_PUBLIC_DCR }, ErrInvalid, "secret_sha256"},
		{func(c *ClientSpec) { c.Kind = alpv1.ClientKind_CLIENT_KIND_PUBLIC_DCR; c.SecretSHA256 = Hash{} }, ErrInvalid, "registered_by"},
		{func(c *ClientSpec) { c.Kind = alpv1.ClientKind_CLIENT_KIND_PUBLIC_CIMD; c.SecretSHA256 = Hash{} }, ErrInvalid, "client_id"},
		{func(c *ClientSpec) { c.Name = "bad\x00name" }, ErrInvalid, "client_name"},
	} {
		c := good()
		tc.mod(&c)
		_, err := s.RegisterClient(ctx, c)
		wantErr(t, err, tc.err, tc.field)
	}
	if after := len(e.messages(t)); after != before {
		t.Errorf("invalid input stored %d events", after-before)
	}
}

// world is a person with a confidential (company) and a DCR (consumer)
// client.
type world struct {
	person         Person
	company, sleep Client
}

func setupWorld(t *testing.T, s *Store) world {
	t.Helper()
	ctx := ctxT(t)
	p := mustBind(t, s, "sub-"+randomHex(), "ana@example.org")
	company, err := s.RegisterClient(ctx, ClientSpec{Tenant: tenant, ClientID: "corp-" + randomHex(), Kind: alpv1.ClientKind_CLIENT_KIND_CONFIDENTIAL,
		RedirectURIs: []string{"https://agent.example.org/cb"}, SecretSHA256: HashSecret(randomHex()), RegisteredBy: p.ID})
	if err != nil {
		t.Fatal(err)
	}
	consumer, err := s.RegisterClient(ctx, ClientSpec{Tenant: tenant, ClientID: "dcr-" + randomHex(), Kind: alpv1.ClientKind_CLIENT_KIND_PUBLIC_DCR,
		RedirectURIs: []string{"http://127.0.0.1:8765/cb"}})
	if err != nil {
		t.Fatal(err)
	}
	return world{p, company, consumer}
}

func TestGrantsAndRefreshRotation(t *testing.T) {
	t.Parallel()
	e := newRig(t)
	s := e.open(t)
	ctx := ctxT(t)
	w := setupWorld(t, s)
	rt1, rt2, rt3 := HashSecret("refresh-1"), HashSecret("refresh-2"), HashSecret("refresh-3")
	g, err := s.IssueGrant(ctx, GrantSpec{Tenant: tenant, PersonID: w.person.ID, ClientID: w.company.ID, AgentID: "agent-1",
		Scopes: []string{"alp.send", "alp.inbox", "alp.send"}, Resource: "https://broker.example.org/mcp", RefreshSHA256: rt1})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(g.ID, "g_") || g.Class != alpv1.TrustClass_TRUST_CLASS_COMPANY || g.PersonID != w.person.ID ||
		!slices.Equal(g.Scopes, []string{"alp.inbox", "alp.send"}) || g.RefreshGeneration != 1 || !g.RefreshSHA256.Equal(rt1) ||
		g.Issued.IsZero() || g.Revoked {
		t.Fatalf("grant %+v", g)
	}
	if got, err := s.GrantByRefreshHash(tenant, rt1); err != nil || got.ID != g.ID {
		t.Fatalf("GrantByRefreshHash = %+v, %v", got, err)
	}
	if revoked, why := s.Revoked(tenant, w.person.ID, g.ID, time.Now()); revoked {
		t.Fatalf("fresh grant revoked: %s", why)
	}

	// Trust class follows the client: a consumer client cannot get company.
	cg, err := s.IssueGrant(ctx, GrantSpec{Tenant: tenant, PersonID: w.person.ID, ClientID: w.sleep.ID, AgentID: "agent-2"})
	if err != nil || cg.Class != alpv1.TrustClass_TRUST_CLASS_CONSUMER || cg.RefreshGeneration != 0 {
		t.Fatalf("consumer grant %+v, %v", cg, err)
	}
	_, err = s.IssueGrant(ctx, GrantSpec{Tenant: tenant, PersonID: w.person.ID, ClientID: w.sleep.ID, AgentID: "agent-2",
		Class: alpv1.TrustClass_TRUST_CLASS_COMPANY})
	wantErr(t, err, ErrInvalid, "class")
	lowered, err := s.IssueGrant(ctx, GrantSpec{Tenant: tenant, PersonID: w.person.ID, ClientID: w.company.ID, AgentID: "agent-3",
		Class: alpv1.TrustClass_TRUST_CLASS_CONSUMER})
	if err != nil || lowered.Class != alpv1.TrustClass_TRUST_CLASS_CONSUMER {
		t.Fatalf("lowered class: %+v, %v", lowered, err)
	}
	for _, tc := range []struct {
		spec  GrantSpec
		err   error
		field string
	}{
		{GrantSpec{Tenant: tenant, PersonID: "p_nobody", ClientID: w.company.ID, AgentID: "a"}, ErrNotFound, "person"},
		{GrantSpec{Tenant: tenant, PersonID: w.person.ID, ClientID: "nope", AgentID: "a"}, ErrNotFound, "client"},
		{GrantSpec{Tenant: tenant, PersonID: w.person.ID, ClientID: w.company.ID, AgentID: ""}, ErrInvalid, "agent_id"},
		{GrantSpec{Tenant: tenant, PersonID: w.person.ID, ClientID: w.company.ID, AgentID: "a.b"}, ErrInvalid, "agent_id"},
		{GrantSpec{Tenant: tenant, PersonID: w.person.ID, ClientID: w.company.ID, AgentID: "a", Scopes: []string{"a b"}}, ErrInvalid, "scopes"},
		{GrantSpec{Tenant: tenant, PersonID: w.person.ID, ClientID: w.company.ID, AgentID: "a", Resource: "urn:x"}, ErrInvalid, "resource"},
		{GrantSpec{Tenant: tenant, PersonID: w.person.ID, ClientID: w.company.ID, AgentID: "a", RefreshSHA256: rt1}, ErrExists, "refresh"},
	} {
		_, err := s.IssueGrant(ctx, tc.spec)
		wantErr(t, err, tc.err, tc.field)
	}

	// Rotation: the current token buys the next one.
	if err := s.RotateRefresh(ctx, tenant, g.ID, rt1, rt2); err != nil {
		t.Fatal(err)
	}
	g2, _ := s.Grant(tenant, g.ID)
	if g2.RefreshGeneration != 2 || !g2.RefreshSHA256.Equal(rt2) {
		t.Fatalf("after rotation %+v", g2)
	}
	// Repeating the stored rotation (a retry) is not reuse.
	if err := s.RotateRefresh(ctx, tenant, g.ID, rt1, rt2); err != nil {
		t.Fatalf("retried rotation: %v", err)
	}
	// A spent token still leads to its grant (to detect reuse).
	if got, err := s.GrantByRefreshHash(tenant, rt1); err != nil || got.ID != g.ID || got.RefreshSHA256.Equal(rt1) {
		t.Fatalf("spent token lookup = %+v, %v", got, err)
	}
	if err := s.RotateRefresh(ctx, tenant, g.ID, rt1, rt1); !errors.Is(err, ErrInvalid) {
		t.Errorf("next = presented: %v", err)
	}
	if err := s.RotateRefresh(ctx, tenant, "g_nope", rt2, rt3); !errors.Is(err, ErrNotFound) {
		t.Errorf("unknown grant: %v", err)
	}
	// Reuse of the spent generation revokes the grant.
	if err := s.RotateRefresh(ctx, tenant, g.ID, rt1, rt3); !errors.Is(err, ErrRefreshReuse) {
		t.Fatalf("reuse: %v", err)
	}
	g3, _ := s.Grant(tenant, g.ID)
	if !g3.Revoked || g3.RevokedReason != ReasonRefreshReuse {
		t.Fatalf("after reuse %+v", g3)
	}
	if revoked, why := s.Revoked(tenant, w.person.ID, g.ID, time.Now()); !revoked || !strings.Contains(why, ReasonRefreshReuse) {
		t.Fatalf("Revoked after reuse = %v %q", revoked, why)
	}
	// The legitimate holder's current token is dead too.
	if err := s.RotateRefresh(ctx, tenant, g.ID, rt2, rt3); !errors.Is(err, ErrRevoked) {
		t.Fatalf("rotation of a revoked grant: %v", err)
	}
	if k := e.kinds(t); k["refresh_token_rotated"] != 1 || k["grant_revoked"] != 1 || k["grant_issued"] != 3 {
		t.Fatalf("events %v", k)
	}
	// Other grants are untouched.
	if revoked, why := s.Revoked(tenant, w.person.ID, cg.ID, time.Now()); revoked {
		t.Fatalf("other grant revoked: %s", why)
	}
	if revoked, _ := s.Revoked(tenant, "p_other", cg.ID, time.Now()); !revoked {
		t.Error("a grant answered for another person")
	}
	if revoked, _ := s.Revoked(tenant, w.person.ID, "g_unknown", time.Now()); !revoked {
		t.Error("an unknown grant is not revoked")
	}
	if revoked, _ := s.Revoked("unhosted.example", w.person.ID, cg.ID, time.Now()); !revoked {
		t.Error("an unhosted tenant's grant is not revoked")
	}
}

func TestRevokeGrant(t *testing.T) {
	t.Parallel()
	e := newRig(t)
	s := e.open(t)
	ctx := ctxT(t)
	w := setupWorld(t, s)
	g, err := s.IssueGrant(ctx, GrantSpec{Tenant: tenant, PersonID: w.person.ID, ClientID: w.company.ID, AgentID: "a", RefreshSHA256: HashSecret("r")})
	if err != nil {
		t.Fatal(err)
	}
	wantErr(t, s.RevokeGrant(ctx, tenant, g.ID, ""), ErrInvalid, "reason")
	if err := s.RevokeGrant(ctx, tenant, g.ID, "agent uninstalled"); err != nil {
		t.Fatal(err)
	}
	if err := s.RevokeGrant(ctx, tenant, g.ID, "again"); err != nil {
		t.Fatal(err)
	}
	got, _ := s.Grant(tenant, g.ID)
	if !got.Revoked || got.RevokedReason != "agent uninstalled" {
		t.Fatalf("revoked grant %+v", got)
	}
	if k := e.kinds(t); k["grant_revoked"] != 1 {
		t.Fatalf("events %v", k)
	}
	if err := s.RevokeGrant(ctx, tenant, "g_nope", "x"); !errors.Is(err, ErrNotFound) {
		t.Errorf("unknown grant: %v", err)
	}
	if err := s.RotateRefresh(ctx, tenant, g.ID, HashSecret("r"), HashSecret("r2")); !errors.Is(err, ErrRevoked) {
		t.Errorf("rotating a revoked grant: %v", err)
	}
}

func TestPersonAgentsRevoked(t *testing.T) {
	t.Parallel()
	e := newRig(t)
	s := e.open(t)
	ctx := ctxT(t)
	w := setupWorld(t, s)
	issue := func(agent string) Grant {
		t.Helper()
		g, err := s.IssueGrant(ctx, GrantSpec{Tenant: tenant, PersonID: w.person.ID, ClientID: w.company.ID, AgentID: agent,
			RefreshSHA256: HashSecret(agent + "-refresh")})
		if err != nil {
			t.Fatal(err)
		}
		return g
	}
	early := issue("early")
	tokenBefore := time.Now()
	time.Sleep(5 * time.Millisecond)
	if err := s.RevokePersonAgents(ctx, tenant, w.person.ID, "disabled at the IdP"); err != nil {
		t.Fatal(err)
	}
	p, _ := s.Person(ctxT(t), tenant, w.person.ID)
	if p.AgentsRevokedBefore.IsZero() || p.AgentsRevokedReason != "disabled at the IdP" {
		t.Fatalf("person %+v", p)
	}
	time.Sleep(5 * time.Millisecond)
	late := issue("late")

	if revoked, why := s.Revoked(tenant, w.person.ID, early.ID, time.Now()); !revoked || !strings.Contains(why, "disabled at the IdP") {
		t.Errorf("earlier grant, new token: %v %q", revoked, why)
	}
	if revoked, why := s.Revoked(tenant, w.person.ID, late.ID, time.Now()); revoked {
		t.Errorf("later grant revoked: %s", why)
	}
	// A token minted before the revocation is void even under a later
	// grant (its iat says so).
	if revoked, _ := s.Revoked(tenant, w.person.ID, late.ID, tokenBefore); !revoked {
		t.Error("a token issued before the revocation is not void")
	}
	if err := s.RotateRefresh(ctx, tenant, early.ID, HashSecret("early-refresh"), HashSecret("x")); !errors.Is(err, ErrRevoked) {
		t.Errorf("rotating a void grant: %v", err)
	}
	if err := s.RotateRefresh(ctx, tenant, late.ID, HashSecret("late-refresh"), HashSecret("late-2")); err != nil {
		t.Errorf("rotating a later grant: %v", err)
	}
	if err := s.RevokePersonAgents(ctx, tenant, "p_nobody", "x"); !errors.Is(err, ErrNotFound) {
		t.Errorf("unknown person: %v", err)
	}
}

func TestPersonalAccessTokens(t *testing.T) {
	t.Parallel()
	e := newRig(t)
	s := e.open(t)
	ctx := ctxT(t)
	w := setupWorld(t, s)
	h := HashSecret("alppat_abc_secret")
	exp := time.Now().Add(24 * time.Hour).Truncate(time.Second)
	pat, err := s.IssuePAT(ctx, PATSpec{Tenant: tenant, ID: "abcdefghijklmnopqrstuvwxyz", PersonID: w.person.ID, Name: "cli",
		TokenSHA256: h, Scopes: []string{"alp.send"}, Expires: exp})
	if err != nil {
		t.Fatal(err)
	}
	if pat.ID != "abcdefghijklmnopqrstuvwxyz" || !pat.Expires.Equal(exp) || pat.Issued.IsZero() || !pat.TokenSHA256.Equal(h) {
		t.Fatalf("pat %+v", pat)
	}
	if got, err := s.PATByHash(tenant, h); err != nil || !reflect.DeepEqual(got, pat) {
		t.Fatalf("PATByHash = %+v, %v", got, err)
	}
	if got, err := s.PAT(tenant, pat.ID); err != nil || !reflect.DeepEqual(got, pat) {
		t.Fatalf("PAT = %+v, %v", got, err)
	}
	if revoked, why := s.PATRevoked(tenant, pat.ID, time.Now()); revoked {
		t.Fatalf("new PAT revoked: %s", why)
	}
	if revoked, why := s.PATRevoked(tenant, pat.ID, exp); !revoked || !strings.Contains(why, "expired") {
		t.Errorf("at expiry: %v %q", revoked, why)
	}
	gen, err := s.IssuePAT(ctx, PATSpec{Tenant: tenant, PersonID: w.person.ID, Name: "ci", TokenSHA256: HashSecret("other"), Expires: exp})
	if err != nil || !strings.HasPrefix(gen.ID, "pat_") {
		t.Fatalf("generated id: %+v, %v", gen, err)
	}
	for _, tc := range []struct {
		spec  PATSpec
		err   error
		field string
	}{
		{PATSpec{Tenant: tenant, ID: pat.ID, PersonID: w.person.ID, Name: "x", TokenSHA256: HashSecret("y"), Expires: exp}, ErrExists, pat.ID},
		{PATSpec{Tenant: tenant, PersonID: w.person.ID, Name: "x", TokenSHA256: h, Expires: exp}, ErrExists, "hash"},
		{PATSpec{Tenant: tenant, PersonID: "p_nobody", Name: "x", TokenSHA256: HashSecret("z"), Expires: exp}, ErrNotFound, "person"},
		{PATSpec{Tenant: tenant, PersonID: w.person.ID, Name: "", TokenSHA256: HashSecret("z"), Expires: exp}, ErrInvalid, "name"},
		{PATSpec{Tenant: tenant, PersonID: w.person.ID, Name: "x", Expires: exp}, ErrInvalid, "token_sha256"},
		{PATSpec{Tenant: tenant, PersonID: w.person.ID, Name: "x", TokenSHA256: HashSecret("z"), Expires: time.Now().Add(-time.Second)}, ErrInvalid, "expires"},
		{PATSpec{Tenant: tenant, ID: "a.b", PersonID: w.person.ID, Name: "x", TokenSHA256: HashSecret("z"), Expires: exp}, ErrInvalid, "pat_id"},
	} {
		_, err := s.IssuePAT(ctx, tc.spec)
		wantErr(t, err, tc.err, tc.field)
	}
	if err := s.RevokePAT(ctx, tenant, pat.ID, "lost laptop"); err != nil {
		t.Fatal(err)
	}
	if err := s.RevokePAT(ctx, tenant, pat.ID, "again"); err != nil {
		t.Fatal(err)
	}
	if revoked, why := s.PATRevoked(tenant, pat.ID, time.Now()); !revoked || !strings.Contains(why, "lost laptop") {
		t.Errorf("revoked PAT: %v %q", revoked, why)
	}
	if k := e.kinds(t); k["personal_access_token_issued"] != 2 || k["personal_access_token_revoked"] != 1 {
		t.Fatalf("events %v", k)
	}
	// Revoking the person's agents voids earlier PATs.
	if revoked, _ := s.PATRevoked(tenant, gen.ID, time.Now()); revoked {
		t.Fatal("second PAT revoked")
	}
	if err := s.RevokePersonAgents(ctx, tenant, w.person.ID, "offboarded"); err != nil {
		t.Fatal(err)
	}
	if revoked, why := s.PATRevoked(tenant, gen.ID, time.Now()); !revoked || !strings.Contains(why, "offboarded") {
		t.Errorf("PAT after the person's agents were revoked: %v %q", revoked, why)
	}
	if revoked, _ := s.PATRevoked(tenant, "nope", time.Now()); !revoked {
		t.Error("unknown PAT not revoked")
	}
	if _, err := s.PATByHash(tenant, HashSecret("unknown")); !errors.Is(err, ErrNotFound) {
		t.Errorf("unknown hash: %v", err)
	}
}

// TestReplicas: two stores on one bus see each other's writes.
func TestReplicas(t *testing.T) {
	t.Parallel()
	e := newRig(t)
	a, b := e.open(t), e.open(t)
	ctx := ctxT(t)
	w := setupWorld(t, a)
	g, err := a.IssueGrant(ctx, GrantSpec{Tenant: tenant, PersonID: w.person.ID, ClientID: w.company.ID, AgentID: "a"})
	if err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 5*time.Second, func() error {
		if revoked, why := b.Revoked(tenant, w.person.ID, g.ID, time.Now()); revoked {
			return fmt.Errorf("replica b: %s", why)
		}
		return nil
	})
	// b revokes; a sees it.
	if err := b.RevokeGrant(ctx, tenant, g.ID, "revoked on b"); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 5*time.Second, func() error {
		if revoked, why := a.Revoked(tenant, w.person.ID, g.ID, time.Now()); !revoked || !strings.Contains(why, "revoked on b") {
			return fmt.Errorf("replica a: %v %q", revoked, why)
		}
		return nil
	})
	// b's projection is at least as far as a's write (read-your-writes
	// across replicas is eventual), and then both agree.
	testkit.Eventually(t, 5*time.Second, func() error {
		if a.Applied() != b.Applied() {
			return fmt.Errorf("applied %d and %d", a.Applied(), b.Applied())
		}
		return nil
	})
	ga, _ := a.Grant(tenant, g.ID)
	gb, _ := b.Grant(tenant, g.ID)
	if !reflect.DeepEqual(ga, gb) {
		t.Fatalf("replicas disagree: %+v vs %+v", ga, gb)
	}
	// A store hosting one tenant does not see the other's state.
	only := e.open(t, other)
	if _, err := only.Grant(tenant, g.ID); !errors.Is(err, ErrNotHosted) {
		t.Errorf("other-tenant store: %v", err)
	}
	if err := only.Fresh(5 * time.Second); err != nil {
		t.Errorf("other-tenant store not fresh: %v", err)
	}
}

// TestConcurrentBindPerson: first sign-ins of one account racing on two
// replicas bind one person.
func TestConcurrentBindPerson(t *testing.T) {
	t.Parallel()
	e := newRig(t)
	a, b := e.open(t), e.open(t)
	ctx := ctxT(t)

	// Deterministic race: a binds the account just before b appends, so b's
	// append (expecting an empty subject) conflicts; b reloads and returns
	// a's person.
	var pa Person
	b.beforeCommit = func(string) {
		b.beforeCommit = nil
		var err error
		if pa, err = a.BindPerson(ctx, tenant, iss, "sub-race", "race@example.org", nil); err != nil {
			t.Error(err)
		}
	}
	pb, err := b.BindPerson(ctx, tenant, iss, "sub-race", "race@example.org", nil)
	if err != nil {
		t.Fatal(err)
	}
	if pa.ID == "" || pb.ID != pa.ID {
		t.Fatalf("a bound %q, b returned %q", pa.ID, pb.ID)
	}
	// The same with b's sign-in bringing new roles: it reloads, then
	// records the update on the person a bound.
	b.beforeCommit = func(string) {
		b.beforeCommit = nil
		if _, err := a.BindPerson(ctx, tenant, iss, "sub-race2", "race2@example.org", nil); err != nil {
			t.Error(err)
		}
	}
	pr, err := b.BindPerson(ctx, tenant, iss, "sub-race2", "race2@example.org", []string{"admin"})
	if err != nil || !slices.Equal(pr.Roles, []string{"admin"}) {
		t.Fatalf("race with an update: %+v, %v", pr, err)
	}

	// Free-for-all: many goroutines on both replicas.
	const accounts, perStore = 5, 4
	var wg sync.WaitGroup
	ids := make([][]string, accounts)
	var mu sync.Mutex
	for i := range accounts {
		for _, s := range []*Store{a, b} {
			for range perStore {
				wg.Add(1)
				go func() {
					defer wg.Done()
					p, err := s.BindPerson(ctx, tenant, iss, fmt.Sprintf("sub-%d", i), fmt.Sprintf("u%d@example.org", i), nil)
					if err != nil {
						t.Error(err)
						return
					}
					mu.Lock()
					ids[i] = append(ids[i], p.ID)
					mu.Unlock()
				}()
			}
		}
	}
	wg.Wait()
	for i, got := range ids {
		if len(got) != 2*perStore || len(slices.Compact(slices.Sorted(slices.Values(got)))) != 1 {
			t.Errorf("account %d bound as %v", i, got)
		}
	}
	if k := e.kinds(t); k["person_bound"] != accounts+2 || k["person_updated"] != 1 {
		t.Fatalf("events %v", k)
	}
}

// TestRestartRebuilds: a new store rebuilds the same state from the stream.
func TestRestartRebuilds(t *testing.T) {
	t.Parallel()
	e := newRig(t)
	s := e.open(t)
	ctx := ctxT(t)
	w := setupWorld(t, s)
	g1, _ := s.IssueGrant(ctx, GrantSpec{Tenant: tenant, PersonID: w.person.ID, ClientID: w.company.ID, AgentID: "a", RefreshSHA256: HashSecret("r1")})
	g2, _ := s.IssueGrant(ctx, GrantSpec{Tenant: tenant, PersonID: w.person.ID, ClientID: w.sleep.ID, AgentID: "b", RefreshSHA256: HashSecret("q1")})
	if err := s.RotateRefresh(ctx, tenant, g1.ID, HashSecret("r1"), HashSecret("r2")); err != nil {
		t.Fatal(err)
	}
	if err := s.RevokeGrant(ctx, tenant, g2.ID, "done"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.BindVendorAttestation(ctx, tenant, w.sleep.ID, "att", w.person.ID); err != nil {
		t.Fatal(err)
	}
	pat, err := s.IssuePAT(ctx, PATSpec{Tenant: tenant, PersonID: w.person.ID, Name: "n", TokenSHA256: HashSecret("pat"), Expires: time.Now().Add(time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.RevokePersonAgents(ctx, tenant, w.person.ID, "r"); err != nil {
		t.Fatal(err)
	}
	s.Close()
	if _, err := s.BindPerson(ctx, tenant, iss, "x", "x@example.org", nil); !errors.Is(err, ErrClosed) {
		t.Errorf("command on a closed store: %v", err)
	}
	if err := s.Fresh(time.Hour); !errors.Is(err, ErrClosed) {
		t.Errorf("Fresh on a closed store: %v", err)
	}

	r := e.open(t)
	rApplied, sApplied := r.Applied(), s.Applied()
	s.f.RLock()
	defer s.f.RUnlock()
	r.f.RLock()
	defer r.f.RUnlock()
	if rApplied != sApplied || !reflect.DeepEqual(r.f.Versions(), s.f.Versions()) {
		t.Fatalf("applied %d vs %d, versions %v vs %v", rApplied, sApplied, r.f.Versions(), s.f.Versions())
	}
	for _, tn := range hosted {
		if !reflect.DeepEqual(r.tenants[tn], s.tenants[tn]) {
			t.Errorf("tenant %s rebuilt differently:\n%+v\n%+v", tn, r.tenants[tn], s.tenants[tn])
		}
	}
	if r.tenants[tenant].pats[pat.ID] == nil || len(r.tenants[tenant].grants) != 2 {
		t.Errorf("rebuilt state is missing things: %+v", r.tenants[tenant])
	}
}

// TestFreshFollowsNATS: Fresh fails once NATS has been gone for longer
// than the staleness, and recovers when it is back; the reader picks up
// where it was.
func TestFreshFollowsNATS(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	start := func() *server.Server {
		o := natstest.Options(dir)
		o.Port = port
		return natstest.RunServer(t, o)
	}
	srv := start()
	e := connect(t, srv)
	e.ensureStream(t)
	s := e.open(t)
	w := setupWorld(t, s)
	if err := s.Fresh(3 * time.Second); err != nil {
		t.Fatalf("just opened: %v", err)
	}
	// Idle but connected, it stays fresh.
	for range 3 {
		time.Sleep(time.Second)
		if err := s.Fresh(3 * time.Second); err != nil {
			t.Fatalf("idle: %v", err)
		}
	}

	srv.Shutdown()
	srv.WaitForShutdown()
	// The staleness budget is honoured: no instant failure.
	if err := s.Fresh(10 * time.Second); err != nil {
		t.Errorf("right after NATS stopped, with 10s allowed: %v", err)
	}
	testkit.Eventually(t, 10*time.Second, func() error {
		if err := s.Fresh(3 * time.Second); err == nil {
			return errors.New("still fresh")
		}
		return nil
	})
	if err := s.Fresh(3 * time.Second); !errors.Is(err, ErrStale) {
		t.Errorf("Fresh = %v, want ErrStale", err)
	}
	// Queries still answer from the last state.
	if _, err := s.Person(ctxT(t), tenant, w.person.ID); err != nil {
		t.Error(err)
	}

	start()
	testkit.Eventually(t, 20*time.Second, func() error { return s.Fresh(3 * time.Second) })
	// The reader follows the stream again: a write after the restart shows.
	ctx := ctxT(t)
	var p Person
	testkit.Eventually(t, 10*time.Second, func() error {
		var err error
		p, err = s.BindPerson(ctx, tenant, iss, "after-restart", "after@example.org", nil)
		return err
	})
	if got, err := s.PersonBySubject(ctxT(t), tenant, iss, "after-restart"); err != nil || got.ID != p.ID {
		t.Fatalf("after restart: %+v, %v", got, err)
	}
	second := e.open(t)
	if _, err := second.Person(ctxT(t), tenant, w.person.ID); err != nil {
		t.Fatalf("a store opened after the restart: %v", err)
	}
}

// TestNoSecretsInEvents scans the stream for the raw secrets used.
func TestNoSecretsInEvents(t *testing.T) {
	t.Parallel()
	e := newRig(t)
	s := e.open(t)
	ctx := ctxT(t)
	admin := mustBind(t, s, "sub-admin", "admin@example.org")
	secrets := map[string]string{
		"client secret": "cs_" + randomHex() + randomHex(),
		"refresh 1":     "rt_" + randomHex() + randomHex(),
		"refresh 2":     "rt_" + randomHex() + randomHex(),
		"pat":           "alppat_abcdefghijklmnopqrstuvwxyz_" + randomHex() + randomHex(),
	}
	c, err := s.RegisterClient(ctx, ClientSpec{Tenant: tenant, ClientID: "c1", Kind: alpv1.ClientKind_CLIENT_KIND_CONFIDENTIAL,
		RedirectURIs: []string{"https://a.example/cb"}, SecretSHA256: HashSecret(secrets["client secret"]), RegisteredBy: admin.ID})
	if err != nil {
		t.Fatal(err)
	}
	g, err := s.IssueGrant(ctx, GrantSpec{Tenant: tenant, PersonID: admin.ID, ClientID: c.ID, AgentID: "a", RefreshSHA256: HashSecret(secrets["refresh 1"])})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.RotateRefresh(ctx, tenant, g.ID, HashSecret(secrets["refresh 1"]), HashSecret(secrets["refresh 2"])); err != nil {
		t.Fatal(err)
	}
	if _, err := s.IssuePAT(ctx, PATSpec{Tenant: tenant, ID: "abcdefghijklmnopqrstuvwxyz", PersonID: admin.ID, Name: "p",
		TokenSHA256: HashSecret(secrets["pat"]), Expires: time.Now().Add(time.Hour)}); err != nil {
		t.Fatal(err)
	}
	msgs := e.messages(t)
	var all []byte
	for _, m := range msgs {
		all = append(all, m.Data...)
		for _, vs := range m.Header {
			for _, v := range vs {
				all = append(all, v...)
			}
		}
	}
	for what, raw := range secrets {
		for _, form := range [][]byte{[]byte(raw), []byte(raw[3:])} {
			if bytes.Contains(all, form) {
				t.Errorf("the %s appears on the stream", what)
			}
		}
		if h := HashSecret(raw); !bytes.Contains(all, h[:]) {
			t.Errorf("the %s's hash is not on the stream (is the scan looking at the right bytes?)", what)
		}
	}
}

// TestRefusedEvents: events that break the rules are skipped; the
// projection goes on.
func TestRefusedEvents(t *testing.T) {
	t.Parallel()
	e := newRig(t)
	s := e.open(t)
	ctx := ctxT(t)
	p := mustBind(t, s, "sub-ana", "ana@example.org")
	publish := func(subject string, ev *alpv1.Event) {
		t.Helper()
		if _, err := e.b.Publish(ctx, subject, ev); err != nil {
			t.Fatal(err)
		}
	}
	header := func(kind string, role alpv1.Role) *alpv1.EventHeader {
		return &alpv1.EventHeader{Type: kind, EventId: randomHex(), Tenant: tenant, ProducerRole: role, Occurred: timestamppb.Now()}
	}
	// Ingress forging identity's event.
	publish("alp.identity.example_org.person."+p.ID, &alpv1.Event{Header: header("person_updated", alpv1.Role_ROLE_INGRESS),
		Body: &alpv1.Event_PersonUpdated{PersonUpdated: &alpv1.PersonUpdated{Tenant: tenant, PersonId: p.ID, Address: "evil@example.org"}}})
	// An update on another person's subject.
	publish("alp.identity.example_org.person.p_other", &alpv1.Event{Header: header("person_updated", alpv1.Role_ROLE_IDENTITY),
		Body: &alpv1.Event_PersonUpdated{PersonUpdated: &alpv1.PersonUpdated{Tenant: tenant, PersonId: p.ID, Address: "evil@example.org"}}})
	// A body naming another tenant.
	publish("alp.identity.example_org.person."+p.ID, &alpv1.Event{Header: header("person_updated", alpv1.Role_ROLE_IDENTITY),
		Body: &alpv1.Event_PersonUpdated{PersonUpdated: &alpv1.PersonUpdated{Tenant: other, PersonId: p.ID, Address: "evil@example.org"}}})
	// Not an event at all.
	if _, err := e.js.Publish(ctx, "alp.identity.example_org.person."+p.ID, []byte("garbage")); err != nil {
		t.Fatal(err)
	}
	// The store still works, and only accepted what is right, including a
	// command on a subject that holds refused events.
	q, err := s.BindPerson(ctx, tenant, iss, "sub-ana", "ana@example.org", []string{"r"})
	if err != nil {
		t.Fatal(err)
	}
	if q.Address != "ana@example.org" || !slices.Equal(q.Roles, []string{"r"}) {
		t.Fatalf("person %+v", q)
	}
	if _, err := s.Person(ctxT(t), tenant, "p_other"); !errors.Is(err, ErrNotFound) {
		t.Errorf("p_other: %v", err)
	}
}

func TestOpenErrors(t *testing.T) {
	t.Parallel()
	e := connect(t, natstest.RunJetStream(t))
	ctx := ctxT(t)
	if _, err := Open(ctx, e.b, e.ks, []string{tenant}, nil); !errors.Is(err, jetstream.ErrStreamNotFound) {
		t.Errorf("without the stream: %v", err)
	}
	e.ensureStream(t)
	for _, tenants := range [][]string{nil, {"Example.org"}, {tenant, tenant}} {
		if _, err := Open(ctx, e.b, e.ks, tenants, nil); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "tenants") {
			t.Errorf("Open(%q) = %v", tenants, err)
		}
	}
	if _, err := Open(ctx, nil, e.ks, []string{tenant}, nil); !errors.Is(err, ErrInvalid) {
		t.Errorf("nil bus: %v", err)
	}
}

func TestHash(t *testing.T) {
	t.Parallel()
	h := HashSecret("x")
	p, err := ParseHash(h.Hex())
	if err != nil || p != h || !p.Equal(h) || p.IsZero() || !(Hash{}).IsZero() {
		t.Fatalf("ParseHash(%s) = %x, %v", h.Hex(), p, err)
	}
	if _, err := ParseHash("abc"); !errors.Is(err, ErrInvalid) {
		t.Errorf("short hash: %v", err)
	}
}

// TestAgentClasses: a person's agents' trust classes follow their live
// grants and tokens: none at first, consumer with a personal access token,
// company and consumer with a company client's grant, consumer again once
// that grant is revoked, none once all the person's agents are revoked.
func TestAgentClasses(t *testing.T) {
	t.Parallel()
	e := newRig(t)
	s := e.open(t)
	ctx := ctxT(t)
	w := setupWorld(t, s)
	classes := func(want ...alpv1.TrustClass) {
		t.Helper()
		got, err := s.AgentClasses(tenant, w.person.ID, time.Now())
		if err != nil || !slices.Equal(got, want) || got == nil {
			t.Fatalf("AgentClasses = %v, %v; want %v", got, err, want)
		}
	}
	classes()
	if _, err := s.IssuePAT(ctx, PATSpec{Tenant: tenant, PersonID: w.person.ID, Name: "p", TokenSHA256: HashSecret(randomHex()), Expires: time.Now().Add(time.Hour)}); err != nil {
		t.Fatal(err)
	}
	classes(alpv1.TrustClass_TRUST_CLASS_CONSUMER)
	g, err := s.IssueGrant(ctx, GrantSpec{Tenant: tenant, PersonID: w.person.ID, ClientID: w.company.ID, AgentID: "agent-1"})
	if err != nil {
		t.Fatal(err)
	}
	classes(alpv1.TrustClass_TRUST_CLASS_COMPANY, alpv1.TrustClass_TRUST_CLASS_CONSUMER)
	if err := s.RevokeGrant(ctx, tenant, g.ID, "test"); err != nil {
		t.Fatal(err)
	}
	classes(alpv1.TrustClass_TRUST_CLASS_CONSUMER)
	time.Sleep(10 * time.Millisecond) // the revocation is after the token's issue
	if err := s.RevokePersonAgents(ctx, tenant, w.person.ID, "test"); err != nil {
		t.Fatal(err)
	}
	classes()
	if _, err := s.AgentClasses(tenant, "p_nobody", time.Now()); !errors.Is(err, ErrNotFound) {
		t.Fatalf("an unknown person: %v", err)
	}
}

// TestRolesAndOwnerOf: the projection-only lookups policy makes on every
// decision answer what Person and PersonByAddress do.
func TestRolesAndOwnerOf(t *testing.T) {
	t.Parallel()
	e := newRig(t)
	s := e.open(t)
	ctx := ctxT(t)
	p, err := s.BindPerson(ctx, tenant, "https://idp.example", "sub-"+randomHex(), "lee@example.org", []string{"finance"})
	if err != nil {
		t.Fatal(err)
	}
	if roles, err := s.Roles(tenant, p.ID); err != nil || !slices.Equal(roles, []string{"finance"}) {
		t.Fatalf("Roles = %v, %v", roles, err)
	}
	if id, roles, err := s.OwnerOf(ctx, tenant, "lee@example.org"); err != nil || id != p.ID || !slices.Equal(roles, []string{"finance"}) {
		t.Fatalf("OwnerOf = %s %v %v", id, roles, err)
	}
	if _, _, err := s.OwnerOf(ctx, tenant, "nobody@example.org"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("OwnerOf an unknown address: %v", err)
	}
	if _, err := s.Roles(tenant, "p_nobody"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Roles of an unknown person: %v", err)
	}
}
