package natsauth_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"maps"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/alpd-project/alpd/broker"
	nmpv1 "github.com/alpd-project/alpd/gen/alp/nmp/v1"
	alpv1 "github.com/alpd-project/alpd/gen/alp/v1"
	"github.com/alpd-project/alpd/internal/bus"
	"github.com/alpd-project/alpd/internal/envelope"
	"github.com/alpd-project/alpd/internal/identitystore"
	"github.com/alpd-project/alpd/internal/keystore"
	"github.com/alpd-project/alpd/internal/natsauth"
	"github.com/alpd-project/alpd/internal/natstest"
	"github.com/alpd-project/alpd/internal/streams"
	"github.com/alpd-project/alpd/internal/testkit"
	"github.com/alpd-project/alpd/services/ingress"
)

// cluster is a real nats-server started from the generated configuration,
// with a seed file per user.
type cluster struct {
	srv     *server.Server
	users   map[string]natsauth.User
	seedDir string
	caFile  string
}

// launch writes seeds and the server configuration for o, as alpctl
// nats-config does, and starts nats-server from that file (on a random
// loopback port).
func launch(t *testing.T, o natsauth.ServerOptions, withTLS bool) *cluster {
	t.Helper()
	dir := t.TempDir()
	o.Listen = "127.0.0.1:4222"
	o.StoreDir = filepath.Join(dir, "jetstream")
	c := &cluster{users: map[string]natsauth.User{}, seedDir: filepath.Join(dir, "seeds")}
	if withTLS {
		o.TLS = writeCerts(t, dir)
		c.caFile = o.TLS.CAFile
	}
	users, err := o.Users()
	if err != nil {
		t.Fatal(err)
	}
	o.PublicKeys = map[string]string{}
	for _, u := range users {
		seed, pub, err := natsauth.NewUserKey()
		if err != nil {
			t.Fatal(err)
		}
		path := filepath.Join(c.seedDir, u.SeedFile())
		if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, seed, 0o600); err != nil {
			t.Fatal(err)
		}
		o.PublicKeys[u.ID()] = pub
		c.users[u.ID()] = u
	}
	text, err := natsauth.ServerConfig(o)
	if err != nil {
		t.Fatal(err)
	}
	conf := filepath.Join(dir, "nats-server.conf")
	if err := os.WriteFile(conf, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	sopts, err := server.ProcessConfigFile(conf)
	if err != nil {
		t.Fatalf("generated configuration does not load: %v\n%s", err, text)
	}
	sopts.Host, sopts.Port = "127.0.0.1", -1
	sopts.NoLog, sopts.NoSigs = true, true
	c.srv = natstest.RunServer(t, sopts)
	return c
}

// conn is one role's connection, with the asynchronous errors the server
// sent it (permission violations arrive that way).
type conn struct {
	nc   *nats.Conn
	user natsauth.User
	errs chan error
}

func (c *cluster) connect(t *testing.T, id string) *conn {
	t.Helper()
	u, ok := c.users[id]
	if !ok {
		t.Fatalf("no user %s", id)
	}
	opts, err := natsauth.ClientOptions(filepath.Join(c.seedDir, u.SeedFile()), c.caFile, "", "", u.Broker, u.Service())
	if err != nil {
		t.Fatal(err)
	}
	cn := &conn{user: u, errs: make(chan error, 256)}
	opts = append(opts, nats.Name(id), nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
		select {
		case cn.errs <- err:
		default:
		}
	}))
	cn.nc = natstest.Connect(t, c.srv, opts...)
	return cn
}

// denied runs do, which must make the server refuse subject with a
// permissions violation.
func (c *conn) denied(t *testing.T, subject string, do func(nc *nats.Conn) error) {
	t.Helper()
	if err := do(c.nc); err != nil {
		t.Fatalf("%s: %s: %v", c.user.ID(), subject, err)
	}
	if err := c.nc.Flush(); err != nil {
		t.Fatal(err)
	}
	deadline := time.After(5 * time.Second)
	for {
		select {
		case err := <-c.errs:
			if errors.Is(err, nats.ErrPermissionViolation) && strings.Contains(err.Error(), `"`+subject+`"`) {
				return
			}
			t.Errorf("%s: unexpected error while waiting for a violation on %s: %v", c.user.ID(), subject, err)
		case <-deadline:
			t.Fatalf("%s: %s was not refused", c.user.ID(), subject)
		}
	}
}

