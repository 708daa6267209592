package federation_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.yaml.in/yaml/v3"

	"github.com/alpd-project/alpd/internal/bus"
	"github.com/alpd-project/alpd/internal/config"
	"github.com/alpd-project/alpd/internal/daemon"
	"github.com/alpd-project/alpd/internal/keystore"
	"github.com/alpd-project/alpd/internal/mtls"
	"github.com/alpd-project/alpd/test/internal/alpdtest"
)

// Timeouts of the harness.
const (
	// ReadyTimeout bounds a broker's start: several start at once on a
	// small machine.
	ReadyTimeout = 90 * time.Second
	// RefuseTimeout bounds how long an alpd that must refuse to start
	// may take to exit.
	RefuseTimeout = 30 * time.Second
)

// BrokerSpec describes one broker of the harness.
type BrokerSpec struct {
	// Name is the broker's DNS name (federation.broker_name), e.g.
	// "broker.a.example".
	Name string
	// Domains are the tenants it is the home broker of, e.g. "a.example".
	Domains []string
	// Claims are tenants it hosts without being their home broker (a
	// rogue broker): nobody's resolve map or certificate names them here.
	Claims []string
	// Users and Admins are the test IdP's people for every domain
	// (password "<name>-pw"); Admins also hold alp.admin.
	Users, Admins []string
	// Config, if set, changes the alpd.yaml map last.
	Config func(conf map[string]any)
}

// Harness is a set of brokers on one machine and the test CA they trust.
type Harness struct {
	t    testing.TB
	Bins alpdtest.Bins
	// CA is the test CA; CAFile its certificate (PEM), federation.ca_file
	// of every broker; Roots the pool of it for clients.
	CA      *mtls.CA
	CAFile  string
	Roots   *x509.CertPool
	Brokers []*Broker
	// resolve maps every broker's name and domain to its ip:port.
	resolve map[string]string
	nextIP  int
	// agents is the one client agents' requests share (its connections
	// are reused: a broker caps the connections one address holds).
	agents     *http.Client
	agentsOnce sync.Once
}

// AgentClient is the Client agents' requests share.
func (h *Harness) AgentClient() *http.Client {
	h.agentsOnce.Do(func() { h.agents = h.Client() })
	return h.agents
}

// Broker is one alpd of the harness. Its addresses, files and data dir stay
// the same across restarts.
type Broker struct {
	h    *Harness
	Spec BrokerSpec
	// Name is the broker name; NS its NATS namespace (broker.name).
	Name, NS string
	// IP is its loopback address, Addr its HTTPS ip:port, Port the port.
	IP, Addr string
	Port     int
	// URL is its public URL, https://<name>:<port>.
	URL string
	// NATSAddr is where its embedded NATS listens.
	NATSAddr            string
	DataDir, ConfigFile string
	CertFile, KeyFile   string
	mu                  sync.Mutex
	p                   *alpdtest.Proc
}

