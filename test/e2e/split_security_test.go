package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/alpd-project/alpd/broker"
	identityv1 "github.com/alpd-project/alpd/gen/alp/identity/v1"
	alpv1 "github.com/alpd-project/alpd/gen/alp/v1"
	"github.com/alpd-project/alpd/internal/mtls"
	"github.com/alpd-project/alpd/internal/natsauth"
)

// checkSplitSecurity checks what a production-configured split-mode broker
// must refuse, each next to the matching allowed case.
func checkSplitSecurity(ctx context.Context, t *testing.T, c *splitCluster) {
	t.Run("grpc authorization", func(t *testing.T) { checkErasePersonAuthz(ctx, t, c) })
	t.Run("foreign CA", func(t *testing.T) { checkForeignCA(ctx, t, c) })
	t.Run("operator endpoints", func(t *testing.T) { checkOpsAuth(t, c) })
	t.Run("start refused", func(t *testing.T) {
		// Both fail at start-up, after connecting to NATS, so they run
		// side by side.
		t.Run("other role's certificate", func(t *testing.T) {
			t.Parallel()
			checkStartRefused(t, c, "ledger", "is a ledger certificate", "runs policy")
		})
		t.Run("no mTLS", func(t *testing.T) {
			t.Parallel()
			checkStartRefused(t, c, "", "grpc.tls", "grpc.insecure")
		})
	})
	t.Run("nats permissions", func(t *testing.T) { checkNATSPermissions(t, c) })
}

// checkErasePersonAuthz: identity's ErasePerson is the operator's alone.
// The ingress role's certificate reaches identity (its Ping works) but may
// not erase; the operator's may.
func checkErasePersonAuthz(ctx context.Context, t *testing.T, c *splitCluster) {
	identity := c.byName["identity"]
	req := &identityv1.ErasePersonRequest{Tenant: splitTenant, PersonId: "p1"}

	asIngress := c.dial(t, alpv1.Role_ROLE_INGRESS, identity)
	if _, err := broker.Ping(ctx, asIngress, identity.role, &alpv1.Envelope{}); err != nil {
		t.Fatalf("Ping identity with the ingress role's certificate: %v; want it allowed", err)
	}
	_, err := identityv1.NewIdentityServiceClient(asIngress).ErasePerson(ctx, req)
	if status.Code(err) != codes.PermissionDenied {
		t.Errorf("ErasePerson with the ingress role's certificate: %v; want PermissionDenied", err)
	} else {
		t.Logf("ErasePerson as ingress: %v", err)
	}

	if _, err := identityv1.NewIdentityServiceClient(identity.conn).ErasePerson(ctx, req); err != nil {
		t.Errorf("ErasePerson with the operator's certificate: %v; want OK", err)
	}
}

// checkForeignCA: a certificate issued by another CA gets nowhere, whether
// it is presented to policy (the server refuses the client) or used to
// verify policy (the client refuses the server), even though it carries a
// valid role URI and names the right hosts.
func checkForeignCA(ctx context.Context, t *testing.T, c *splitCluster) {
	policy := c.byName["policy"]
	other, err := mtls.NewCA("e2e foreign CA", 24*time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	certPEM, keyPEM, err := other.Issue(alpv1.Role_ROLE_INGRESS, []string{"127.0.0.1", "localhost"}, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	foreign := mtls.Files{
		CA:   filepath.Join(dir, "ca.pem"),
		Cert: filepath.Join(dir, "ingress.pem"),
		Key:  filepath.Join(dir, "ingress-key.pem"),
	}
	if err := mtls.WriteCertAndKey(foreign.Cert, foreign.Key, certPEM, keyPEM); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(foreign.CA, other.CertPEM(), 0o600); err != nil {
		t.Fatal(err)
	}

	for _, tc := range []struct {
		name  string
		files mtls.Files
	}{
		// The broker's CA verifies policy; policy must refuse the client.
		{"client certificate from another CA", mtls.Files{CA: filepath.Join(c.certs, mtls.CACertFile), Cert: foreign.Cert, Key: foreign.Key}},
		// Everything from the other CA: the client refuses policy.
		{"server verified against another CA", foreign},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			defer cancel()
			_, err := broker.Ping(cctx, dialFiles(t, tc.files, policy), policy.role, &alpv1.Envelope{})
			if err == nil {
				t.Fatalf("Ping policy answered; want the connection refused")
			}
			if status.Code(err) != codes.Unavailable {
				t.Errorf("Ping policy: %v; want code Unavailable (no connection)", err)
			}
			t.Logf("Ping policy: %v", err)
		})
	}
}