func (c *conn) deniedPub(t *testing.T, subject string) {
	t.Helper()
	c.denied(t, subject, func(nc *nats.Conn) error { return nc.Publish(subject, []byte("x")) })
}

func (c *conn) deniedSub(t *testing.T, subject string) {
	t.Helper()
	c.denied(t, subject, func(nc *nats.Conn) error {
		_, err := nc.Subscribe(subject, func(*nats.Msg) {})
		return err
	})
}

// noErrors checks that the server refused nothing on this connection.
func (c *conn) noErrors(t *testing.T) {
	t.Helper()
	if err := c.nc.Flush(); err != nil {
		t.Fatal(err)
	}
	for {
		select {
		case err := <-c.errs:
			t.Errorf("%s: %v", c.user.ID(), err)
		default:
			return
		}
	}
}

func (c *conn) js(t *testing.T) jetstream.JetStream {
	t.Helper()
	js, err := jetstream.New(c.nc)
	if err != nil {
		t.Fatal(err)
	}
	return js
}

// runRole runs a broker with only the service of c's role, on c's
// connection, and waits until it is ready.
func runRole(t *testing.T, c *conn, ks keystore.KeyStore) *broker.Broker {
	t.Helper()
	b, err := broker.New(broker.Config{Name: c.user.Broker, Tenants: c.user.Tenants, Services: []string{c.user.Service()}},
		broker.Deps{NATS: c.nc, KeyStore: ks})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- b.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("%s stopped with %v", c.user.ID(), err)
			}
		case <-time.After(30 * time.Second):
			t.Errorf("%s did not stop", c.user.ID())
		}
	})
	select {
	case <-b.Started():
	case <-time.After(15 * time.Second):
		t.Fatalf("%s did not start in 15s under its own permissions", c.user.ID())
	}
	if err := b.StartError(); err != nil {
		t.Fatalf("%s under its own permissions: %v", c.user.ID(), err)
	}
	return b
}

// allReady waits until every broker is ready. Readiness waits for other
// roles' streams (policy consumes ingress's send stream; ingress follows
// policy's types), so it is asked once all have started.
func allReady(t *testing.T, brokers ...*broker.Broker) {
	t.Helper()
	for _, b := range brokers {
		testkit.Eventually(t, 10*time.Second, b.Ready)
	}
}

func submission(tenant, person, key string) ingress.Submission {
	return ingress.Submission{
		Sender: ingress.Sender{Tenant: tenant, PersonID: person, Address: "ana@" + tenant, AgentID: "agent-1",
			Trust: nmpv1.TrustLevel_TRUST_LEVEL_TRUSTED, TrustReason: "company agent credential"},
		Envelope:       &alpv1.Envelope{To: "bo@other.example", Type: "note/v1", Body: []byte(`{"text":"hello"}`)},
		IdempotencyKey: key,
	}
}

func streamMsgs(js jetstream.JetStream, name string) (uint64, error) {
	s, err := js.Stream(context.Background(), name)
	if err != nil {
		return 0, err
	}
	info, err := s.Info(context.Background())
	if err != nil {
		return 0, err
	}
	return info.State.Msgs, nil
}

// waitDecided waits until policy (on its own connection) sees the decision
// on the sender's subject, and checks it.
func waitDecided(t *testing.T, policy *conn, tenant, person, envelopeID string) {
	t.Helper()
	js := policy.js(t)
	ns := policy.user.Broker
	decided := bus.StreamName(ns, streams.Decided)
	ctx := context.Background()
	var last *jetstream.RawStreamMsg
	testkit.Eventually(t, 10*time.Second, func() error {
		s, err := js.Stream(ctx, decided)
		if err != nil {
			return err
		}
		last, err = s.GetLastMsgForSubject(ctx, "alp.decided."+bus.TenantToken(tenant)+"."+person+"."+envelopeID)
		return err
	})
	ev, err := bus.Decode(last.Data)
	if err != nil {
		t.Fatal(err)
	}
	d := ev.GetDecided()
	if d.GetEnvelope().GetId() != envelopeID || d.GetOutcome() != alpv1.Outcome_OUTCOME_REFUSE ||
		ev.GetHeader().GetProducerRole() != alpv1.Role_ROLE_POLICY {
		t.Fatalf("decided = %v", ev)
	}
	// The work item was acked once, without redelivery: the ack was
	// allowed.
	testkit.Eventually(t, 10*time.Second, func() error {
		cons, err := js.Consumer(ctx, bus.StreamName(ns, streams.Send), bus.StreamName(ns, "policy"))
		if err != nil {
			return err
		}
		info, err := cons.Info(ctx)
		if err != nil {
			return err
		}
		if info.NumPending != 0 || info.NumAckPending != 0 || info.NumRedelivered != 0 {
			return errors.New("work item not acked cleanly: " + info.Name)
		}
		return nil
	})
	if n, err := streamMsgs(js, bus.StreamName(ns, bus.DeadLetterStream)); err != nil || n != 0 {
		t.Fatalf("dead letters: %d, %v", n, err)
	}
}

