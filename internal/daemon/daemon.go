// Package daemon assembles one alpd process from its configuration:
// embedded or external NATS, the keystore, the broker with all or one of
// its services, the HTTP listener and, in split mode, the gRPC listener.
// It follows SpiceDB's shape: Complete(ctx, cfg) builds everything that can
// fail at start-up, Run(ctx) serves until ctx ends (or the NATS connection
// is closed for good, which is an error) and then shuts down in order
// (listeners, consumers drained, NATS drained, embedded server).
package daemon

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"golang.org/x/time/rate"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/alpd-project/alpd/broker"
	alpv1 "github.com/alpd-project/alpd/gen/alp/v1"
	"github.com/alpd-project/alpd/internal/bus"
	"github.com/alpd-project/alpd/internal/config"
	"github.com/alpd-project/alpd/internal/connlimit"
	"github.com/alpd-project/alpd/internal/envelope"
	"github.com/alpd-project/alpd/internal/keystore"
	"github.com/alpd-project/alpd/internal/loopback"
	"github.com/alpd-project/alpd/internal/mtls"
	"github.com/alpd-project/alpd/internal/natsauth"
	"github.com/alpd-project/alpd/internal/nlip"
	"github.com/alpd-project/alpd/internal/signin"
	"github.com/alpd-project/alpd/internal/streams"
	"github.com/alpd-project/alpd/internal/testidp"
	"github.com/alpd-project/alpd/services/approvals/notify"
	"github.com/alpd-project/alpd/services/approvals/storage"
	"github.com/alpd-project/alpd/services/federation"
	"github.com/alpd-project/alpd/services/federation/discovery"
	"github.com/alpd-project/alpd/services/identity"
	"github.com/alpd-project/alpd/services/ingress"
	"github.com/alpd-project/alpd/services/ingress/mcpapi"
	"github.com/alpd-project/alpd/services/ingress/nlipapi"
	"github.com/alpd-project/alpd/services/ledger"
	ledgerapi "github.com/alpd-project/alpd/services/ledger/api"
)

// Daemon is a completed, runnable alpd process.
type Daemon struct {
	cfg      config.Config
	service  string
	log      *slog.Logger
	embedded *bus.Embedded
	nc       *nats.Conn
	broker   *broker.Broker
	http     *http.Server
	httpLis  net.Listener
	grpc     *grpc.Server
	grpcLis  net.Listener
	testIdPs []*testidp.IdP

	// natsClosed is closed when the client has closed nc for good (a
	// protocol error from the server closes it whatever the reconnect
	// settings; so do exhausted reconnects): Run then stops with an
	// error, the process exits non-zero and is restarted.
	natsClosed     chan struct{}
	natsClosedOnce sync.Once
}

