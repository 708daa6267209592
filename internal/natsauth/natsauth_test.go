package natsauth

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/nats-io/nats-server/v2/server"

	alpv1 "github.com/alpd-project/alpd/gen/alp/v1"
	"github.com/alpd-project/alpd/internal/bus"
	"github.com/alpd-project/alpd/internal/envelope"
	"github.com/alpd-project/alpd/internal/streams"
)

// TestTableFollowsStreams checks the table against internal/streams: each
// stream is owned by exactly its owner, and only the owner publishes its
// subjects.
func TestTableFollowsStreams(t *testing.T) {
	table := Table()
	if len(table) != 6 {
		t.Fatalf("table has %d roles, want 6", len(table))
	}
	for _, s := range streams.Table() {
		var owners, publishers []alpv1.Role
		for _, u := range table {
			if slices.Contains(u.Owns, s.Name) {
				owners = append(owners, u.Role)
			}
			if s.Kind != "" && slices.Contains(u.Publishes, s.Kind) {
				publishers = append(publishers, u.Role)
			}
		}
		if !slices.Equal(owners, []alpv1.Role{s.Owner}) {
			t.Errorf("stream %s is owned by %v in the table, %s in internal/streams", s.Name, owners, s.Owner)
		}
		if s.Kind != "" && !slices.Equal(publishers, []alpv1.Role{s.Owner}) {
			t.Errorf("alp.%s.> is published by %v, want only %s", s.Kind, publishers, s.Owner)
		}
	}
	for _, u := range table {
		for _, c := range u.Consumers {
			if _, ok := streams.ByName(c.Stream); !ok {
				t.Errorf("%s consumer %s reads unknown stream %s", u.Role, c.Durable, c.Stream)
			}
		}
		for _, r := range u.Reads {
			if st, ok := streams.ByName(r); !ok || st.Kind == "" {
				t.Errorf("%s keeps a projection of %s, which is not an event log of the table", u.Role, r)
			}
		}
		if (len(u.Consumers) > 0) != slices.Contains(u.Shared, bus.DeadLetterStream) {
			t.Errorf("%s: consumers %v, but dead letters %v", u.Role, u.Consumers, u.Shared)
		}
		hasKeys := slices.ContainsFunc(u.Buckets, func(b Bucket) bool { return b.Name == DataKeysBucket })
		if hasKeys != UsesDataKeys(u.Role) {
			t.Errorf("%s: data-key bucket %v, UsesDataKeys %v", u.Role, hasKeys, UsesDataKeys(u.Role))
		}
	}
	pol, _ := UseOf(alpv1.Role_ROLE_POLICY)
	if !slices.Equal(pol.Consumes, []string{"send", "inbound", "approvals", "policy", "identity"}) {
		t.Errorf("policy consumes %v, want send, inbound and approvals (its consumers), then its own state and identity's (its projections)", pol.Consumes)
	}
	if _, ok := UseOf(alpv1.Role_ROLE_OPERATOR); ok {
		t.Error("the operator is not a service role")
	}
	for _, r := range []alpv1.Role{alpv1.Role_ROLE_INGRESS, alpv1.Role_ROLE_IDENTITY, alpv1.Role_ROLE_POLICY, alpv1.Role_ROLE_LEDGER, alpv1.Role_ROLE_FEDERATION, alpv1.Role_ROLE_APPROVALS} {
		if !UsesDataKeys(r) {
			t.Errorf("%s must use the data-key bucket", r)
		}
	}
}

