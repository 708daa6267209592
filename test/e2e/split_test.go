package e2e

import (
	"cmp"
	"context"
	"encoding/base64"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"
	"google.golang.org/grpc"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/alpd-project/alpd/broker"
	approvalsv1 "github.com/alpd-project/alpd/gen/alp/approvals/v1"
	federationv1 "github.com/alpd-project/alpd/gen/alp/federation/v1"
	identityv1 "github.com/alpd-project/alpd/gen/alp/identity/v1"
	ingressv1 "github.com/alpd-project/alpd/gen/alp/ingress/v1"
	ledgerv1 "github.com/alpd-project/alpd/gen/alp/ledger/v1"
	policyv1 "github.com/alpd-project/alpd/gen/alp/policy/v1"
	alpv1 "github.com/alpd-project/alpd/gen/alp/v1"
	"github.com/alpd-project/alpd/internal/config"
	"github.com/alpd-project/alpd/internal/envelope"
	"github.com/alpd-project/alpd/internal/mtls"
	"github.com/alpd-project/alpd/internal/testkit"
)

// Split mode's tenant, broker name (NATS namespace) and operator.
const (
	splitTenant   = "example.org"
	splitBroker   = "alpd"
	splitOperator = "e2e-operator"
	// splitUser signs in at identity's test IdP.
	splitUser = "ana"
)

// The process whose operator endpoints are rate-limited tightly, and its
// limits: every other process keeps the defaults.
const (
	rateLimitedService = "policy"
	tightTraceBurst    = 3
	tightTracePerMin   = 1
)

// splitService is one `alpd <service>` process of the split-mode test.
type splitService struct {
	name       string
	role       alpv1.Role
	api        string // gRPC API name, as registered with the health service
	httpAddr   string
	grpcAddr   string
	configFile string
	proc       *proc
	conn       *grpc.ClientConn // dialled with the operator's certificate
}

// splitCluster is a split-mode broker set up as in production: a
// nats-server from `alpctl nats-config` (TLS required, one nkey user per
// role), role certificates from `alpctl certs`, mutual TLS between the
// services and an operator from `alpctl operator-token`.
type splitCluster struct {
	bins     bins
	dir      string // the test's scratch directory
	certs    string // alpctl certs --out
	natsDir  string // alpctl nats-config --out: nats-server.conf, <role>.nk
	natsAddr string
	natsURL  string
	ns       *proc
	dataDir  string // shared by the six processes (keystore file)
	env      []string
	token    string
	operator config.Operator
	svcs     []*splitService
	byName   map[string]*splitService
}