// Complete prepares a process that runs service (one of config.Services())
// or, with service "", all of them. env is the process environment.
func Complete(ctx context.Context, cfg config.Config, service string, env func(string) string, log *slog.Logger) (_ *Daemon, err error) {
	d := &Daemon{cfg: cfg, service: service, log: log, natsClosed: make(chan struct{})}
	defer func() {
		if err != nil {
			d.close()
		}
	}()
	if service != "" && cfg.Embedded() {
		return nil, fmt.Errorf("alpd %s runs one service against an external NATS: set nats.urls (or --nats-url)", service)
	}
	if service != "" {
		// Checks that need no network first, so a wrong certificate is not
		// reported as an unreachable NATS.
		if err := checkSplitTLS(cfg.GRPC, service); err != nil {
			return nil, err
		}
	}
	if err := os.MkdirAll(cfg.DataDir, 0o700); err != nil {
		return nil, fmt.Errorf("data dir: %w", err)
	}
	if err := d.connectNATS(service); err != nil {
		return nil, err
	}
	kek, err := loadKEK(cfg, env, log)
	if err != nil {
		return nil, err
	}
	ks, err := keystore.OpenFile(cfg.KeystorePath(), kek)
	if err != nil {
		return nil, err
	}

	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	deps := broker.Deps{NATS: d.nc, KeyStore: ks, Logger: log, Registerer: reg, Gatherer: reg}
	var services []string
	if service != "" {
		services = []string{service}
		if err := d.splitGRPC(service, &deps); err != nil {
			return nil, err
		}
		if d.grpcLis, err = net.Listen("tcp", cfg.GRPC.Listen); err != nil {
			return nil, fmt.Errorf("grpc.listen %s: %w", cfg.GRPC.Listen, err)
		}
	}
	var tenants []string
	for _, t := range cfg.Broker.Tenants {
		tenants = append(tenants, t.Domain)
	}
	var idps []signin.TenantIdP
	if service == "" || service == "identity" {
		if idps, err = d.identityProviders(cfg); err != nil {
			return nil, err
		}
	}
	fed, err := federationConfig(cfg, log)
	if err != nil {
		return nil, err
	}
	notifications, err := notificationsConfig(cfg.Approvals.Notifications)
	if err != nil {
		return nil, err
	}
	d.broker, err = broker.New(broker.Config{
		Name:     cfg.Broker.Name,
		Tenants:  tenants,
		Services: services,
		Peers:    cfg.GRPC.Peers,
		Bus: broker.BusConfig{
			Replicas: cfg.NATS.Replicas, Duplicates: cfg.Bus.Duplicates,
			MaxDeliver: cfg.Bus.MaxDeliver, AckWait: cfg.Bus.AckWait,
		},
		Limits:    streams.Limits{EventMaxAge: cfg.Bus.EventMaxAge, WorkMaxAge: cfg.Bus.WorkMaxAge, InboxMaxAge: cfg.Bus.InboxMaxAge},
		Operators: operators(cfg.Ops.Operators),
		PublicURL: cfg.PublicURL(),
		IdPs:      idps,
		// Non-Secure cookies only where browsers would drop Secure ones:
		// plain http on loopback (tests, the demo).
		InsecureCookies: strings.HasPrefix(cfg.PublicURL(), "http://") && loopback.URL(cfg.PublicURL()),
		OpsLimits: broker.OpsLimits{
			Rate:  rate.Limit(float64(cfg.Ops.TracePerMinute) / 60),
			Burst: cfg.Ops.TraceBurst,
		},
		Door:          doorConfig(cfg.NLIP),
		NLIP:          nlipConfig(cfg.NLIP),
		MCP:           mcpConfig(nlipConfig(cfg.NLIP)),
		PolicyWorkers: cfg.Policy.Workers,
		Ledger: ledger.Options{Workers: cfg.Ledger.Workers, MaxBatch: cfg.Ledger.MaxBatch, MaxTrees: cfg.Ledger.MaxTrees,
			CheckpointInterval: cfg.Ledger.CheckpointInterval, CheckpointEvery: cfg.Ledger.CheckpointEvery,
			SecretsCacheTTL: cfg.Ledger.SecretsCacheTTL},
		LedgerAPI: ledgerapi.Limits{MaxExports: cfg.Ledger.MaxExports, MaxExportsPerPerson: cfg.Ledger.MaxExportsPerPerson,
			ExportWriteTimeout: cfg.Ledger.ExportWriteTimeout},
		DynamicClients: identity.DynamicClients{MaxUnused: cfg.Identity.DCR.MaxUnusedClients,
			MaxUnusedPerTenant: cfg.Identity.DCR.MaxUnusedClientsPerTenant,
			UnusedTTL:          cfg.Identity.DCR.UnusedClientTTL, SweepInterval: cfg.Identity.DCR.SweepInterval},
		Federation: fed, FreshMaxAge: cfg.Identity.FreshMaxAge,
		Approvals: broker.ApprovalsConfig{SweepEvery: cfg.Approvals.SweepEvery, Notifications: notifications, Expiry: storage.Expiry{
			ConnectionRequest: cfg.Approvals.Expiry.ConnectionRequest, Commitment: cfg.Approvals.Expiry.Commitment,
			ConfidentialFields: cfg.Approvals.Expiry.ConfidentialFields, StandingRule: cfg.Approvals.Expiry.StandingRule}},
	}, deps)
	if err != nil {
		return nil, err
	}
	lis, err := net.Listen("tcp", cfg.HTTP.Addr)
	if err != nil {
		return nil, fmt.Errorf("http.addr %s: %w", cfg.HTTP.Addr, err)
	}
	d.httpLis = capConnections(lis, cfg.HTTP.MaxConnsPerAddress, reg, log)
	d.http = newHTTPServer(cfg.HTTP, d.broker.Handler())
	if cfg.HTTP.TLS.Enabled() {
		getCert, err := mtls.ServerCertificate(cfg.HTTP.TLS.CertFile, cfg.HTTP.TLS.KeyFile, log.With("component", "http-tls"))
		if err != nil {
			return nil, fmt.Errorf("http.tls: %w", err)
		}
		// ServeTLS adds h2 to NextProtos; agents' WebSockets negotiate
		// http/1.1.
		d.http.TLSConfig = &tls.Config{MinVersion: tls.VersionTLS12, GetCertificate: getCert}
	}
	return d, nil
}