// TestPermissionsStayInTheirLane checks properties of every role's
// allow-lists for a broker with two tenants.
func TestPermissionsStayInTheirLane(t *testing.T) {
	tenants := []string{"a.org", "b.example"}
	for _, u := range Table() {
		name := envelope.ServiceName(u.Role)
		p, err := PermissionsFor("acme", tenants, u.Role)
		if err != nil {
			t.Fatal(err)
		}
		if !p.AllowResponses {
			t.Errorf("%s cannot answer probes", name)
		}
		want := []string{"_INBOX_acme_" + name + ".>", "alp.probe.acme." + name}
		if u.Role == alpv1.Role_ROLE_INGRESS {
			// Ingress waits for policy's decision on each envelope.
			want = append([]string{"alp.decided.a_org.>", "alp.decided.b_example.>"}, want...)
		}
		if !slices.Equal(p.Subscribe, want) {
			t.Errorf("%s subscribes to %v, want %v", name, p.Subscribe, want)
		}
		seen := map[string]bool{}
		for _, s := range p.Publish {
			if seen[s] {
				t.Errorf("%s: %s listed twice", name, s)
			}
			seen[s] = true
			switch {
			case strings.HasPrefix(s, "alp.probe."):
				if s != "alp.probe.acme.*" {
					t.Errorf("%s may publish %s", name, s)
				}
			case strings.HasPrefix(s, "alp.deadletter."):
				if !slices.ContainsFunc(u.Consumers, func(c streams.Consumer) bool { return s == "alp.deadletter.acme."+c.Durable }) {
					t.Errorf("%s may publish %s", name, s)
				}
			case strings.HasPrefix(s, "alp."):
				parts := strings.Split(s, ".")
				if len(parts) != 4 || parts[3] != ">" || !slices.Contains(u.Publishes, parts[1]) ||
					!slices.Contains([]string{"a_org", "b_example"}, parts[2]) {
					t.Errorf("%s may publish %s", name, s)
				}
			case s == "$JS.API.INFO" || s == "$JS.API.STREAM.NAMES":
			case s == "$JS.API.STREAM.PURGE.KV_ACME_PERSONMAP":
				// The purges: identity drops person map keys named by
				// keyed hashes without leaving a marker (erasure)…
				if u.Role != alpv1.Role_ROLE_IDENTITY {
					t.Errorf("%s may use %s", name, s)
				}
			case s == "$JS.API.STREAM.PURGE.ACME_INBOX":
				// … and ingress an erased person's inbox.
				if u.Role != alpv1.Role_ROLE_INGRESS {
					t.Errorf("%s may use %s", name, s)
				}
			case readerStream(s) != "":
				if !slices.Contains(u.Reads, readerStream(s)) {
					t.Errorf("%s may read %s without keeping a projection of it", name, s)
				}
			case strings.HasPrefix(s, "$JS.API.") || strings.HasPrefix(s, "$JS.ACK."):
				if !strings.Contains(s, ".ACME_") && !strings.Contains(s, ".KV_ACME_") {
					t.Errorf("%s may use %s, outside its broker", name, s)
				}
				if strings.Contains(s, "DELETE") || strings.Contains(s, "PURGE") || strings.Contains(s, ".*") && !strings.Contains(s, "$KV.") {
					t.Errorf("%s may use %s", name, s)
				}
			case strings.HasPrefix(s, "$KV.ACME_"):
			default:
				t.Errorf("%s may publish %s", name, s)
			}
		}
	}
	p, _ := PermissionsFor("acme", tenants, alpv1.Role_ROLE_POLICY)
	for _, want := range []string{
		"alp.decided.a_org.>", "alp.decided.b_example.>",
		"$JS.API.CONSUMER.CREATE.ACME_SEND.ACME_POLICY",
		"$JS.API.CONSUMER.MSG.NEXT.ACME_SEND.ACME_POLICY",
		"$JS.API.CONSUMER.INFO.ACME_SEND.ACME_POLICY",
		"$JS.ACK.ACME_SEND.ACME_POLICY.>",
		"$JS.API.DIRECT.GET.KV_ACME_DATAKEYS.$KV.ACME_DATAKEYS.a.org.*",
		"$JS.API.STREAM.CREATE.ACME_DEADLETTER",
	} {
		if !slices.Contains(p.Publish, want) {
			t.Errorf("policy may not publish %s", want)
		}
	}
	if !slices.Contains(p.Publish, "$KV.ACME_DATAKEYS.a.org.*") {
		t.Error("policy cannot seal for a recipient without a data key")
	}
	led, _ := PermissionsFor("acme", tenants, alpv1.Role_ROLE_LEDGER)
	if slices.Contains(led.Publish, "$KV.ACME_DATAKEYS.a.org.*") {
		t.Error("the ledger may write data keys")
	}
	ing, _ := PermissionsFor("acme", tenants, alpv1.Role_ROLE_INGRESS)
	if !slices.Contains(ing.Publish, "$KV.ACME_DATAKEYS.b.example.*") {
		t.Errorf("ingress cannot create data keys: %v", ing.Publish)
	}
	// The identity projection: identity, ingress, approvals, the ledger and policy follow the
	// identity stream with ephemeral readers, and may do nothing else with
	// consumers of that stream (no named or durable consumer, no ack, no
	// delete) besides ingress's one durable on erasures (it purges the
	// erased person's inbox); the other roles may not read it at all.
	reader := []string{
		"$JS.API.CONSUMER.CREATE.ACME_IDENTITY",
		"$JS.API.CONSUMER.INFO.ACME_IDENTITY.*",
		"$JS.API.CONSUMER.MSG.NEXT.ACME_IDENTITY.*",
	}
	for _, u := range Table() {
		p, _ := PermissionsFor("acme", tenants, u.Role)
		var got []string
		for _, s := range p.Publish {
			if strings.Contains(s, "ACME_INGRESS_ERASURE") && u.Role == alpv1.Role_ROLE_INGRESS {
				continue
			}
			if strings.Contains(s, "ACME_IDENTITY") && strings.Contains(s, ".CONSUMER.") || strings.HasPrefix(s, "$JS.ACK.ACME_IDENTITY") {
				got = append(got, s)
			}
		}
		want := []string(nil)
		if slices.Contains([]alpv1.Role{alpv1.Role_ROLE_IDENTITY, alpv1.Role_ROLE_INGRESS, alpv1.Role_ROLE_APPROVALS, alpv1.Role_ROLE_LEDGER, alpv1.Role_ROLE_POLICY, alpv1.Role_ROLE_FEDERATION}, u.Role) {
			want = reader
			if !slices.Contains(u.Consumes, "identity") {
				t.Errorf("%s reads the identity stream but the table does not say so: %v", u.Role, u.Consumes)
			}
		}
		if !slices.Equal(got, want) {
			t.Errorf("%s: identity stream consumer rights %v, want %v", u.Role, got, want)
		}
	}
}