// retryAfter matches alpctl's "retry after Ns" line.
var retryAfter = regexp.MustCompile(`retry after (\d+)s`)

// checkOpsAuth: `alpctl trace` needs an operator token (401, exit 3), and
// an operator gets tightTraceBurst traces back to back on the rate-limited
// process, then 429 with Retry-After (exit 3). Refused tokens do not use
// up the operator's burst.
func checkOpsAuth(t *testing.T, c *splitCluster) {
	target := c.byName[rateLimitedService]
	for _, tc := range []struct {
		name string
		args []string
	}{
		{"no token", nil},
		{"unknown token", []string{"--operator-token", broker.OperatorTokenPrefix + "not-a-configured-token"}},
	} {
		res, _ := alpctlTrace(t, c.bins, target.httpAddr, tc.args...)
		if res.code != 3 {
			t.Errorf("alpctl trace, %s: exit code %d, want 3 (refused)", tc.name, res.code)
		}
		if !strings.Contains(res.stderr, "401") || !strings.Contains(strings.ToLower(res.stderr), "unauthorized") {
			t.Errorf("alpctl trace, %s: stderr does not say 401 unauthorized:\n%s", tc.name, res.stderr)
		}
	}

	// The token through the environment, as the token's own hint says.
	res := runTool(t, c.bins.alpctl, hermeticEnv("ALPCTL_OPERATOR_TOKEN="+c.token),
		"--broker", "http://"+target.httpAddr, "trace")
	refusedAt := 0
	calls := 1
	for ; ; calls++ {
		if calls > 1 {
			res, _ = alpctlTrace(t, c.bins, target.httpAddr, "--operator-token", c.token)
		}
		if res.code == 3 {
			refusedAt = calls
			break
		}
		if res.code != 0 {
			t.Fatalf("alpctl trace call %d: exit code %d; want 0 until the rate limit, then 3", calls, res.code)
		}
		if calls > tightTraceBurst+2 {
			t.Fatalf("alpctl trace: %d calls in a row succeeded; want the rate limit (burst %d, %d/min) to refuse call %d",
				calls, tightTraceBurst, tightTracePerMin, tightTraceBurst+1)
		}
	}
	t.Logf("alpctl trace refused call %d: %s", refusedAt, strings.TrimSpace(res.stderr))
	if refusedAt != tightTraceBurst+1 {
		t.Errorf("alpctl trace refused call %d; want call %d (burst %d)", refusedAt, tightTraceBurst+1, tightTraceBurst)
	}
	stderr := strings.ToLower(res.stderr)
	if !strings.Contains(stderr, "429") || !strings.Contains(stderr, "rate") {
		t.Errorf("rate-limited alpctl trace: stderr does not say 429 / rate:\n%s", res.stderr)
	}
	m := retryAfter.FindStringSubmatch(stderr)
	if m == nil {
		t.Fatalf("rate-limited alpctl trace: stderr has no \"retry after Ns\":\n%s", res.stderr)
	}
	// One trace per minute: the next is due within a minute.
	if secs, _ := strconv.Atoi(m[1]); secs < 1 || secs > 60 {
		t.Errorf("retry after %ds; want 1 to 60 seconds at %d trace per minute", secs, tightTracePerMin)
	}
}