// federationConfig is the federation section as the service takes it: off
// (nothing sent to or taken from other brokers) unless config says the
// broker federates (config.FederationEnabled), the peers' roots being the
// system's plus federation.ca_file.
func federationConfig(cfg config.Config, log *slog.Logger) (federation.Config, error) {
	f := cfg.Federation
	if !cfg.FederationEnabled() {
		return federation.Config{Disabled: true}, nil
	}
	out := federation.Config{
		BrokerName: cfg.BrokerName(), Skew: f.Skew, OutboxMaxAge: f.OutboxMaxAge, RetryMin: f.RetryMin, RetryMax: f.RetryMax,
		Senders: f.Senders, PerRemote: f.PerRemote,
		Discovery: discovery.Config{AllowPlainHTTPLoopback: f.AllowPlainHTTPLoopback, AllowPrivate: f.AllowPrivateTargets,
			Resolve: f.Resolve, MaxMaxAge: f.KeyCacheMaxAge, Logger: log.With("component", "discovery")},
	}
	if n, per := f.StrangerLimit(); n > 0 {
		out.StrangerRate = federation.Rate{PerMinute: float64(n) * float64(time.Minute) / float64(per), Burst: n}
	}
	if f.CAFile != "" {
		roots, err := x509.SystemCertPool()
		if err != nil {
			roots = x509.NewCertPool()
		}
		pem, err := os.ReadFile(f.CAFile)
		if err != nil {
			return out, fmt.Errorf("federation.ca_file: %w", err)
		}
		if !roots.AppendCertsFromPEM(pem) {
			return out, fmt.Errorf("federation.ca_file %s: no PEM certificate in it", f.CAFile)
		}
		out.Discovery.RootCAs = roots
	}
	return out, nil
}

// newHTTPServer is the public HTTP server with the http section's timeouts
// and header limit; each route adds its body limit (internal/httproute).
//
// Shutdown waits for requests in flight, but a long-lived one (an MCP
// session's event stream, a WebSocket of pushed items) would never end on
// its own: every request's context is cancelled when Shutdown starts, so
// those handlers return and the agent reconnects to another replica.
func newHTTPServer(c config.HTTP, h http.Handler) *http.Server {
	base, stop := context.WithCancel(context.Background())
	srv := &http.Server{
		Handler:           h,
		ReadHeaderTimeout: c.ReadHeaderTimeout,
		ReadTimeout:       c.ReadTimeout,
		WriteTimeout:      c.WriteTimeout,
		IdleTimeout:       c.IdleTimeout,
		MaxHeaderBytes:    c.MaxHeaderBytes,
		BaseContext:       func(net.Listener) context.Context { return base },
	}
	srv.RegisterOnShutdown(stop)
	return srv
}

// capConnections caps the connections per client address on lis, counting
// refusals in alpd_http_connections_refused_total and warning at most once
// a minute.
func capConnections(lis net.Listener, max int, reg prometheus.Registerer, log *slog.Logger) net.Listener {
	refused := prometheus.NewCounter(prometheus.CounterOpts{
		Name: "alpd_http_connections_refused_total",
		Help: "HTTP connections closed on accept because their client address held http.max_conns_per_address already.",
	})
	reg.MustRegister(refused)
	warn := &rate.Sometimes{Interval: time.Minute}
	return connlimit.New(lis, max, func(key netip.Prefix) {
		refused.Inc()
		warn.Do(func() {
			log.Warn("http: a client address holds http.max_conns_per_address connections; refusing more",
				"address", key.String(), "max", max)
		})
	})
}

func (d *Daemon) connectNATS(service string) error {
	name := "alpd"
	if service != "" {
		name += "-" + service
	}
	closed := nats.ClosedHandler(func(*nats.Conn) { d.natsClosedOnce.Do(func() { close(d.natsClosed) }) })
	if d.cfg.Embedded() {
		e, err := bus.StartEmbedded(bus.EmbeddedOptions{
			StoreDir: filepath.Join(d.cfg.DataDir, "nats"), Listen: d.cfg.NATS.Listen, Logger: d.log,
			SyncInterval: d.cfg.NATS.SyncEvery(),
		})
		if err != nil {
			return err
		}
		d.embedded = e
		d.nc, err = e.Connect(closed)
		return err
	}
	opts, err := natsOptions(d.cfg.NATS, d.cfg.Broker.Name, service)
	if err != nil {
		return err
	}
	nc, err := bus.Connect(d.cfg.NATS.URLs, name, append(opts, closed)...)
	if err != nil {
		return err
	}
	d.nc = nc
	return nil
}