// readerStream is the stream (without namespace) whose projection reader
// may use API subject s of broker acme, or "".
func readerStream(s string) string {
	for _, st := range streams.Table() {
		n := bus.StreamName("acme", st.Name)
		switch s {
		case "$JS.API.CONSUMER.CREATE." + n, "$JS.API.CONSUMER.INFO." + n + ".*", "$JS.API.CONSUMER.MSG.NEXT." + n + ".*":
			return st.Name
		}
	}
	return ""
}

func TestPermissionsForRejects(t *testing.T) {
	for _, tc := range []struct {
		ns      string
		tenants []string
		role    alpv1.Role
		want    string
	}{
		{"bad name", []string{"a.org"}, alpv1.Role_ROLE_POLICY, "broker name"},
		{"a.b", []string{"a.org"}, alpv1.Role_ROLE_POLICY, "broker name"},
		{"acme", nil, alpv1.Role_ROLE_POLICY, "at least one tenant"},
		{"acme", []string{"A.org"}, alpv1.Role_ROLE_POLICY, "not a lowercase domain"},
		{"acme", []string{"a.org", "a.org"}, alpv1.Role_ROLE_POLICY, "twice"},
		{"acme", []string{"a.org"}, alpv1.Role_ROLE_OPERATOR, "not a service role"},
	} {
		if _, err := PermissionsFor(tc.ns, tc.tenants, tc.role); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("PermissionsFor(%q, %q, %s) = %v, want %q", tc.ns, tc.tenants, tc.role, err, tc.want)
		}
	}
}