// TestSplitMode runs each service in its own process against an external
// nats-server, all configured as in production: TLS to NATS with one nkey
// user per service role, mutual TLS with role certificates between the
// services, an operator allowed to trace. It talks to each service with the
// operator's certificate (standard health, Ping, one envelope chained
// through all six), runs `alpctl trace` over every transport, and checks
// what must be refused: a method outside the caller's role, a certificate
// from another CA, traces without a token or over the rate, a process
// started with another role's certificate or without mTLS, and a NATS
// publish outside the role's permissions.
func TestSplitMode(t *testing.T) {
	b := binaries(t)
	testStart := time.Now()
	c := startSplit(t, b)
	t.Logf("split mode up in %s", time.Since(testStart).Round(time.Millisecond))

	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	for _, s := range c.svcs {
		t.Run("service="+s.name, func(t *testing.T) {
			checkSplitReadyz(t, s, c.token)
			for _, name := range []string{"", s.api} {
				checkServing(ctx, t, s, name)
			}
			res, err := broker.Ping(ctx, s.conn, s.role, &alpv1.Envelope{})
			if err != nil {
				t.Fatalf("Ping with the operator's certificate: %v", err)
			}
			if !res.Ready || res.Service != s.name {
				t.Errorf("Ping answered service %q, ready %v; want %q, ready", res.Service, res.Ready, s.name)
			}
			trace := envelope.NMP(res.Envelope).GetTrace()
			if len(trace) != 1 || trace[0].GetService() != s.name {
				t.Errorf("Ping envelope trace = %v; want exactly one entry for %s", trace, s.name)
			}
		})
	}

	// One envelope through all six, in the order a message meets them.
	t.Run("chain", func(t *testing.T) {
		env := &alpv1.Envelope{}
		for _, name := range traceOrder {
			s := c.byName[name]
			res, err := broker.Ping(ctx, s.conn, s.role, env)
			if err != nil {
				t.Fatalf("Ping %s: %v", name, err)
			}
			if !res.Ready || res.Service != name {
				t.Errorf("Ping %s answered service %q, ready %v", name, res.Service, res.Ready)
			}
			env = res.Envelope
		}
		trace := envelope.NMP(env).GetTrace()
		var got []string
		for _, e := range trace {
			got = append(got, e.GetService())
		}
		if strings.Join(got, ",") != strings.Join(traceOrder, ",") {
			t.Fatalf("trace services = %q, want %q", got, traceOrder)
		}
		for i := 1; i < len(trace); i++ {
			if prev, cur := trace[i-1].GetTrust(), trace[i].GetTrust(); cur > prev {
				t.Errorf("trust increased at %s: %s -> %s", trace[i].GetService(), prev, cur)
			}
		}
		if last := trace[len(trace)-1].GetTrust(); envelope.Trust(env) != last {
			t.Errorf("envelope trust %s differs from the last trace entry's %s", envelope.Trust(env), last)
		}
	})

	// The broker traceroute, as an operator runs it against ingress: over
	// gRPC between the processes (mTLS, the ingress role's certificate)
	// and over the probe subjects on NATS (the ingress role's user).
	t.Run("alpctl", func(t *testing.T) {
		ingress := c.byName["ingress"]
		if res := runTool(t, b.alpctl, hermeticEnv(), "--broker", "http://"+ingress.httpAddr, "status", "--operator-token", c.token); res.code != 0 || !strings.Contains(res.stdout, "ALPD_SEND") {
			t.Errorf("alpctl status against ingress: exit code %d, want 0 (ready) and ingress's streams:\n%s", res.code, res.stdout)
		}
		for _, tc := range []struct{ via, want string }{
			{"", broker.ViaGRPC}, // auto: every peer has a gRPC address
			{broker.ViaBus, broker.ViaBus},
			{broker.ViaGRPC, broker.ViaGRPC},
		} {
			args := []string{"--operator-token", c.token}
			if tc.via != "" {
				args = append(args, "--via", tc.via)
			}
			start := time.Now()
			res, hops := alpctlTrace(t, b, ingress.httpAddr, args...)
			t.Logf("alpctl trace --via %s: exit code %d in %s", cmp.Or(tc.via, "(default)"), res.code, time.Since(start).Round(time.Millisecond))
			checkTrace(t, res, hops, tc.want)
		}
	})

	t.Run("security", func(t *testing.T) { checkSplitSecurity(ctx, t, c) })

	// The agents' doors answer on their own processes: NLIP on ingress, the
	// ledger's read API on ledger, each asking for a bearer token and
	// saying where to get one; another process says where they are not.
	t.Run("public endpoints", func(t *testing.T) {
		for _, tc := range []struct{ service, method, path, body string }{
			{"ingress", http.MethodPost, "/nlip/", `{"format":"text","subformat":"english","content":"hi"}`},
			{"ledger", http.MethodGet, "/v1/ledger", ""},
		} {
			req, _ := http.NewRequest(tc.method, "http://"+c.byName[tc.service].httpAddr+tc.path, strings.NewReader(tc.body))
			req.Header.Set("Content-Type", "application/json")
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusUnauthorized || !strings.Contains(resp.Header.Get("WWW-Authenticate"), "resource_metadata=") {
				t.Errorf("%s %s on %s: %d %q, want 401 with a bearer challenge", tc.method, tc.path, tc.service, resp.StatusCode, resp.Header.Get("WWW-Authenticate"))
			}
			other := "policy"
			resp, err = http.Post("http://"+c.byName[other].httpAddr+tc.path, "application/json", strings.NewReader(tc.body))
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusServiceUnavailable {
				t.Errorf("%s on %s: %d, want 503 (%s runs elsewhere)", tc.path, other, resp.StatusCode, tc.service)
			}
		}
	})

	// Issue 10 finding 1 with ingress as its own process: a read-only PAT
	// from identity, then about 4,000 characters as an envelope id.
	t.Run("hostile envelope id", func(t *testing.T) {
		pat, _ := signInAgent(t, c.byName["identity"].httpAddr, splitUser, "alp.read")
		ingress := c.byName["ingress"]
		checkHostileEnvelopeID(t, ingress.proc, ingress.httpAddr, pat)
	})

	// SIGTERM every alpd at once; each must exit 0 within stopTimeout.
	phase := time.Now()
	var wg sync.WaitGroup
	for _, s := range c.svcs {
		wg.Go(func() { s.proc.stop(t) })
	}
	wg.Wait()
	t.Logf("six alpd stopped in %s", time.Since(phase).Round(time.Millisecond))
	for _, s := range c.svcs {
		if msgs := s.proc.logMessages(); !slices.Contains(msgs, "alpd stopped") {
			t.Errorf("alpd %s: log has no \"alpd stopped\"", s.name)
		}
	}
	c.ns.stop(t)
	t.Logf("split mode total %s", time.Since(testStart).Round(time.Millisecond))
}