// identityProviders turns identity.idps into sign-in settings, and starts
// the test IdP for the tenants without one when identity.test_idp is on.
func (d *Daemon) identityProviders(cfg config.Config) ([]signin.TenantIdP, error) {
	var out []signin.TenantIdP
	has := map[string]bool{}
	for i, idp := range cfg.Identity.IdPs {
		var secret string
		if idp.ClientSecretFile != "" {
			b, err := os.ReadFile(idp.ClientSecretFile)
			if err != nil {
				return nil, fmt.Errorf("identity.idps[%d].client_secret_file: %w", i, err)
			}
			secret = strings.TrimSpace(string(b))
		}
		has[idp.Tenant] = true
		out = append(out, signin.TenantIdP{
			Tenant: idp.Tenant, Issuer: idp.Issuer, ClientID: idp.ClientID, ClientSecret: secret,
			TenantID: idp.TenantID, AddressClaim: idp.AddressClaim, VerifiedDomains: idp.VerifiedDomains,
			EmailDomains: idp.EmailDomains, Directory: idp.Directory, RolesClaim: idp.RolesClaim,
			Scopes: idp.Scopes,
		})
	}
	tp := cfg.Identity.TestIdP
	if !tp.Enabled {
		return out, nil
	}
	for _, t := range cfg.Broker.Tenants {
		if has[t.Domain] {
			continue
		}
		idp, err := d.startTestIdP(cfg, t.Domain)
		if err != nil {
			return nil, err
		}
		out = append(out, idp)
	}
	return out, nil
}

// startTestIdP runs an in-process test OpenID provider for tenant: its
// users are identity.test_idp.users, with verified addresses
// <username>@<tenant>. It is a test tool: loopback only unless forced.
//
// Its issuer is stable across restarts: people are bound to (issuer,
// subject), and an address belongs to one person, so a new issuer at every
// start would lock everyone out until an operator re-binds them. With a
// fixed identity.test_idp.listen port the issuer follows from it; with port
// 0 the port chosen at the first start is kept in the data dir
// (test-idp/<tenant>.issuer) and used again.
func (d *Daemon) startTestIdP(cfg config.Config, tenant string) (signin.TenantIdP, error) {
	tp := cfg.Identity.TestIdP
	issuerFile, issuer, err := d.keptTestIdPIssuer(cfg, tenant)
	if err != nil {
		return signin.TenantIdP{}, err
	}
	listen := tp.Listen
	if issuer != "" {
		listen = "" // the issuer's host and port
	}
	secret := rand.Text()
	var users []testidp.User
	for _, u := range tp.Users {
		users = append(users, testidp.User{
			Subject: "test-" + u.Username, Username: u.Username, Password: u.Password,
			Email: u.Username + "@" + tenant, EmailVerified: true, Name: u.Username, Roles: u.Roles,
		})
	}
	idp, err := testidp.New(testidp.Config{
		Issuer:           issuer,
		AllowNonLoopback: tp.ForceNonLoopback,
		TenantID:         tp.TenantID,
		Users:            users,
		Clients: []testidp.Client{{ID: "alpd", Secret: secret,
			RedirectURIs: []string{cfg.PublicURL() + "/signin/callback/" + tenant}}},
		AutoLogin: true,
		Logger:    d.log.With("component", "test-idp", "tenant", tenant),
	})
	if err != nil {
		return signin.TenantIdP{}, fmt.Errorf("identity.test_idp: %w", err)
	}
	if err := idp.Start(listen); err != nil {
		if issuer != "" {
			return signin.TenantIdP{}, fmt.Errorf("identity.test_idp: the test IdP of %s must come back at its issuer %s (kept in %s so that people keep their bindings), but: %w; "+
				"free that port, or set identity.test_idp.listen to a fixed port (a new issuer means re-binding people, see docs/identity.md)",
				tenant, issuer, issuerFile, err)
		}
		return signin.TenantIdP{}, fmt.Errorf("identity.test_idp.listen: %w", err)
	}
	d.testIdPs = append(d.testIdPs, idp)
	if issuerFile != "" && issuer == "" {
		if err := keepTestIdPIssuer(issuerFile, idp.Issuer()); err != nil {
			return signin.TenantIdP{}, err
		}
	}
	d.log.Warn("test IdP running: people sign in with the passwords in identity.test_idp; never use it in production",
		"tenant", tenant, "issuer", idp.Issuer())
	return signin.TenantIdP{
		Tenant: tenant, Issuer: idp.Issuer(), ClientID: "alpd", ClientSecret: secret,
		TenantID: tp.TenantID, VerifiedDomains: []string{tenant}, EmailDomains: []string{tenant},
	}, nil
}