func TestInbox(t *testing.T) {
	if got := InboxPrefix("acme", "policy"); got != "_INBOX_acme_policy" {
		t.Errorf("InboxPrefix = %s", got)
	}
	for subject, want := range map[string]bool{
		"_INBOX_acme_policy.abc.1": true,
		"_INBOX_acme_ingress.x":    true,
		"_INBOX_acme_policy":       false,
		"_INBOX_acme_operator.x":   false,
		"_INBOX_other_policy.x":    false,
		"_INBOX.x":                 false,
		"alp.inbound.a_org.x":      false,
	} {
		if got := IsInbox("acme", subject); got != want {
			t.Errorf("IsInbox(%s) = %v", subject, got)
		}
	}
	if got := streams.ProbeSubject("acme", "ledger"); got != "alp.probe.acme.ledger" {
		t.Errorf("ProbeSubject = %s", got)
	}
}

func TestDefaultBrokerName(t *testing.T) {
	if got := DefaultBrokerName("Mail.Example.org"); got != "mail_example_org" {
		t.Errorf("got %s", got)
	}
	long := "a-very-long-subdomain-name.of-a-very-long-domain.example"
	a, b := DefaultBrokerName(long), DefaultBrokerName(long+"x")
	if len(a) != 32 || checkName(a) != nil || a == b {
		t.Errorf("long names: %s, %s", a, b)
	}
}

// keys returns valid public keys for every user of o.
func keys(t *testing.T, o ServerOptions) map[string]string {
	t.Helper()
	users, err := o.Users()
	if err != nil {
		t.Fatal(err)
	}
	m := map[string]string{}
	for _, u := range users {
		_, pub, err := NewUserKey()
		if err != nil {
			t.Fatal(err)
		}
		m[u.ID()] = pub
	}
	return m
}

// load parses config text the way nats-server does.
func load(t *testing.T, text string) *server.Options {
	t.Helper()
	path := filepath.Join(t.TempDir(), "nats.conf")
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	opts, err := server.ProcessConfigFile(path)
	if err != nil {
		t.Fatalf("%v\n%s", err, text)
	}
	return opts
}