// New starts one broker per spec (in parallel) and waits until every one is
// ready over HTTPS. The brokers are stopped at the end of the test.
func New(t testing.TB, specs ...BrokerSpec) *Harness {
	t.Helper()
	h := &Harness{t: t, Bins: alpdtest.Binaries(t), resolve: map[string]string{}, nextIP: 2}
	ca, err := mtls.NewCA("alpd federation test CA", 7*24*time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	h.CA = ca
	h.CAFile = filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(h.CAFile, ca.CertPEM(), 0o600); err != nil {
		t.Fatal(err)
	}
	h.Roots = x509.NewCertPool()
	h.Roots.AppendCertsFromPEM(ca.CertPEM())
	for _, s := range specs {
		h.Brokers = append(h.Brokers, h.newBroker(t, s))
	}
	// The resolve map is complete only now: write every config, then start.
	for _, b := range h.Brokers {
		b.writeConfig(t)
	}
	for _, b := range h.Brokers {
		b.launch(t)
	}
	for _, b := range h.Brokers {
		b.waitReady(t)
	}
	return h
}

// newBroker allocates the next loopback address, a port on it, and the
// broker's certificate, and adds its names to the resolve map.
func (h *Harness) newBroker(t testing.TB, s BrokerSpec) *Broker {
	t.Helper()
	if s.Name == "" || len(s.Domains) == 0 {
		t.Fatalf("harness: a broker needs a name and at least one domain: %+v", s)
	}
	ip := fmt.Sprintf("127.0.0.%d", h.nextIP)
	h.nextIP++
	ports := freePorts(t, ip, 2)
	b := &Broker{h: h, Spec: s, Name: s.Name, NS: namespace(s.Name), IP: ip, Port: ports[0],
		Addr: net.JoinHostPort(ip, strconv.Itoa(ports[0])), NATSAddr: net.JoinHostPort(ip, strconv.Itoa(ports[1])),
		DataDir: t.TempDir()}
	b.URL = "https://" + b.Name + ":" + strconv.Itoa(b.Port)
	dir := t.TempDir()
	b.ConfigFile, b.CertFile, b.KeyFile = filepath.Join(dir, "alpd.yaml"), filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	hosts := append([]string{s.Name}, s.Domains...)
	certPEM, keyPEM, err := h.CA.IssueServer(s.Name, append(hosts, ip), 24*time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if err := mtls.WriteCertAndKey(b.CertFile, b.KeyFile, certPEM, keyPEM); err != nil {
		t.Fatal(err)
	}
	for _, n := range hosts {
		if other, dup := h.resolve[n]; dup {
			t.Fatalf("harness: %s is named by two brokers (%s and %s)", n, other, b.Addr)
		}
		h.resolve[n] = b.Addr
	}
	return b
}

// namespace is the NATS namespace for a broker name: A-Z a-z 0-9 _ -, at
// most 32 characters (config's rule for broker.name).
func namespace(name string) string {
	ns := strings.NewReplacer(".", "_").Replace(name)
	if len(ns) > 32 {
		ns = ns[:32]
	}
	return ns
}

// freePorts returns n distinct ports free on ip a moment ago.
func freePorts(t testing.TB, ip string, n int) []int {
	t.Helper()
	var ports []int
	var lis []net.Listener
	for range n {
		l, err := net.Listen("tcp", net.JoinHostPort(ip, "0"))
		if err != nil {
			t.Fatalf("harness: listen on %s (is the loopback range 127.0.0.0/8 usable here?): %v", ip, err)
		}
		lis = append(lis, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	for _, l := range lis {
		_ = l.Close()
	}
	return ports
}

// Resolve returns a copy of the map of every broker's name and domain to
// its ip:port (each broker's federation.resolve).
func (h *Harness) Resolve() map[string]string {
	out := make(map[string]string, len(h.resolve))
	for k, v := range h.resolve {
		out[k] = v
	}
	return out
}

// Broker returns the broker of that name, failing the test if none is.
func (h *Harness) Broker(name string) *Broker {
	for _, b := range h.Brokers {
		if b.Name == name {
			return b
		}
	}
	h.t.Fatalf("harness: no broker %q", name)
	return nil
}

// Client is an HTTP client that trusts the test CA and dials every
// broker's names and domains at its ip:port (other hosts, such as the test
// IdPs on 127.0.0.1, as they are). It follows redirects and has no cookie
// jar.
func (h *Harness) Client() *http.Client {
	resolve := h.Resolve()
	dialer := &net.Dialer{Timeout: 5 * time.Second}
	return &http.Client{Timeout: 15 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{RootCAs: h.Roots, MinVersion: tls.VersionTLS12},
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			if host, _, err := net.SplitHostPort(addr); err == nil {
				if target, ok := resolve[host]; ok {
					addr = target
				}
			}
			return dialer.DialContext(ctx, network, addr)
		},
		ForceAttemptHTTP2:   true,
		MaxIdleConnsPerHost: 64,
	}}
}

// config is the broker's alpd.yaml as a map.
func (b *Broker) config() map[string]any {
	var tenants []map[string]string
	for _, d := range append(slices.Clone(b.Spec.Domains), b.Spec.Claims...) {
		tenants = append(tenants, map[string]string{"domain": d})
	}
	var users []map[string]any
	for _, u := range b.Spec.Admins {
		users = append(users, map[string]any{"username": u, "password": u + "-pw", "roles": []string{"alp.admin"}})
	}
	for _, u := range b.Spec.Users {
		users = append(users, map[string]any{"username": u, "password": u + "-pw"})
	}
	if len(users) == 0 {
		users = append(users, map[string]any{"username": "admin", "password": "admin-pw", "roles": []string{"alp.admin"}})
	}
	return map[string]any{
		"data_dir": b.DataDir,
		"broker":   map[string]any{"name": b.NS, "tenants": tenants},
		"http": map[string]any{"addr": b.Addr, "public_url": b.URL,
			"tls": map[string]any{"cert_file": b.CertFile, "key_file": b.KeyFile}},
		"nats":       map[string]any{"listen": b.NATSAddr},
		"identity":   map[string]any{"test_idp": map[string]any{"enabled": true, "listen": "127.0.0.1:0", "users": users}},
		"federation": map[string]any{"broker_name": b.Name, "ca_file": b.h.CAFile, "resolve": b.h.Resolve()},
	}
}

func (b *Broker) writeConfig(t testing.TB) {
	t.Helper()
	conf := b.config()
	if b.Spec.Config != nil {
		b.Spec.Config(conf)
	}
	data, err := yaml.Marshal(conf)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(b.ConfigFile, data, 0o600); err != nil {
		t.Fatal(err)
	}
}

func (b *Broker) launch(t testing.TB) {
	t.Helper()
	p := alpdtest.Start(t, b.Name, b.h.Bins.ALPD, alpdtest.HermeticEnv(), "--config", b.ConfigFile)
	b.mu.Lock()
	b.p = p
	b.mu.Unlock()
}

func (b *Broker) proc() *alpdtest.Proc {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.p
}

// waitReady polls /readyz over HTTPS at the broker's name until it answers
// 200, failing if the process exits first or ReadyTimeout passes.
func (b *Broker) waitReady(t testing.TB) {
	t.Helper()
	p := b.proc()
	c := b.h.Client()
	deadline := time.Now().Add(ReadyTimeout)
	var last string
	for {
		if p.Exited() {
			t.Fatalf("%s exited with code %d before it was ready (last /readyz: %s)", b.Name, p.Cmd.ProcessState.ExitCode(), last)
		}
		resp, err := c.Get(b.URL + "/readyz")
		if err == nil {
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
			last = fmt.Sprintf("%d %s", resp.StatusCode, bytes.TrimSpace(body))
		} else {
			last = err.Error()
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s not ready after %s (last /readyz: %s)", b.Name, ReadyTimeout, last)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// Start starts the broker again (after Stop or Kill) on its data dir and
// addresses, and waits until it is ready.
func (b *Broker) Start(t testing.TB) {
	t.Helper()
	if p := b.proc(); p != nil && !p.Exited() {
		t.Fatalf("%s is still running", b.Name)
	}
	b.launch(t)
	b.waitReady(t)
}

// Stop ends the broker with SIGTERM (exit code 0 required).
func (b *Broker) Stop(t testing.TB) { t.Helper(); b.proc().Stop(t) }

// Kill ends the broker with SIGKILL: no shutdown, no flush.
func (b *Broker) Kill(t testing.TB) { t.Helper(); b.proc().Kill(t) }

// Restart is Stop then Start.
func (b *Broker) Restart(t testing.TB) { t.Helper(); b.Stop(t); b.Start(t) }

// Output is what the broker's current process has written (JSON log lines).
func (b *Broker) Output() string { return b.proc().Output.String() }

// DomainURL is https://<domain>:<port>: the broker's listener reached as
// its domain (where the domain's /.well-known/alp is served).
func (b *Broker) DomainURL(domain string) string {
	return "https://" + domain + ":" + strconv.Itoa(b.Port)
}

// Get fetches url (absolute, or a path on the broker's URL) with the
// harness's client and returns the status and the body.
func (b *Broker) Get(t testing.TB, url string) (int, []byte) {
	t.Helper()
	if strings.HasPrefix(url, "/") {
		url = b.URL + url
	}
	resp, err := b.h.Client().Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	return resp.StatusCode, body
}

// SignIn signs user in to domain at the broker's test IdP (through the
// broker's HTTPS at its name).
func (b *Broker) SignIn(t testing.TB, domain, user string) *alpdtest.Session {
	t.Helper()
	return alpdtest.SignIn(t, b.h.Client(), b.URL, domain, user)
}

// PAT signs user in to domain and mints their agent named agent a
// personal access token with scopes; it returns the token and the session.
func (b *Broker) PAT(t testing.TB, domain, user, agent string, scopes ...string) (string, *alpdtest.Session) {
	t.Helper()
	s := b.SignIn(t, domain, user)
	return s.PAT(t, agent, scopes...), s
}

// CompanyAgent gives person a company-class agent named name, registered
// by admin (an alp.admin of the same domain), and returns its access token.
func (b *Broker) CompanyAgent(t testing.TB, admin, person *alpdtest.Session, name string, scopes ...string) string {
	t.Helper()
	return alpdtest.CompanyAgent(t, admin, person, name, scopes...)
}

// JetStream connects to the broker's embedded NATS (a new connection, so it
// works across restarts; closed at the end of the test).
func (b *Broker) JetStream(t testing.TB) jetstream.JetStream {
	t.Helper()
	nc, err := nats.Connect("nats://"+b.NATSAddr, nats.Timeout(5*time.Second))
	if err != nil {
		t.Fatalf("connect to %s's NATS: %v", b.Name, err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return js
}

// StreamMessages returns every message stored now in the broker's stream
// name (without its namespace: "INBOUND", "OUTBOX", "DELIVER", …), oldest
// first, deleted ones skipped.
func (b *Broker) StreamMessages(t testing.TB, name string) []*jetstream.RawStreamMsg {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := b.JetStream(t).Stream(ctx, bus.StreamName(b.NS, name))
	if err != nil {
		t.Fatalf("%s: stream %s: %v", b.Name, bus.StreamName(b.NS, name), err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var out []*jetstream.RawStreamMsg
	for seq := info.State.FirstSeq; seq > 0 && seq <= info.State.LastSeq; seq++ {
		m, err := s.GetMsg(ctx, seq)
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			continue
		}
		if err != nil {
			t.Fatalf("%s: %s message %d: %v", b.Name, name, seq, err)
		}
		out = append(out, m)
	}
	return out
}

// KeyStore opens the broker's sealed key file with its KEK, found as alpd
// finds them (config.Load of its config file, daemon.ReadKEK). The file
// may be shared with the running broker (changes are locked).
func (b *Broker) KeyStore(t testing.TB) *keystore.FileStore {
	t.Helper()
	cfg, _, err := config.Load([]string{"--config", b.ConfigFile}, nil)
	if err != nil {
		t.Fatalf("%s's config: %v", b.Name, err)
	}
	kek, err := daemon.ReadKEK(cfg, func(string) string { return "" })
	if err != nil {
		t.Fatalf("%s's KEK: %v", b.Name, err)
	}
	ks, err := keystore.OpenFile(cfg.KeystorePath(), kek)
	if err != nil {
		t.Fatalf("%s's key file: %v", b.Name, err)
	}
	return ks
}

// Refused starts an alpd for spec (a broker with the next address and a
// certificate, like New's, but not one of h.Brokers) that must refuse to
// start: it fails the test unless alpd exits non-zero within RefuseTimeout,
// and returns what alpd wrote.
func (h *Harness) Refused(t testing.TB, spec BrokerSpec) string {
	t.Helper()
	b := h.newBroker(t, spec)
	for _, n := range append([]string{spec.Name}, spec.Domains...) {
		delete(h.resolve, n) // not a broker the others should reach
	}
	b.writeConfig(t)
	b.launch(t)
	p := b.proc()
	code, ok := p.ExitCode(RefuseTimeout)
	if !ok {
		t.Fatalf("%s still running %s after start; it should have refused", spec.Name, RefuseTimeout)
	}
	if code == 0 {
		t.Fatalf("%s exited 0; it should have refused to start", spec.Name)
	}
	return p.Output.String()
}

// Sections returns a BrokerSpec.Config func that merges sections into the
// alpd.yaml map: a section that is a map in both is merged key by key (so
// {"federation": {"retry_max": "2s"}} keeps the harness's resolve map),
// anything else replaces what was there.
func Sections(sections map[string]any) func(conf map[string]any) {
	return func(conf map[string]any) {
		for name, v := range sections {
			add, ok := v.(map[string]any)
			have, ok2 := conf[name].(map[string]any)
			if !ok || !ok2 {
				conf[name] = v
				continue
			}
			for k, x := range add {
				have[k] = x
			}
		}
	}
}