// keptTestIdPIssuer says where the test IdP of tenant keeps its issuer
// (file, "" when identity.test_idp.listen names a fixed port, which makes
// the issuer stable by itself) and the issuer kept there by an earlier
// start ("" at the first start, or when it was kept for another listen
// host).
func (d *Daemon) keptTestIdPIssuer(cfg config.Config, tenant string) (file, issuer string, err error) {
	host, port, err := net.SplitHostPort(cfg.Identity.TestIdP.Listen)
	if err != nil {
		return "", "", fmt.Errorf("identity.test_idp.listen: %w", err)
	}
	if port != "0" {
		return "", "", nil
	}
	file = filepath.Join(cfg.DataDir, "test-idp", tenant+".issuer")
	b, err := os.ReadFile(file)
	if errors.Is(err, fs.ErrNotExist) {
		return file, "", nil
	}
	if err != nil {
		return "", "", fmt.Errorf("identity.test_idp: %w", err)
	}
	kept := strings.TrimSpace(string(b))
	u, err := url.Parse(kept)
	if err != nil || u.Scheme != "http" || u.Port() == "" {
		return "", "", fmt.Errorf("identity.test_idp: %s holds %q, not the test IdP's issuer (http://host:port); delete it to choose a new port (people then need re-binding)", file, kept)
	}
	if kh := u.Hostname(); kh != host && !(host == "localhost" && kh == "127.0.0.1") {
		d.log.Warn("the test IdP listens on another host than the kept issuer's: its issuer changes (people need re-binding)",
			"kept", kept, "listen", cfg.Identity.TestIdP.Listen)
		return file, "", nil
	}
	return file, kept, nil
}

// keepTestIdPIssuer writes the test IdP's issuer for the next start.
func keepTestIdPIssuer(file, issuer string) error {
	if err := os.MkdirAll(filepath.Dir(file), 0o700); err != nil {
		return fmt.Errorf("identity.test_idp: keep the issuer: %w", err)
	}
	if err := os.WriteFile(file, []byte(issuer+"\n"), 0o600); err != nil {
		return fmt.Errorf("identity.test_idp: keep the issuer: %w", err)
	}
	return nil
}

// natsOptions authenticate a process to an external NATS: with an nkey
// seed, as its service role's user (permissions and inbox prefix from
// internal/natsauth); otherwise with a credentials file or none. TLS
// settings apply either way.
func natsOptions(c config.NATS, ns, service string) ([]nats.Option, error) {
	t := c.TLS
	if c.NKeySeedFile != "" {
		if service == "" {
			return nil, errors.New("nats.nkey_seed_file: all services in one process have no single role user; run alpd <service> per role, or use nats.credentials_file")
		}
		return natsauth.ClientOptions(c.NKeySeedFile, t.CAFile, t.CertFile, t.KeyFile, ns, service)
	}
	var opts []nats.Option
	if c.CredentialsFile != "" {
		opts = append(opts, nats.UserCredentials(c.CredentialsFile))
	}
	if t.CAFile != "" {
		opts = append(opts, nats.RootCAs(t.CAFile))
	}
	if t.CertFile != "" {
		opts = append(opts, nats.ClientCert(t.CertFile, t.KeyFile))
	}
	return opts, nil
}