// startSplit makes the certificates, the NATS configuration and the
// operator token with alpctl, starts nats-server and the six services, and
// waits until every service is ready and dialled with the operator's
// certificate. Each tweak may change a service's configuration (named by
// service) before it is written, as an operator edits a file.
func startSplit(t *testing.T, b bins, tweaks ...func(service string, conf map[string]any)) *splitCluster {
	t.Helper()
	dir := t.TempDir()
	c := &splitCluster{
		bins:    b,
		dir:     dir,
		certs:   filepath.Join(dir, "certs"),
		natsDir: filepath.Join(dir, "nats"),
		dataDir: filepath.Join(dir, "data"),
		byName:  map[string]*splitService{},
		svcs: []*splitService{
			{name: "identity", role: alpv1.Role_ROLE_IDENTITY, api: identityv1.IdentityService_ServiceDesc.ServiceName},
			{name: "ingress", role: alpv1.Role_ROLE_INGRESS, api: ingressv1.IngressService_ServiceDesc.ServiceName},
			{name: "policy", role: alpv1.Role_ROLE_POLICY, api: policyv1.PolicyService_ServiceDesc.ServiceName},
			{name: "federation", role: alpv1.Role_ROLE_FEDERATION, api: federationv1.FederationService_ServiceDesc.ServiceName},
			{name: "ledger", role: alpv1.Role_ROLE_LEDGER, api: ledgerv1.LedgerService_ServiceDesc.ServiceName},
			{name: "approvals", role: alpv1.Role_ROLE_APPROVALS, api: approvalsv1.ApprovalsService_ServiceDesc.ServiceName},
		},
	}
	// Every address at once, so that they differ.
	addrs := freeAddrs(t, 1+2*len(c.svcs))
	c.natsAddr = addrs[0]
	c.natsURL = "tls://" + c.natsAddr
	for i, s := range c.svcs {
		s.httpAddr, s.grpcAddr = addrs[1+2*i], addrs[2+2*i]
		c.byName[s.name] = s
	}

	// Development CA, a certificate per role (the operator's too) and
	// nats-server's.
	if res := runTool(t, b.alpctl, hermeticEnv(), "certs", "--out", c.certs, "--hosts", "127.0.0.1,localhost", "--nats-server"); res.code != 0 {
		t.Fatalf("alpctl certs: exit code %d", res.code)
	}
	srv := mtls.NATSServerFiles(c.certs)
	if res := runTool(t, b.alpctl, hermeticEnv(), "nats-config",
		"--tls-cert", srv.Cert, "--tls-key", srv.Key, "--tls-ca", srv.CA,
		"--listen", c.natsAddr, "--store-dir", filepath.Join(dir, "jetstream"),
		"--tenants", splitTenant, "--broker-name", splitBroker, "--out", c.natsDir); res.code != 0 {
		t.Fatalf("alpctl nats-config: exit code %d", res.code)
	}
	c.token, c.operator = operatorToken(t, b, splitOperator)

	c.ns = startProc(t, "nats-server", b.natsServer, hermeticEnv(), "-c", filepath.Join(c.natsDir, "nats-server.conf"))
	waitTCP(t, c.ns, c.natsAddr, 15*time.Second)

	kek := testkit.RandKey()
	c.env = hermeticEnv("ALPD_KEK=" + base64.StdEncoding.EncodeToString(kek))
	for _, s := range c.svcs {
		s.configFile = filepath.Join(dir, s.name+".yaml")
		conf := c.config(s, s.name, c.dataDir)
		for _, tweak := range tweaks {
			tweak(s.name, conf)
		}
		writeYAML(t, s.configFile, conf)
	}
	start := func(s *splitService) {
		s.proc = startProc(t, "alpd "+s.name, b.alpd, c.env, s.name, "--config", s.configFile)
	}

	// Identity first: it provisions the tenant keys in the shared keystore
	// file, which the others read when they start.
	start(c.svcs[0])
	took := waitReady(t, c.svcs[0].proc, c.svcs[0].httpAddr)
	t.Logf("identity ready in %s", took.Round(time.Millisecond))
	phase := time.Now()
	for _, s := range c.svcs[1:] {
		start(s)
	}
	for _, s := range c.svcs[1:] {
		waitReady(t, s.proc, s.httpAddr)
	}
	t.Logf("the other five ready in %s", time.Since(phase).Round(time.Millisecond))

	for _, s := range c.svcs {
		s.conn = c.dial(t, alpv1.Role_ROLE_OPERATOR, s)
	}
	return c
}