// startOrder starts identity first: it provisions the tenant keys.
var startOrder = []string{"identity", "policy", "ingress", "federation", "ledger", "approvals"}

// TestEachRoleWithItsOwnPermissions runs every service as its own broker
// on a connection authenticated as that role's user only: each must create
// its streams, consumers and buckets, and a submission must flow from
// ingress through policy's consumer on the send log to a decision. Then every role
// tries what it must not do.
func TestEachRoleWithItsOwnPermissions(t *testing.T) {
	c := launch(t, natsauth.ServerOptions{Isolation: natsauth.Shared, BrokerName: "perm",
		Tenants: []string{"example.org", "other.example"}}, false)
	ks := keystore.NewMemory() // the split processes share one keystore
	conns := map[string]*conn{}
	brokers := map[string]*broker.Broker{}
	for _, role := range startOrder {
		conns[role] = c.connect(t, role)
		brokers[role] = runRole(t, conns[role], ks)
	}
	allReady(t, slices.Collect(maps.Values(brokers))...)
	ctx := context.Background()
	id, err := brokers["ingress"].Ingress().Submit(ctx, submission("example.org", "p1", "k1"))
	if err != nil {
		t.Fatal(err)
	}
	waitDecided(t, conns["policy"], "example.org", "p1", id)
	if err := brokers["identity"].Identity().Erase(ctx, "example.org", "p1", "op-1"); err != nil {
		t.Fatalf("identity erases a data key: %v", err)
	}
	// The ledger recorded the send in p1's log under its own user: it read
	// its partition of the work queue, opened the body, made p1's ledger
	// secret, saved the tree and signed a checkpoint.
	testkit.Eventually(t, 10*time.Second, func() error {
		st, err := conns["ledger"].js(t).Stream(ctx, "PERM_LEDGER")
		if err != nil {
			return err
		}
		if _, err = st.GetLastMsgForSubject(ctx, "alp.ledger.example_org.p1"); err != nil {
			return err
		}
		// The checkpoint, read as the ledger reads its bucket (direct get).
		m, err := conns["ledger"].nc.Request("$JS.API.DIRECT.GET.KV_PERM_LEDGERCHECKPOINTS.$KV.PERM_LEDGERCHECKPOINTS.example_org.p1", nil, time.Second)
		if err != nil {
			return err
		}
		if len(m.Data) == 0 {
			return errors.New("no checkpoint yet: " + m.Header.Get("Status"))
		}
		return nil
	})
	// An expected-sequence append (the ledger's way to write) reads the
	// subject's stream and last message when the server reports a conflict.
	lb, err := bus.New(conns["ledger"].nc, bus.Options{Namespace: "perm"})
	if err != nil {
		t.Fatal(err)
	}
	ev := &alpv1.Event{Header: &alpv1.EventHeader{Type: "decided", EventId: "e-1", Tenant: "example.org", ProducerRole: alpv1.Role_ROLE_LEDGER},
		Body: &alpv1.Event_Decided{Decided: &alpv1.Decided{}}}
	first, err := lb.Append(ctx, "alp.ledger.example_org.nobody", 0, ev)
	if err != nil {
		t.Fatal(err)
	}
	if again, err := lb.Append(ctx, "alp.ledger.example_org.nobody", 0, ev); err != nil || again != first {
		t.Fatalf("retried append = %d, %v; want %d", again, err, first)
	}
	checkIdentityProjection(t, conns, ks)
	for _, role := range startOrder {
		conns[role].noErrors(t)
	}

	// Only a stream's owner publishes on its subjects.
	for _, role := range startOrder {
		u, _ := natsauth.UseOf(roleOf(t, role))
		for _, s := range streams.Table() {
			if s.Kind == "" || slices.Contains(u.Publishes, s.Kind) {
				continue
			}
			conns[role].deniedPub(t, "alp."+s.Kind+".example_org.x")
		}
		// Probes stay inside the broker.
		conns[role].deniedPub(t, "alp.probe.otherbroker.policy")
	}
	pol, ing, fed, led := conns["policy"], conns["ingress"], conns["federation"], conns["ledger"]
	pol.deniedPub(t, "alp.inbound.example_org.x")
	ing.deniedPub(t, "alp.send.unhosted_example.p1")
	// Replies are private to each role.
	pol.deniedSub(t, "_INBOX_perm_ingress.>")
	pol.deniedSub(t, "_INBOX_perm_policy") // not even its own prefix's parent
	pol.deniedSub(t, ">")
	// Events are read through consumers, never by core subscription.
	pol.deniedSub(t, "alp.send.example_org.>")
	// Streams, consumers and buckets of other roles.
	led.deniedPub(t, "$JS.API.STREAM.CREATE.PERM_SEND")
	led.deniedPub(t, "$JS.API.STREAM.INFO.PERM_DECIDED")
	pol.deniedPub(t, "$JS.API.STREAM.DELETE.PERM_DECIDED")
	pol.deniedPub(t, "$JS.API.STREAM.PURGE.PERM_SEND")
	pol.deniedPub(t, "$JS.API.STREAM.UPDATE.PERM_SEND") // it reads the send log, ingress owns it
	ing.deniedPub(t, "$JS.API.CONSUMER.CREATE.PERM_SEND.PERM_EVIL")
	ing.deniedPub(t, "$JS.API.CONSUMER.MSG.NEXT.PERM_SEND.PERM_POLICY")
	fed.deniedPub(t, "$JS.API.STREAM.INFO.PERM_SEND")         // federation reads decisions, never the requests
	fed.deniedPub(t, "$JS.API.STREAM.PURGE.KV_PERM_DATAKEYS") // it seals and opens, only identity erases
	led.deniedPub(t, "$KV.PERM_DATAKEYS.example.org.p1")      // the ledger only reads data keys
	pol.deniedPub(t, "alp.deadletter.perm.ledger")            // only its own consumers' dead letters
	// Readers of the identity projection create only ephemeral readers;
	// approvals, which reads no stream but identity's, no durable on it.
	ing.deniedPub(t, "$JS.API.CONSUMER.CREATE.PERM_IDENTITY.PERM_MINE")
	ing.deniedPub(t, "$JS.API.CONSUMER.CREATE.PERM_IDENTITY.PERM_MINE.alp.identity.example_org.>")
	ing.deniedPub(t, "$JS.API.CONSUMER.DELETE.PERM_IDENTITY.PERM_MINE")
	ing.deniedPub(t, "$JS.ACK.PERM_IDENTITY.PERM_MINE.1.1.1.1.0")
	fed.deniedPub(t, "$JS.API.CONSUMER.DURABLE.CREATE.PERM_IDENTITY.PERM_MINE")
	fed.deniedPub(t, "$JS.API.CONSUMER.DELETE.PERM_IDENTITY.PERM_MINE")

	// The refused publish on federation's subject stored nothing.
	if n, err := streamMsgs(fed.js(t), "PERM_INBOUND"); err != nil || n != 0 {
		t.Fatalf("PERM_INBOUND holds %d messages (%v)", n, err)
	}
}