// splitGRPC sets up split mode's gRPC: mutual TLS with this process's role
// certificate, per-method authorization of callers by the role in theirs,
// and peers dialled with mTLS that also checks each peer's role.
func (d *Daemon) splitGRPC(service string, deps *broker.Deps) error {
	t := d.cfg.GRPC.TLS
	if t == (config.GRPCTLS{}) {
		d.log.Warn("grpc.insecure: services talk without TLS or caller authorization; never do this outside a local experiment")
		d.grpc = grpc.NewServer()
		deps.GRPCServers = []grpc.ServiceRegistrar{d.grpc}
		deps.PeerDialOptions = func(alpv1.Role) []grpc.DialOption {
			return []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}
		}
		return nil
	}
	files := mtls.Files{CA: t.CAFile, Cert: t.CertFile, Key: t.KeyFile, Logger: d.log}
	creds, err := mtls.ServerCredentials(files)
	if err != nil {
		return fmt.Errorf("grpc.tls: %w", err)
	}
	policy := mtls.DefaultPolicy()
	d.grpc = grpc.NewServer(grpc.Creds(creds),
		grpc.ChainUnaryInterceptor(mtls.UnaryAuthorizer(policy)),
		grpc.ChainStreamInterceptor(mtls.StreamAuthorizer(policy)))
	deps.GRPCServers = []grpc.ServiceRegistrar{d.grpc}
	deps.PeerDialOptions = func(peer alpv1.Role) []grpc.DialOption {
		opt, err := mtls.DialOptionFor(files, peer)
		if err != nil {
			// Files were checked above; a failure here surfaces on the call.
			d.log.Error("peer TLS", "peer", envelope.ServiceName(peer), "err", err)
			return nil
		}
		return []grpc.DialOption{opt}
	}
	return nil
}

// checkSplitTLS refuses split mode without mTLS (unless grpc.insecure) and
// with another role's certificate.
func checkSplitTLS(c config.GRPC, service string) error {
	if c.TLS == (config.GRPCTLS{}) {
		if c.Insecure {
			return nil
		}
		return fmt.Errorf("alpd %s needs mutual TLS between services: set grpc.tls.ca_file, cert_file and key_file (alpctl certs makes development ones), or grpc.insecure: true for a local experiment", service)
	}
	role, _ := envelope.RoleByName(service)
	return checkOwnRole(mtls.Files{CA: c.TLS.CAFile, Cert: c.TLS.CertFile, Key: c.TLS.KeyFile}, role)
}

// checkOwnRole refuses to start a service with another role's certificate.
func checkOwnRole(files mtls.Files, want alpv1.Role) error {
	pair, err := tls.LoadX509KeyPair(files.Cert, files.Key)
	if err != nil {
		return fmt.Errorf("grpc.tls.cert_file %s: %w", files.Cert, err)
	}
	leaf, err := x509.ParseCertificate(pair.Certificate[0])
	if err != nil {
		return fmt.Errorf("grpc.tls.cert_file %s: %w", files.Cert, err)
	}
	got, err := mtls.RoleFromCert(leaf)
	if err != nil {
		return fmt.Errorf("grpc.tls.cert_file %s: %w", files.Cert, err)
	}
	if got != want {
		return fmt.Errorf("grpc.tls.cert_file %s is a %s certificate, but this process runs %s", files.Cert,
			envelope.ServiceName(got), envelope.ServiceName(want))
	}
	return nil
}

func operators(ops []config.Operator) []broker.Operator {
	out := make([]broker.Operator, 0, len(ops))
	for _, op := range ops {
		out = append(out, broker.Operator{Name: op.Name, TokenSHA256: op.TokenSHA256})
	}
	return out
}

// loadKEK reads the key-encryption key as [ReadKEK] does. With neither
// ALPD_KEK nor keystore.kek_file, a development key is generated first at
// config.Config.KEKPath (next to the keystore, 0600) and a warning says that
// production must supply one from a secret store.
func loadKEK(cfg config.Config, env func(string) string, log *slog.Logger) ([]byte, error) {
	if env(config.EnvKEK) == "" && cfg.Keystore.KEKFile == "" {
		created, err := createDevKEK(cfg.KEKPath())
		if err != nil {
			return nil, err
		}
		if created {
			log.Warn("generated a development key-encryption key; in production set ALPD_KEK or keystore.kek_file from a secret store", "path", cfg.KEKPath())
		}
	}
	return ReadKEK(cfg, env)
}

// ReadKEK reads the key-encryption key that seals cfg's keystore file, as
// alpd does: from ALPD_KEK (looked up with env) if set, else from
// config.Config.KEKPath (keystore.kek_file, or the development key next to
// the keystore). It creates nothing: offline tools (alpctl keys) use it on
// a stopped broker's files.
func ReadKEK(cfg config.Config, env func(string) string) ([]byte, error) {
	if s := env(config.EnvKEK); s != "" {
		kek, err := keystore.ParseKEK(s)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", config.EnvKEK, err)
		}
		return kek, nil
	}
	path := cfg.KEKPath()
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("keystore.kek_file: %w", err)
	}
	kek, err := keystore.ParseKEK(strings.TrimSpace(string(data)))
	if err != nil {
		return nil, fmt.Errorf("keystore.kek_file %s: %w", path, err)
	}
	return kek, nil
}