func TestServerConfigLoads(t *testing.T) {
	for _, tc := range []struct {
		name     string
		o        ServerOptions
		accounts map[string][]string // account → user ids
	}{
		{"shared", ServerOptions{Isolation: Shared, BrokerName: "acme", Tenants: []string{"a.org", "b.org"}},
			map[string][]string{SharedAccount: {"ingress", "policy", "federation", "ledger", "approvals", "identity"}}},
		{"hard", ServerOptions{Isolation: Hard, Tenants: []string{"a.org", "b.org"}, Brokers: map[string]string{"b.org": "bee"}},
			map[string][]string{"TENANT_A_ORG": {"a.org/ingress", "a.org/policy", "a.org/federation", "a.org/ledger", "a.org/approvals", "a.org/identity"},
				"TENANT_B_ORG": {"b.org/ingress", "b.org/policy", "b.org/federation", "b.org/ledger", "b.org/approvals", "b.org/identity"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := tc.o
			o.Listen = "0.0.0.0:4333"
			o.StoreDir = `/var/lib/nats "js" \ $HOME`
			o.PublicKeys = keys(t, o)
			text, err := ServerConfig(o)
			if err != nil {
				t.Fatal(err)
			}
			opts := load(t, text)
			if opts.Host != "0.0.0.0" || opts.Port != 4333 || !opts.JetStream || opts.StoreDir != o.StoreDir {
				t.Errorf("listen %s:%d, jetstream %v in %q", opts.Host, opts.Port, opts.JetStream, opts.StoreDir)
			}
			users, _ := o.Users()
			byKey := map[string]*server.NkeyUser{}
			for _, nu := range opts.Nkeys {
				byKey[nu.Nkey] = nu
			}
			if len(byKey) != len(users) {
				t.Fatalf("%d nkey users, want %d", len(byKey), len(users))
			}
			for _, u := range users {
				nu := byKey[o.PublicKeys[u.ID()]]
				if nu == nil {
					t.Fatalf("user %s missing", u.ID())
				}
				if nu.Account == nil || !slices.Contains(tc.accounts[nu.Account.Name], u.ID()) {
					t.Errorf("user %s in account %v", u.ID(), nu.Account)
				}
				want, err := u.Permissions()
				if err != nil {
					t.Fatal(err)
				}
				p := nu.Permissions
				if p == nil || p.Publish == nil || p.Subscribe == nil || p.Response == nil {
					t.Fatalf("user %s permissions %+v", u.ID(), p)
				}
				if !slices.Equal(p.Publish.Allow, want.Publish) || !slices.Equal(p.Subscribe.Allow, want.Subscribe) ||
					len(p.Publish.Deny) != 0 || len(p.Subscribe.Deny) != 0 {
					t.Errorf("user %s: server has publish %v subscribe %v\nwant %v %v", u.ID(), p.Publish.Allow, p.Subscribe.Allow, want.Publish, want.Subscribe)
				}
			}
			for _, a := range opts.Accounts {
				if _, ok := tc.accounts[a.Name]; !ok && a.Name != "$G" && a.Name != "$SYS" {
					t.Errorf("unexpected account %s", a.Name)
				}
			}
			if o.Isolation == Hard && !strings.Contains(text, `"alp.send.b_org.>"`) {
				t.Error("tenant b's subjects missing")
			}
		})
	}
}

func TestServerConfigTLS(t *testing.T) {
	o := ServerOptions{Isolation: Shared, BrokerName: "acme", Tenants: []string{"a.org"}, Listen: ":4222", StoreDir: "/data",
		TLS: TLS{CertFile: "/etc/nats/server.pem", KeyFile: "/etc/nats/server-key.pem", CAFile: "/etc/nats/ca.pem"}}
	o.PublicKeys = keys(t, o)
	text, err := ServerConfig(o)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"tls {", `cert_file: "/etc/nats/server.pem"`, `key_file: "/etc/nats/server-key.pem"`,
		`ca_file: "/etc/nats/ca.pem"`, "verify: false"} {
		if !strings.Contains(text, want) {
			t.Errorf("configuration lacks %s:\n%s", want, text)
		}
	}
	// (A real server loading this block is tested with generated
	// certificates in TestHardIsolation.)
}

func TestServerOptionsErrors(t *testing.T) {
	good := ServerOptions{Isolation: Shared, BrokerName: "acme", Tenants: []string{"a.org"}, Listen: "0.0.0.0:4222", StoreDir: "/data"}
	for _, tc := range []struct {
		name   string
		mutate func(o *ServerOptions)
		want   string
	}{
		{"isolation", func(o *ServerOptions) { o.Isolation = "soft" }, `isolation "soft"`},
		{"listen", func(o *ServerOptions) { o.Listen = "4222" }, "listen"},
		{"port", func(o *ServerOptions) { o.Listen = "h:70000" }, "port"},
		{"store", func(o *ServerOptions) { o.StoreDir = " " }, "store directory"},
		{"tls key", func(o *ServerOptions) { o.TLS.CertFile = "c.pem" }, "both a certificate and a key"},
		{"tls ca only", func(o *ServerOptions) { o.TLS.CAFile = "ca.pem" }, "both a certificate and a key"},
		{"tenants", func(o *ServerOptions) { o.Tenants = nil }, "at least one tenant"},
		{"shared name", func(o *ServerOptions) { o.BrokerName = "" }, "broker name"},
		{"shared brokers", func(o *ServerOptions) { o.Brokers = map[string]string{"a.org": "x"} }, "hard isolation"},
		{"hard unknown tenant", func(o *ServerOptions) { o.Isolation = Hard; o.Brokers = map[string]string{"b.org": "x"} }, `"b.org", which is not a tenant`},
		{"hard bad name", func(o *ServerOptions) { o.Isolation = Hard; o.Brokers = map[string]string{"a.org": "a.b"} }, "broker name"},
		{"hard bad default", func(o *ServerOptions) { o.Isolation = Hard; o.BrokerName = "x y" }, "broker name"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := good
			tc.mutate(&o)
			_, err := o.Users()
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("got %v, want %q", err, tc.want)
			}
		})
	}
	o := good
	o.PublicKeys = keys(t, o)
	o.PublicKeys["policy"] = "SUAM..."
	if _, err := ServerConfig(o); err == nil || !strings.Contains(err.Error(), "user policy") {
		t.Errorf("bad public key: %v", err)
	}
	// Hard isolation: brokers named by map, by default, or derived.
	o = good
	o.Isolation, o.BrokerName = Hard, ""
	o.Tenants = []string{"a.org", "b.org"}
	o.Brokers = map[string]string{"b.org": "bee"}
	users, err := o.Users()
	if err != nil {
		t.Fatal(err)
	}
	if users[0].Broker != "a_org" || users[0].SeedFile() != filepath.Join("a.org", "ingress.nk") || users[0].ID() != "a.org/ingress" ||
		users[6].Broker != "bee" || users[6].InboxPrefix() != "_INBOX_bee_ingress" || !slices.Equal(users[6].Tenants, []string{"b.org"}) {
		t.Errorf("hard users: %+v", users)
	}
	o.BrokerName = "alpd"
	users, _ = o.Users()
	if users[0].Broker != "alpd" || users[6].Broker != "bee" {
		t.Errorf("default broker name not applied: %+v", users)
	}
}