// checkIdentityProjection opens the identity projection
// (internal/identitystore) under the identity, ingress and approvals users:
// identity's commands are seen by the others, which stay fresh. The
// ephemeral create API they may use refuses a durable consumer.
func checkIdentityProjection(t *testing.T, conns map[string]*conn, ks keystore.KeyStore) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	stores := map[string]*identitystore.Store{}
	for _, role := range []string{"identity", "ingress", "approvals", "ledger"} {
		b, err := bus.New(conns[role].nc, bus.Options{Namespace: "perm"})
		if err != nil {
			t.Fatal(err)
		}
		s, err := identitystore.Open(ctx, b, ks, conns[role].user.Tenants, nil)
		if err != nil {
			t.Fatalf("%s opens the identity projection under its own user: %v", role, err)
		}
		t.Cleanup(s.Close)
		stores[role] = s
	}
	id := stores["identity"]
	const tenant = "example.org"
	p, err := id.BindPerson(ctx, tenant, "https://idp.example.org", "sub-1", "ana@example.org", []string{"staff"})
	if err != nil {
		t.Fatal(err)
	}
	// The second sign-in of the account finds the same person.
	if q, err := id.BindPerson(ctx, tenant, "https://idp.example.org", "sub-1", "ana@example.org", nil); err != nil || q.ID != p.ID {
		t.Fatalf("second sign-in: %+v, %v", q, err)
	}
	c, err := id.RegisterClient(ctx, identitystore.ClientSpec{Tenant: tenant, ClientID: "https://agent.example/client.json",
		Kind: alpv1.ClientKind_CLIENT_KIND_PUBLIC_CIMD, RedirectURIs: []string{"http://127.0.0.1:7777/cb"}})
	if err != nil {
		t.Fatal(err)
	}
	g, err := id.IssueGrant(ctx, identitystore.GrantSpec{Tenant: tenant, PersonID: p.ID, ClientID: c.ID, AgentID: "agent-1",
		RefreshSHA256: identitystore.HashSecret("rt-1")})
	if err != nil {
		t.Fatal(err)
	}
	if err := id.RevokeGrant(ctx, tenant, g.ID, "test"); err != nil {
		t.Fatal(err)
	}
	for _, role := range []string{"ingress", "approvals", "ledger"} {
		testkit.Eventually(t, 10*time.Second, func() error {
			if revoked, _ := stores[role].Revoked(tenant, p.ID, g.ID, time.Now()); !revoked {
				return errors.New(role + " has not seen the revocation")
			}
			return stores[role].Fresh(5 * time.Second)
		})
		// Every reader resolves the person's address from the person map
		// under its own user.
		if q, err := stores[role].Person(ctx, tenant, p.ID); err != nil || q.Address != "ana@example.org" {
			t.Fatalf("%s reads the person map: %+v, %v", role, q, err)
		}
	}
	// Identity drops the person's map keys (no purge marker) under its own
	// user when it erases them.
	if err := id.ErasePeople(ctx, tenant, p.ID); err != nil {
		t.Fatalf("identity erases from the person map: %v", err)
	}
	// The ephemeral form of the create API refuses a durable.
	req := `{"stream_name":"PERM_IDENTITY","config":{"durable_name":"PERM_MINE","deliver_policy":"all","ack_policy":"explicit"}}`
	msg, err := conns["ingress"].nc.RequestWithContext(ctx, "$JS.API.CONSUMER.CREATE.PERM_IDENTITY", []byte(req))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(msg.Data), `"err_code":10020`) { // consumer expected to be ephemeral

		t.Fatalf("a durable consumer was created through the ephemeral API: %s", msg.Data)
	}
}