// createDevKEK writes a new KEK to path unless one exists. The key is
// written to a temporary file and hard-linked into place, so processes
// starting together (split mode on one data dir) never read a partial key:
// exactly one link succeeds and everyone reads the complete file.
func createDevKEK(path string) (bool, error) {
	if _, err := os.Stat(path); err == nil {
		return false, nil
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), ".kek-*")
	if err != nil {
		return false, fmt.Errorf("development KEK: %w", err)
	}
	defer os.Remove(tmp.Name())
	_, err = tmp.WriteString(keystore.EncodeKEK(keystore.GenerateKEK()) + "\n")
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return false, fmt.Errorf("development KEK %s: %w", path, err)
	}
	if err := os.Link(tmp.Name(), path); err != nil {
		if errors.Is(err, fs.ErrExist) {
			return false, nil
		}
		return false, fmt.Errorf("development KEK %s: %w", path, err)
	}
	return true, nil
}

// HTTPAddr is the address the HTTP listener got (useful with port 0).
func (d *Daemon) HTTPAddr() string { return d.httpLis.Addr().String() }

// Run serves until ctx is done, then shuts down cleanly. It returns an
// error when the broker or a listener fails, or when the NATS connection
// is closed for good.
func (d *Daemon) Run(ctx context.Context) error {
	defer d.close()
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	runErr := make(chan error, 1)
	go func() { runErr <- d.broker.Run(runCtx) }()
	select {
	case <-d.broker.Started():
	case <-ctx.Done():
	}
	if err := d.broker.StartError(); err != nil {
		<-runErr
		return err
	}
	serveErr := make(chan error, 2)
	go func() {
		serve := d.http.Serve
		if d.http.TLSConfig != nil {
			serve = func(l net.Listener) error { return d.http.ServeTLS(l, "", "") }
		}
		if err := serve(d.httpLis); !errors.Is(err, http.ErrServerClosed) {
			serveErr <- fmt.Errorf("http: %w", err)
		}
	}()
	if d.grpc != nil {
		go func() {
			if err := d.grpc.Serve(d.grpcLis); err != nil {
				serveErr <- fmt.Errorf("grpc: %w", err)
			}
		}()
	}
	d.log.Info("alpd serving", "http", d.HTTPAddr(), "service", orAll(d.service), "embedded_nats", d.cfg.Embedded())

	var err error
	brokerDone := false
	select {
	case <-ctx.Done():
	case err = <-serveErr:
	case err = <-runErr:
		brokerDone = true
		if err == nil {
			err = errors.New("broker stopped")
		}
	case <-d.natsClosed:
		// Nothing works without NATS and this connection never comes
		// back: stop, so that the exit code makes the supervisor
		// (Kubernetes, systemd) start a fresh process.
		err = fmt.Errorf("the NATS connection is closed and will not reconnect: %v", d.nc.LastError())
	}
	d.log.Info("alpd shutting down")
	shutCtx, shutCancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer shutCancel()
	_ = d.http.Shutdown(shutCtx)
	if d.grpc != nil {
		d.grpc.GracefulStop()
	}
	cancel()
	if !brokerDone {
		if berr := <-runErr; err == nil {
			err = berr
		}
	}
	return err
}

func orAll(s string) string {
	if s == "" {
		return "all"
	}
	return s
}

// close releases NATS; it runs after the broker has drained its consumers.
func (d *Daemon) close() {
	if d.nc != nil {
		_ = d.nc.Drain()
		for i := 0; i < 100 && !d.nc.IsClosed(); i++ {
			time.Sleep(20 * time.Millisecond)
		}
		d.nc.Close()
	}
	if d.embedded != nil {
		d.embedded.Shutdown()
	}
	for _, idp := range d.testIdPs {
		_ = idp.Close()
	}
	if d.httpLis != nil {
		_ = d.httpLis.Close()
	}
	if d.grpcLis != nil {
		_ = d.grpcLis.Close()
	}
}