func TestKeys(t *testing.T) {
	seed, pub, err := NewUserKey()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(string(seed), "SU") || !strings.HasSuffix(string(seed), "\n") || !strings.HasPrefix(pub, "U") {
		t.Fatalf("seed %q, public %q", seed[:2], pub)
	}
	if got, err := PublicKeyFromSeed(seed); err != nil || got != pub {
		t.Errorf("PublicKeyFromSeed = %s, %v; want %s", got, err, pub)
	}
	if _, err := PublicKeyFromSeed([]byte("not a seed")); err == nil {
		t.Error("accepted a non-seed")
	}
}

func TestClientOptions(t *testing.T) {
	seed, _, err := NewUserKey()
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "policy.nk")
	if err := os.WriteFile(file, seed, 0o600); err != nil {
		t.Fatal(err)
	}
	if opts, err := ClientOptions(file, "", "", "", "acme", "policy"); err != nil || len(opts) != 2 {
		t.Errorf("ClientOptions = %d options, %v", len(opts), err)
	}
	for _, tc := range []struct {
		seed, cert, key, ns, role, want string
	}{
		{"", "", "", "acme", "policy", "seed file is required"},
		{filepath.Join(t.TempDir(), "missing.nk"), "", "", "acme", "policy", "missing.nk"},
		{file, "c.pem", "", "acme", "policy", "both the certificate and the key"},
		{file, "", "", "a.b", "policy", "broker name"},
		{file, "", "", "acme", "operator", "not a service role"},
	} {
		if _, err := ClientOptions(tc.seed, "", tc.cert, tc.key, tc.ns, tc.role); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("ClientOptions(%+v) = %v, want %q", tc, err, tc.want)
		}
	}
}

// TestDoc checks docs/nats-permissions.md holds the rendered table;
// ALPD_UPDATE_DOCS=1 rewrites it.
func TestDoc(t *testing.T) {
	const path = "../../docs/nats-permissions.md"
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	doc := string(data)
	begin, end := strings.Index(doc, DocBegin), strings.Index(doc, DocEnd)
	if begin < 0 || end < begin {
		t.Fatalf("%s lacks the markers %q and %q", path, DocBegin, DocEnd)
	}
	want := doc[:begin] + DocBegin + "\n\n" + Markdown() + "\n" + doc[end:]
	if want == doc {
		return
	}
	if os.Getenv("ALPD_UPDATE_DOCS") == "1" {
		if err := os.WriteFile(path, []byte(want), 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("rewrote %s", path)
		return
	}
	t.Errorf("%s is out of date with the table; run ALPD_UPDATE_DOCS=1 go test ./internal/natsauth -run TestDoc", path)
}