// checkStartRefused starts a second `alpd policy` (fresh data dir and
// ports, same NATS user) with the mTLS files of certRole ("" for none and
// no grpc.insecure) and requires it to exit 1 quickly, its "could not
// start" error containing every string in want.
func checkStartRefused(t *testing.T, c *splitCluster, certRole string, want ...string) {
	addrs := freeAddrs(t, 2)
	s := *c.byName["policy"]
	s.httpAddr, s.grpcAddr = addrs[0], addrs[1]
	dir := t.TempDir()
	configFile := filepath.Join(dir, "policy.yaml")
	writeYAML(t, configFile, c.config(&s, certRole, filepath.Join(dir, "data")))
	start := time.Now()
	p := startProc(t, "alpd policy (refused)", c.bins.alpd, c.env, "policy", "--config", configFile)
	code, ok := p.exitCode(15 * time.Second)
	if !ok {
		t.Fatalf("still running after 15s; want it to refuse to start")
	}
	t.Logf("refused in %s", time.Since(start).Round(time.Millisecond))
	if code != 1 {
		t.Errorf("exit code %d, want 1", code)
	}
	recs := p.output.Records("alpd could not start")
	if len(recs) != 1 {
		t.Fatalf("%d \"alpd could not start\" log records, want 1", len(recs))
	}
	msg, _ := recs[0]["err"].(string)
	t.Logf("start error: %s", msg)
	for _, w := range want {
		if !strings.Contains(msg, w) {
			t.Errorf("start error does not mention %q: %s", w, msg)
		}
	}
}

// checkNATSPermissions checks that nats-server enforces the generated
// configuration: TLS and authentication are required, and the policy
// role's user may not publish to another role's subjects.
func checkNATSPermissions(t *testing.T, c *splitCluster) {
	caFile := filepath.Join(c.certs, mtls.CACertFile)

	// The server's INFO, read in plain TCP before any TLS.
	conn, err := net.DialTimeout("tcp", c.natsAddr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
	line, err := bufio.NewReader(conn).ReadString('\n')
	_ = conn.Close()
	if err != nil {
		t.Fatalf("read nats-server's INFO: %v", err)
	}
	var info struct {
		TLSRequired  bool `json:"tls_required"`
		AuthRequired bool `json:"auth_required"`
	}
	if js, ok := strings.CutPrefix(line, "INFO "); !ok || json.Unmarshal([]byte(js), &info) != nil {
		t.Fatalf("nats-server greeted with %q, want INFO {…}", line)
	}
	if !info.TLSRequired || !info.AuthRequired {
		t.Errorf("nats-server INFO: tls_required %v, auth_required %v; want both", info.TLSRequired, info.AuthRequired)
	}

	// TLS but no user.
	if nc, err := nats.Connect(c.natsURL, nats.RootCAs(caFile), nats.Timeout(5*time.Second)); err == nil {
		nc.Close()
		t.Errorf("connected to NATS without an nkey; want an authorization violation")
	} else if !strings.Contains(strings.ToLower(err.Error()), "authorization violation") {
		t.Errorf("connect without an nkey: %v; want an authorization violation", err)
	}

	// The policy role's user, on a nats:// URL: the client takes up TLS as
	// the server requires.
	opts, err := natsauth.ClientOptions(filepath.Join(c.natsDir, "policy.nk"), caFile, "", "", splitBroker, "policy")
	if err != nil {
		t.Fatal(err)
	}
	asyncErrs := make(chan error, 16)
	opts = append(opts, nats.Name("e2e policy"), nats.Timeout(5*time.Second),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
			select {
			case asyncErrs <- err:
			default:
			}
		}))
	nc, err := nats.Connect("nats://"+c.natsAddr, opts...)
	if err != nil {
		t.Fatalf("connect as the policy role's user: %v", err)
	}
	defer nc.Close()
	if cs, err := nc.TLSConnectionState(); err != nil || !cs.HandshakeComplete {
		t.Errorf("the policy user's connection is not TLS: %v", err)
	}
	subject := fmt.Sprintf("alp.inbound.%s.x", strings.ReplaceAll(splitTenant, ".", "_"))
	if err := nc.Publish(subject, []byte("e2e")); err != nil {
		t.Fatalf("publish %s: %v", subject, err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatalf("flush: %v", err)
	}
	select {
	case err := <-asyncErrs:
		if msg := strings.ToLower(err.Error()); !strings.Contains(msg, "permissions violation") || !strings.Contains(msg, subject) {
			t.Errorf("publish to %s as policy: async error %v; want a permissions violation for that subject", subject, err)
		} else {
			t.Logf("publish to %s as policy: %v", subject, err)
		}
	case <-time.After(5 * time.Second):
		t.Errorf("publish to %s as policy: no permissions violation within 5s", subject)
	}
}