// config is the configuration of service s's process, as an operator
// writes it: its own NATS user (seed file) over TLS, the gRPC peers, the
// mTLS files of role certRole ("" for no grpc.tls at all) and the operator.
func (c *splitCluster) config(s *splitService, certRole, dataDir string) map[string]any {
	peers := map[string]string{}
	for _, p := range c.svcs {
		peers[p.name] = p.grpcAddr
	}
	grpcConf := map[string]any{"listen": s.grpcAddr, "peers": peers}
	if certRole != "" {
		role, ok := mtls.RoleByName(certRole)
		if !ok {
			panic("no role " + certRole)
		}
		f := mtls.DevFiles(c.certs, role)
		grpcConf["tls"] = map[string]string{"ca_file": f.CA, "cert_file": f.Cert, "key_file": f.Key}
	}
	ops := map[string]any{
		"operators": []map[string]string{{"name": c.operator.Name, "token_sha256": c.operator.TokenSHA256}},
	}
	if s.name == rateLimitedService {
		ops["trace_burst"] = tightTraceBurst
		ops["trace_per_minute"] = tightTracePerMin
	}
	conf := map[string]any{
		"broker":   map[string]any{"name": splitBroker, "tenants": []map[string]string{{"domain": splitTenant}}},
		"data_dir": dataDir,
		"http":     map[string]string{"addr": s.httpAddr},
		"nats": map[string]any{
			"urls":           []string{c.natsURL},
			"nkey_seed_file": filepath.Join(c.natsDir, s.name+".nk"),
			"tls":            map[string]string{"ca_file": filepath.Join(c.certs, mtls.CACertFile)},
		},
		"grpc": grpcConf,
		"ops":  ops,
	}
	if s.name == "identity" {
		// People sign in at identity (loopback test IdP), to mint PATs.
		conf["identity"] = map[string]any{"test_idp": map[string]any{
			"enabled": true,
			"users":   []map[string]any{{"username": splitUser, "password": splitUser + "-pw"}},
		}}
	}
	return conf
}

// dial connects to service s presenting role's development certificate and
// requiring s's role in the server's.
func (c *splitCluster) dial(t *testing.T, role alpv1.Role, s *splitService) *grpc.ClientConn {
	t.Helper()
	return dialFiles(t, mtls.DevFiles(c.certs, role), s)
}

func dialFiles(t *testing.T, files mtls.Files, s *splitService) *grpc.ClientConn {
	t.Helper()
	opt, err := mtls.DialOptionFor(files, s.role)
	if err != nil {
		t.Fatalf("mtls.DialOptionFor(%s, %s): %v", files.Cert, s.name, err)
	}
	conn, err := grpc.NewClient(s.grpcAddr, opt)
	if err != nil {
		t.Fatalf("%s: grpc.NewClient(%s): %v", s.name, s.grpcAddr, err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return conn
}

// writeYAML writes v as a YAML file (0600).
func writeYAML(t *testing.T, path string, v any) {
	t.Helper()
	data, err := yaml.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
}

// checkSplitReadyz checks that a split-mode process lists exactly its own
// service, ready and answering Ping through gRPC, to the operator with
// token.
func checkSplitReadyz(t *testing.T, s *splitService, token string) {
	t.Helper()
	status, r := readiness(t, s.httpAddr, token)
	if status != http.StatusOK || !r.Ready {
		t.Errorf("/readyz?verbose=1: status %d, ready %v, error %q", status, r.Ready, r.Error)
	}
	if len(r.Services) != 1 || r.Services[0].Name != s.name || !r.Services[0].Ready || r.Services[0].GRPC != "ok" {
		t.Errorf("/readyz services = %+v; want only %s, ready, grpc \"ok\"", r.Services, s.name)
	}
	for _, st := range r.Streams {
		if st.Owner != s.name {
			t.Errorf("/readyz lists stream %s of %s", st.Name, st.Owner)
		}
	}
}

// checkServing requires the standard health service to report SERVING for
// name. Statuses are refreshed every second by the broker, so a service
// name not yet registered (NotFound) is retried briefly.
func checkServing(ctx context.Context, t *testing.T, s *splitService, name string) {
	t.Helper()
	client := healthpb.NewHealthClient(s.conn)
	start := time.Now()
	deadline := start.Add(5 * time.Second)
	for tries := 1; ; tries++ {
		res, err := client.Check(ctx, &healthpb.HealthCheckRequest{Service: name})
		if err == nil && res.GetStatus() == healthpb.HealthCheckResponse_SERVING {
			if tries > 1 {
				t.Logf("health %q: SERVING after %d checks (%s)", name, tries, time.Since(start).Round(time.Millisecond))
			}
			return
		}
		if time.Now().After(deadline) {
			t.Errorf("health %q: %v %v; want SERVING", name, res.GetStatus(), err)
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
}