// mcpConfig is the MCP endpoint's settings: the allowed browser origins
// are the NLIP door's (nlip.allowed_origins), so an operator allows an
// origin once for every agent door.
func mcpConfig(nc nlipapi.Config) mcpapi.Config {
	mc := mcpapi.DefaultConfig()
	mc.AllowedOrigins = nc.AllowedOrigins
	return mc
}

// perMinute is a rate given per minute, as the config file gives them.
func perMinute(n, burst int) ingress.Rate { return ingress.Rate{Limit: float64(n) / 60, Burst: burst} }

// doorConfig is the send path every agent door shares (NLIP, MCP, REST):
// the nlip section's rates, decision wait and NMP halt threshold, which
// predate the other doors, set it for all of them.
func doorConfig(c config.NLIP) ingress.DoorConfig {
	d := ingress.DefaultDoorConfig()
	d.NMP.Halt.Percent = uint64(c.NMPHaltPercent)
	d.DecisionWait = c.DecisionWait
	d.PerAgent = perMinute(c.AgentPerMinute, c.AgentBurst)
	d.PerPerson = perMinute(c.PersonPerMinute, c.PersonBurst)
	d.PerTenant = perMinute(c.TenantPerMinute, c.TenantBurst)
	return d
}

// nlipConfig maps the nlip section to the NLIP endpoints' settings.
func nlipConfig(c config.NLIP) nlipapi.Config {
	nc := nlipapi.DefaultConfig()
	nc.Message = nlip.Limits{MaxMessageBytes: c.MaxMessageBytes, MaxSubmessages: c.MaxSubmessages, MaxContentDepth: c.MaxDepth}
	nc.AllowedOrigins = c.AllowedOrigins
	nc.WSMessageRate = perMinute(c.WSPerMinute, c.WSBurst)
	nc.WSIdleTimeout = c.WSIdleTimeout
	nc.WSReadTimeout = c.WSReadTimeout
	nc.WSMaxPerAgent, nc.WSMaxPerPerson = c.WSMaxPerAgent, c.WSMaxPerPerson
	nc.WSReadBuffer = int64(c.WSReadBufferBytes)
	return nc
}

// notificationsConfig is approvals.notifications as the notifier takes it,
// with the secret, password and CA files read; nil when no channel is
// configured (nobody is notified).
func notificationsConfig(n config.Notifications) (*notify.Config, error) {
	if len(n.Webhooks) == 0 && n.Email == nil {
		return nil, nil
	}
	out := &notify.Config{Digest: n.Digest, RetryMin: n.RetryMin, RetryMax: n.RetryMax, MaxAge: n.MaxAge}
	for i, w := range n.Webhooks {
		secret, err := os.ReadFile(w.SecretFile)
		if err != nil {
			return nil, fmt.Errorf("approvals.notifications.webhooks[%d].secret_file: %w", i, err)
		}
		out.Webhooks = append(out.Webhooks, notify.Webhook{URL: w.URL, Secret: bytes.TrimSpace(secret), Person: w.Person, Tenant: w.Tenant})
	}
	if e := n.Email; e != nil {
		m := &notify.Email{Addr: e.Addr, From: e.From, Username: e.Username, StartTLS: e.StartTLS, ServerName: e.ServerName, To: e.To}
		if e.PasswordFile != "" {
			pw, err := os.ReadFile(e.PasswordFile)
			if err != nil {
				return nil, fmt.Errorf("approvals.notifications.email.password_file: %w", err)
			}
			m.Password = strings.TrimSpace(string(pw))
		}
		if e.CAFile != "" {
			pem, err := os.ReadFile(e.CAFile)
			if err != nil {
				return nil, fmt.Errorf("approvals.notifications.email.ca_file: %w", err)
			}
			pool, err := x509.SystemCertPool()
			if err != nil {
				pool = x509.NewCertPool()
			}
			if !pool.AppendCertsFromPEM(pem) {
				return nil, fmt.Errorf("approvals.notifications.email.ca_file: no PEM certificate in %s", e.CAFile)
			}
			m.RootCAs = pool
		}
		out.Email = m
	}
	if q := n.QuietHours; q != nil {
		loc := time.UTC
		if q.TimeZone != "" {
			var err error
			if loc, err = time.LoadLocation(q.TimeZone); err != nil {
				return nil, fmt.Errorf("approvals.notifications.quiet_hours.time_zone: %w", err)
			}
		}
		out.QuietHours = &notify.QuietHours{Start: q.Start, End: q.End, Location: loc}
	}
	return out, nil
}
