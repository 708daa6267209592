package e2e

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/alpd-project/alpd/broker"
	approvalsv1 "github.com/alpd-project/alpd/gen/alp/approvals/v1"
	federationv1 "github.com/alpd-project/alpd/gen/alp/federation/v1"
	identityv1 "github.com/alpd-project/alpd/gen/alp/identity/v1"
	ingressv1 "github.com/alpd-project/alpd/gen/alp/ingress/v1"
	ledgerv1 "github.com/alpd-project/alpd/gen/alp/ledger/v1"
	policyv1 "github.com/alpd-project/alpd/gen/alp/policy/v1"
	alpv1 "github.com/alpd-project/alpd/gen/alp/v1"
	"github.com/alpd-project/alpd/internal/envelope"
)

// splitService is one `alpd <service>` process of the split-mode test.
type splitService struct {
	name     string
	role     alpv1.Role
	api      string // gRPC API name, as registered with the health service
	httpAddr string
	grpcAddr string
	proc     *proc
	conn     *grpc.ClientConn
}

// TestSplitMode runs each service in its own process against an external
// nats-server, sharing a data dir (keystore file) and a KEK, and talks to
// each one over its own gRPC listener: standard health, Ping, and one
// envelope chained through all six.
func TestSplitMode(t *testing.T) {
	alpd, natsServer := binaries(t)
	testStart := time.Now()

	// nats-server with JetStream on loopback.
	natsAddr := freeAddr(t)
	_, natsPort, _ := strings.Cut(natsAddr, ":")
	ns := startProc(t, "nats-server", natsServer, hermeticEnv(),
		"-js", "-a", "127.0.0.1", "-p", natsPort, "-sd", t.TempDir())
	waitTCP(t, ns, natsAddr, 15*time.Second)
	natsURL := "nats://" + natsAddr

	// One service per process; their addresses, picked all at once so they
	// differ.
	svcs := []*splitService{
		{name: "identity", role: alpv1.Role_ROLE_IDENTITY, api: identityv1.IdentityService_ServiceDesc.ServiceName},
		{name: "ingress", role: alpv1.Role_ROLE_INGRESS, api: ingressv1.IngressService_ServiceDesc.ServiceName},
		{name: "policy", role: alpv1.Role_ROLE_POLICY, api: policyv1.PolicyService_ServiceDesc.ServiceName},
		{name: "federation", role: alpv1.Role_ROLE_FEDERATION, api: federationv1.FederationService_ServiceDesc.ServiceName},
		{name: "ledger", role: alpv1.Role_ROLE_LEDGER, api: ledgerv1.LedgerService_ServiceDesc.ServiceName},
		{name: "approvals", role: alpv1.Role_ROLE_APPROVALS, api: approvalsv1.ApprovalsService_ServiceDesc.ServiceName},
	}
	addrs := freeAddrs(t, 2*len(svcs))
	byName := map[string]*splitService{}
	var peers strings.Builder
	peers.WriteString("grpc:\n  insecure: true\n  peers:\n")
	for i, s := range svcs {
		s.httpAddr, s.grpcAddr = addrs[2*i], addrs[2*i+1]
		byName[s.name] = s
		fmt.Fprintf(&peers, "    %s: %q\n", s.name, s.grpcAddr)
	}
	dir := t.TempDir()
	configFile := filepath.Join(dir, "alpd.yaml")
	if err := os.WriteFile(configFile, []byte(peers.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	dataDir := filepath.Join(dir, "data")
	kek := make([]byte, 32)
	_, _ = rand.Read(kek)
	env := hermeticEnv("ALPD_TENANTS=example.org", "ALPD_KEK="+base64.StdEncoding.EncodeToString(kek))

	start := func(s *splitService) {
		s.proc = startProc(t, "alpd "+s.name, alpd, env, s.name,
			"--config", configFile, "--data-dir", dataDir, "--nats-url", natsURL,
			"--http-addr", s.httpAddr, "--grpc-addr", s.grpcAddr)
	}

	// Identity first: it provisions the tenant keys in the shared keystore
	// file, which the others read when they start.
	start(svcs[0])
	took := waitReady(t, svcs[0].proc, svcs[0].httpAddr)
	t.Logf("identity ready in %s", took.Round(time.Millisecond))
	phase := time.Now()
	for _, s := range svcs[1:] {
		start(s)
	}
	for _, s := range svcs[1:] {
		waitReady(t, s.proc, s.httpAddr)
	}
	t.Logf("the other five ready in %s", time.Since(phase).Round(time.Millisecond))

	for _, s := range svcs {
		conn, err := grpc.NewClient(s.grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatalf("%s: grpc.NewClient(%s): %v", s.name, s.grpcAddr, err)
		}
		s.conn = conn
		t.Cleanup(func() { _ = conn.Close() })
	}

	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	for _, s := range svcs {
		t.Run("service="+s.name, func(t *testing.T) {
			checkSplitReadyz(t, s)
			for _, name := range []string{"", s.api} {
				checkServing(ctx, t, s, name)
			}
			res, err := broker.Ping(ctx, s.conn, s.role, &alpv1.Envelope{})
			if err != nil {
				t.Fatalf("Ping: %v", err)
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
		order := []string{"ingress", "policy", "federation", "ledger", "approvals", "identity"}
		env := &alpv1.Envelope{}
		for _, name := range order {
			s := byName[name]
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
		if strings.Join(got, ",") != strings.Join(order, ",") {
			t.Fatalf("trace services = %q, want %q", got, order)
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

	// SIGTERM every alpd at once; each must exit 0 within stopTimeout.
	phase = time.Now()
	var wg sync.WaitGroup
	for _, s := range svcs {
		wg.Go(func() { s.proc.stop(t) })
	}
	wg.Wait()
	t.Logf("six alpd stopped in %s", time.Since(phase).Round(time.Millisecond))
	for _, s := range svcs {
		if msgs := s.proc.logMessages(); !slices.Contains(msgs, "alpd stopped") {
			t.Errorf("alpd %s: log has no \"alpd stopped\"", s.name)
		}
	}
	ns.stop(t)
	t.Logf("split mode total %s", time.Since(testStart).Round(time.Millisecond))
}

// checkSplitReadyz checks that a split-mode process lists exactly its own
// service, ready and answering Ping through gRPC.
func checkSplitReadyz(t *testing.T, s *splitService) {
	t.Helper()
	status, r := readiness(t, s.httpAddr)
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