func roleOf(t *testing.T, name string) alpv1.Role {
	t.Helper()
	r, ok := envelope.RoleByName(name)
	if !ok {
		t.Fatalf("no role %s", name)
	}
	return r
}

// TestHardIsolation gives each tenant its own account and broker, over
// TLS: a tenant's users run their broker, but cannot name, list or reach
// the other tenant's subjects and streams.
func TestHardIsolation(t *testing.T) {
	c := launch(t, natsauth.ServerOptions{Isolation: natsauth.Hard,
		Tenants: []string{"a.example", "b.example"}, Brokers: map[string]string{"b.example": "bee"}}, true)
	if u := c.users["a.example/policy"]; u.Broker != "a_example" || u.Account != "TENANT_A_EXAMPLE" {
		t.Fatalf("tenant a user: %+v", u)
	}
	ksA, ksB := keystore.NewMemory(), keystore.NewMemory()
	a := map[string]*conn{}
	brokers := map[string]*broker.Broker{}
	// Federation owns the log of envelopes from other brokers, which
	// policy's recipient side reads, and approvals the decisions policy
	// and ingress carry out: neither is ready before those streams exist.
	for _, role := range []string{"identity", "policy", "ingress", "federation", "approvals"} {
		a[role] = c.connect(t, "a.example/"+role)
		brokers[role] = runRole(t, a[role], ksA)
	}
	bIng := c.connect(t, "b.example/ingress")
	bBrokers := []*broker.Broker{runRole(t, c.connect(t, "b.example/identity"), ksB),
		runRole(t, c.connect(t, "b.example/policy"), ksB), runRole(t, bIng, ksB),
		runRole(t, c.connect(t, "b.example/federation"), ksB), runRole(t, c.connect(t, "b.example/approvals"), ksB)}
	allReady(t, append(bBrokers, slices.Collect(maps.Values(brokers))...)...)

	ctx := context.Background()
	id, err := brokers["ingress"].Ingress().Submit(ctx, submission("a.example", "p1", ""))
	if err != nil {
		t.Fatal(err)
	}
	waitDecided(t, a["policy"], "a.example", "p1", id)
	for _, cn := range a {
		cn.noErrors(t)
	}

	// Each account sees only its own streams.
	for _, tc := range []struct {
		cn           *conn
		own, foreign string
	}{{a["ingress"], "A_EXAMPLE_", "BEE_"}, {bIng, "BEE_", "A_EXAMPLE_"}} {
		var names []string
		lister := tc.cn.js(t).StreamNames(ctx)
		for n := range lister.Name() {
			names = append(names, n)
		}
		if err := lister.Err(); err != nil {
			t.Fatal(err)
		}
		if !slices.Contains(names, tc.own+"SEND") {
			t.Errorf("%s does not see its stream %sSEND: %v", tc.cn.user.ID(), tc.own, names)
		}
		for _, n := range names {
			if strings.Contains(n, tc.foreign) {
				t.Errorf("%s sees %s", tc.cn.user.ID(), n)
			}
		}
	}
	pol := a["policy"]
	pol.deniedSub(t, "alp.send.b_example.>")
	pol.deniedSub(t, "_INBOX_bee_policy.>")
	a["ingress"].deniedPub(t, "alp.send.b_example.p1")
	a["ingress"].deniedPub(t, "$JS.API.STREAM.INFO.BEE_SEND")
	a["ingress"].deniedPub(t, "$KV.A_EXAMPLE_DATAKEYS.b.example.p1")
	bIng.deniedPub(t, "alp.send.a_example.p1")

	// TLS is required, and only configured nkeys get in.
	seed := filepath.Join(c.seedDir, c.users["a.example/ingress"].SeedFile())
	nkeyOnly, err := nats.NkeyOptionFromSeed(seed)
	if err != nil {
		t.Fatal(err)
	}
	if nc, err := nats.Connect(c.srv.ClientURL(), nkeyOnly, nats.NoReconnect()); err == nil {
		nc.Close()
		t.Error("connected without trusting the server's CA")
	}
	stranger, _, err := natsauth.NewUserKey()
	if err != nil {
		t.Fatal(err)
	}
	strangerFile := filepath.Join(t.TempDir(), "stranger.nk")
	if err := os.WriteFile(strangerFile, stranger, 0o600); err != nil {
		t.Fatal(err)
	}
	opts, err := natsauth.ClientOptions(strangerFile, c.caFile, "", "", "a_example", "ingress")
	if err != nil {
		t.Fatal(err)
	}
	if nc, err := nats.Connect(c.srv.ClientURL(), append(opts, nats.NoReconnect())...); err == nil {
		nc.Close()
		t.Error("an unknown nkey connected")
	} else if !errors.Is(err, nats.ErrAuthorization) {
		t.Errorf("unknown nkey: %v, want an authorization error", err)
	}
}

// writeCerts makes a CA and a server certificate for 127.0.0.1.
func writeCerts(t *testing.T, dir string) natsauth.TLS {
	t.Helper()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	caTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, _ := x509.ParseCertificate(caDER)
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "nats"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, DNSNames: []string{"localhost"},
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	write := func(name, typ string, b []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: b}), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	return natsauth.TLS{
		CAFile:   write("ca.pem", "CERTIFICATE", caDER),
		CertFile: write("server.pem", "CERTIFICATE", der),
		KeyFile:  write("server-key.pem", "EC PRIVATE KEY", keyDER),
	}
}
