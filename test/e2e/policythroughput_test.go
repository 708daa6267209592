package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	alpv1 "github.com/alpd-project/alpd/gen/alp/v1"
	"github.com/alpd-project/alpd/internal/bus"
	"github.com/alpd-project/alpd/internal/envelope"
	"github.com/alpd-project/alpd/internal/mtls"
	"github.com/alpd-project/alpd/internal/natsauth"
	"github.com/alpd-project/alpd/internal/streams"
	"github.com/alpd-project/alpd/internal/testkit"
)

// The policy throughput load test's settings. ALPD_LOAD_N overrides the
// batch size.
const (
	// loadPeer is the recipient, of ana's tenant.
	loadPeer = "lee"
	// loadBatch is the number of sends per measured batch.
	loadBatch = 2000
	// loadClients agents' connections send at once.
	loadClients = 32
	// loadSendTimeout bounds enqueuing one batch, loadDrainTimeout
	// deciding it.
	loadSendTimeout  = 3 * time.Minute
	loadDrainTimeout = 5 * time.Minute
)

// TestPolicyThroughput measures how fast policy decides a backlog in split
// mode with one and with two `alpd policy` processes on the same durable
// consumer: the ratio says whether adding a worker process scales (aim ≥
// 1.6×). It is a load test, run by `make bench` with ALPD_LOAD=1, and
// asserts no time: it logs decisions per second, the ratio and the CPU of
// each process, and fails only when a message is not decided on its
// merits or one of two processes decided nothing.
//
// Ana and Lee, two people of the tenant, connect the way people do in
// split mode, where the person routes of policy's REST API are not served
// (web sessions are checked only where identity runs): each of their
// agents sends the other a connection.request/v1 over NLIP, and the second
// request, from the person asked, is their yes. Then, with policy stopped,
// Ana's agent sends a batch of meeting.request/v1 (12 fields, three of
// them free text, which Lee's default rules withhold) over NLIP with a
// personal access token from loadClients connections; ingress answers
// pending after nlip.decision_wait (10ms). Then the policy process(es)
// start; the rate is what the consumer had left when every process was
// ready, divided by the time from then until nothing is pending or
// unacknowledged. The ledger is stopped for the measurement: it records
// every send, decision and deliverable (three entries a message) and would
// take its share of the same cores, where in production it runs on its own.
func TestPolicyThroughput(t *testing.T) {
	if os.Getenv("ALPD_LOAD") != "1" {
		t.Skip("load test: set ALPD_LOAD=1 to run it (make bench does)")
	}
	n := loadBatch
	if v := os.Getenv("ALPD_LOAD_N"); v != "" {
		var err error
		if n, err = strconv.Atoi(v); err != nil || n < 100 {
			t.Fatalf("ALPD_LOAD_N=%q: want a number ≥ 100", v)
		}
	}
	b := binaries(t)
	c := startSplit(t, b, loadConfig)
	lt := newLoadTest(t, c, n)
	lt.connect(t)

	// The policy process of startSplit stops; the measured ones take over
	// the same durable consumer. The ledger stops for good. The batches run 1, 2, 2, 1 processes, so
	// that a drift of the machine's load over the run (other jobs on the
	// same cores) weighs on both the same.
	lt.stop(t, c.byName["policy"].proc)
	lt.stop(t, c.byName["ledger"].proc)
	rates, cpu := map[int][]float64{}, map[int][]float64{}
	for _, procs := range []int{1, 2, 2, 1} {
		r := lt.batch(t, procs)
		if t.Failed() {
			t.FailNow()
		}
		rates[procs] = append(rates[procs], r.rate())
		cpu[procs] = append(cpu[procs], r.cpuPerDecision)
		t.Logf("%d policy process(es): %d decisions in %s after all were ready = %.0f decisions/s; CPU (%% of one core): %s",
			r.procs, r.measured, r.elapsed.Round(time.Millisecond), r.rate(), r.cpu)
		t.Logf("  decided per process %v, mean handle time %v; outcomes %v", r.processed, r.handle, r.outcomes)
	}
	mean := func(xs []float64) float64 {
		var sum float64
		for _, x := range xs {
			sum += x
		}
		return sum / float64(len(xs))
	}
	t.Logf("throughput: 1 process %.0f decisions/s, 2 processes %.0f decisions/s (means of two batches each); ratio %.2f× (aim ≥ 1.6×)",
		mean(rates[1]), mean(rates[2]), mean(rates[2])/mean(rates[1]))
	t.Logf("the cluster's CPU per decision: 1 process %.2f ms, 2 processes %.2f ms", mean(cpu[1]), mean(cpu[2]))
}

// loadConfig is the operator's configuration for the load test: Lee can
// sign in too, ingress answers pending quickly and does not rate-limit one
// agent's backlog, and each policy process runs one decision loop, so the
// test compares processes.
func loadConfig(service string, conf map[string]any) {
	switch service {
	case "identity":
		conf["identity"] = map[string]any{"test_idp": map[string]any{
			"enabled": true,
			"users": []map[string]any{
				{"username": splitUser, "password": splitUser + "-pw"},
				{"username": loadPeer, "password": loadPeer + "-pw"},
			},
		}}
	case "ingress":
		conf["nlip"] = map[string]any{
			"decision_wait":    "10ms",
			"agent_per_minute": 6_000_000, "agent_burst": 1_000_000,
			"person_per_minute": 6_000_000, "person_burst": 1_000_000,
			"tenant_per_minute": 60_000_000, "tenant_burst": 1_000_000,
		}
	case "policy":
		conf["policy"] = map[string]any{"workers": 1}
	}
}

// loadTest is the split cluster with what the load test reads it with.
type loadTest struct {
	c       *splitCluster
	n       int
	ingress string // ingress's HTTP address
	client  *http.Client
	anaPAT  string
	leePAT  string
	anaID   string // Ana's person id: her Decided subjects name it
	ana     string // addresses
	lee     string
	// The policy role's view of the bus: its durable consumer, and the
	// decided stream.
	policy  jetstream.Consumer
	decided jetstream.Stream
	extra   int // policy processes started so far (for their addresses)
}

func newLoadTest(t *testing.T, c *splitCluster, n int) *loadTest {
	t.Helper()
	lt := &loadTest{c: c, n: n, ingress: c.byName["ingress"].httpAddr,
		ana: splitUser + "@" + splitTenant, lee: loadPeer + "@" + splitTenant,
		client: &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: loadClients}},
	}
	identity := c.byName["identity"].httpAddr
	lt.anaPAT, lt.anaID = signInAgent(t, identity, splitUser, "alp.send", "alp.read")
	lt.leePAT, _ = signInAgent(t, identity, loadPeer, "alp.send", "alp.read")
	for _, pat := range []string{lt.anaPAT, lt.leePAT} {
		waitPATAtIngress(t, lt.ingress, pat)
	}

	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	pjs := lt.roleJetStream(t, alpv1.Role_ROLE_POLICY)
	owned := streams.OwnedConsumers(alpv1.Role_ROLE_POLICY, 0)
	if len(owned) != 1 {
		t.Fatalf("policy owns %d durable consumers; the test measures one shared work consumer", len(owned))
	}
	var err error
	if lt.policy, err = pjs.Consumer(ctx, bus.StreamName(splitBroker, owned[0].Stream), bus.StreamName(splitBroker, owned[0].Durable)); err != nil {
		t.Fatalf("policy's durable consumer: %v", err)
	}
	if lt.decided, err = pjs.Stream(ctx, bus.StreamName(splitBroker, streams.Decided)); err != nil {
		t.Fatalf("the decided stream: %v", err)
	}
	return lt
}

// roleJetStream connects to the cluster's NATS as role's user (its nkey
// from `alpctl nats-config`): what that role may see, nothing more.
func (lt *loadTest) roleJetStream(t *testing.T, role alpv1.Role) jetstream.JetStream {
	t.Helper()
	name := envelope.ServiceName(role)
	opts, err := natsauth.ClientOptions(filepath.Join(lt.c.natsDir, name+".nk"), filepath.Join(lt.c.certs, mtls.CACertFile), "", "", splitBroker, name)
	if err != nil {
		t.Fatal(err)
	}
	nc, err := nats.Connect(lt.c.natsURL, append(opts, nats.Timeout(5*time.Second))...)
	if err != nil {
		t.Fatalf("connect to NATS as %s: %v", name, err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return js
}

// waitPATAtIngress waits until ingress's identity projection knows pat
// (an unknown envelope is then 404, not 401).
func waitPATAtIngress(t *testing.T, ingress, pat string) {
	t.Helper()
	testkit.Eventually(t, 15*time.Second, func() error {
		if status, _ := pollEnvelope(t, ingress, "00000000-0000-4000-8000-000000000000", pat); status == http.StatusUnauthorized {
			return errors.New("ingress does not know the PAT yet")
		}
		return nil
	}, "ingress knows the PAT")
}

// connect makes Ana and Lee connected with the running policy process:
// Ana's agent asks Lee to connect, Lee's agent asks back (the person
// asked asking back is their yes), and a meeting request from Ana to Lee
// is then decided on its merits.
func (lt *loadTest) connect(t *testing.T) {
	t.Helper()
	request := []byte(`{"purpose":"meeting","message":"Let us plan the quarter together."}`)
	// Policy's people projection may not know a person who just signed
	// in: such a message is refused (unknown sender or recipient), and the
	// agent sends again.
	decide := func(what, pat, to, typ string, body []byte, want ...string) {
		t.Helper()
		var last pathResult
		testkit.Eventually(t, 15*time.Second, func() error {
			last = lt.sendAndAwait(t, pat, to, typ, body)
			for _, w := range want {
				if last.Outcome == w {
					return nil
				}
			}
			return fmt.Errorf("outcome %q %+v; want one of %q", last.Outcome, last.Reasons, want)
		}, what)
	}
	decide("ana asks lee to connect", lt.anaPAT, lt.lee, "connection.request/v1", request, "hold")
	decide("lee asks ana back", lt.leePAT, lt.ana, "connection.request/v1", request, "hold")
	decide("a meeting request between the two, connected", lt.anaPAT, lt.lee, "meeting.request/v1", meetingBody(0), "deliver", "deliver_partial")
}

// sendAndAwait sends one message and polls its envelope until policy has
// decided it.
func (lt *loadTest) sendAndAwait(t *testing.T, pat, to, typ string, body []byte) pathResult {
	t.Helper()
	status, res, err := lt.send(t.Context(), pat, to, typ, body)
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(15 * time.Second)
	for status == http.StatusAccepted {
		if time.Now().After(deadline) {
			t.Fatalf("envelope %s still pending after 15s", res.EnvelopeID)
		}
		time.Sleep(20 * time.Millisecond)
		if status, res, err = lt.poll(t.Context(), pat, res.EnvelopeID); err != nil {
			t.Fatal(err)
		}
	}
	return res
}

// meetingBody is a meeting.request/v1 with 12 fields: subject, start,
// duration, three attendees, the location's kind and place, three agenda
// items and the envelope it answers.
func meetingBody(i int) []byte {
	return fmt.Appendf(nil, `{"subject":"Quarterly planning %d","start":"2026-03-%02dT09:30:00+01:00","duration":"PT45M",`+
		`"attendees":["ana@example.org","lee@example.org","acct:bo@example.org"],`+
		`"location":{"kind":"in_person","place":"Room %d, 4th floor"},`+
		`"agenda":["Budget review","Hiring plan","Roadmap for the next quarter"],`+
		`"in_reply_to":"0192f0c4-7b1e-7a00-8000-%012d"}`, i, 1+i%28, 100+i%400, i)
}

// send posts one ALP message to ingress's NLIP door with an agent's PAT
// and returns the status (200 decided, 202 pending) and the alp.result.
func (lt *loadTest) send(ctx context.Context, pat, to, typ string, body []byte) (int, pathResult, error) {
	msg, err := json.Marshal(map[string]any{
		"messagetype": "alp:" + typ, "format": "text", "subformat": "english", "content": "load test",
		"submessages": []map[string]any{
			{"label": "alp.to", "format": "structured", "subformat": "uri", "content": "acct:" + to},
			{"label": "alp.body", "format": "structured", "subformat": "json", "content": json.RawMessage(body)},
		},
	})
	if err != nil {
		return 0, pathResult{}, err
	}
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+lt.ingress+"/nlip/", bytes.NewReader(msg))
	req.Header.Set("Content-Type", "application/json")
	return lt.do(req, pat)
}

// poll is GET /nlip/envelopes/{id}.
func (lt *loadTest) poll(ctx context.Context, pat, id string) (int, pathResult, error) {
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+lt.ingress+"/nlip/envelopes/"+id, nil)
	return lt.do(req, pat)
}

func (lt *loadTest) do(req *http.Request, pat string) (int, pathResult, error) {
	req.Header.Set("Authorization", "Bearer "+pat)
	resp, err := lt.client.Do(req)
	if err != nil {
		return 0, pathResult{}, fmt.Errorf("%s %s: %w", req.Method, req.URL.Path, err)
	}
	raw, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		return 0, pathResult{}, fmt.Errorf("%s %s: %w", req.Method, req.URL.Path, err)
	}
	if resp.StatusCode != http.StatusOK && resp.StatusCode != http.StatusAccepted {
		return resp.StatusCode, pathResult{}, fmt.Errorf("%s %s: %d %s", req.Method, req.URL.Path, resp.StatusCode, raw)
	}
	c, ok := submessage(raw, "alp.result")
	var res pathResult
	if !ok || json.Unmarshal(c, &res) != nil || res.EnvelopeID == "" {
		return resp.StatusCode, pathResult{}, fmt.Errorf("%s %s: %d without an alp.result naming the envelope: %s", req.Method, req.URL.Path, resp.StatusCode, raw)
	}
	return resp.StatusCode, res, nil
}

// loadRun is one measured batch.
type loadRun struct {
	procs    int
	measured uint64        // decisions left when every process was ready
	elapsed  time.Duration // from then until none was pending
	// CPU over elapsed, in percent of one core, by process; what the
	// whole cluster spent per decision.
	cpu            string
	cpuPerDecision float64  // milliseconds
	processed      []uint64 // events each policy process handled
	handle         []time.Duration
	outcomes       map[string]int
}

func (r loadRun) rate() float64 { return float64(r.measured) / r.elapsed.Seconds() }

// batch enqueues lt.n meeting requests with policy stopped, starts procs
// policy processes and measures until
// the consumer has nothing pending or unacknowledged; then it stops them
// and checks that every envelope of the batch was decided on its merits.
func (lt *loadTest) batch(t *testing.T, procs int) loadRun {
	t.Helper()
	ids := lt.enqueue(t)
	lt.waitQueued(t)
	ctx, cancel := context.WithTimeout(t.Context(), loadDrainTimeout)
	defer cancel()

	ps := make([]*proc, procs)
	addrs := make([]string, procs)
	for i := range ps {
		ps[i], addrs[i] = lt.startPolicy(t)
	}
	// Every process ready: from here on all of them pull.
	for {
		ready := 0
		for i, p := range ps {
			if p.exited() {
				t.Fatalf("%s exited with code %d", p.name, p.cmd.ProcessState.ExitCode())
			}
			if status, _, err := get("http://" + addrs[i] + "/readyz"); err == nil && status == http.StatusOK {
				ready++
			}
		}
		if ready == procs {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("policy processes not ready: %v", ctx.Err())
		}
		time.Sleep(10 * time.Millisecond)
	}
	start := time.Now()
	info, err := lt.policy.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	left := info.NumPending + uint64(info.NumAckPending)
	meter := lt.meter(ps)
	cpu0 := meter.sample(t)
	for {
		info, err := lt.policy.Info(ctx)
		if err != nil {
			t.Fatalf("policy's consumer: %v", err)
		}
		if info.NumPending == 0 && info.NumAckPending == 0 {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	r := loadRun{procs: procs, measured: left, elapsed: time.Since(start), outcomes: map[string]int{}}
	r.cpu, r.cpuPerDecision = meter.report(cpu0, meter.sample(t), r.elapsed, left)
	for _, a := range addrs {
		processed, handle := consumerMetrics(t, a, bus.StreamName(splitBroker, streams.OwnedConsumers(alpv1.Role_ROLE_POLICY, 0)[0].Durable))
		r.processed, r.handle = append(r.processed, processed), append(r.handle, handle)
	}
	for _, p := range ps {
		lt.stop(t, p)
	}
	for i, n := range r.processed {
		if n == 0 {
			t.Errorf("policy process #%d of %d decided nothing: they do not share the queue", i+1, procs)
		}
	}
	lt.checkDecided(ctx, t, ids, r.outcomes)
	return r
}

// waitQueued waits until the whole batch waits for policy.
func (lt *loadTest) waitQueued(t *testing.T) {
	t.Helper()
	testkit.Eventually(t, loadDrainTimeout, func() error {
		ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
		defer cancel()
		info, err := lt.policy.Info(ctx)
		if err != nil {
			return err
		}
		if queued := info.NumPending + uint64(info.NumAckPending); queued < uint64(lt.n) {
			return fmt.Errorf("policy's consumer has %d of %d", queued, lt.n)
		}
		return nil
	}, "the batch queued for policy")
}

// enqueue sends lt.n meeting requests from Ana's agent to Lee over
// loadClients connections; with policy stopped each answers pending. It
// returns the envelope ids.
func (lt *loadTest) enqueue(t *testing.T) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), loadSendTimeout)
	defer cancel()
	start := time.Now()
	ids := make([]string, lt.n)
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, loadClients)
	for range loadClients {
		wg.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= lt.n || ctx.Err() != nil {
					return
				}
				status, res, err := lt.send(ctx, lt.anaPAT, lt.lee, "meeting.request/v1", meetingBody(i))
				if err == nil && (status != http.StatusAccepted || res.Outcome != "pending") {
					err = fmt.Errorf("send %d with policy stopped: %d %q; want 202 pending", i, status, res.Outcome)
				}
				if err != nil {
					errs <- err
					cancel()
					return
				}
				ids[i] = res.EnvelopeID
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	t.Logf("enqueued %d meeting requests in %s (%.0f sends/s over %d connections)",
		lt.n, time.Since(start).Round(time.Millisecond), float64(lt.n)/time.Since(start).Seconds(), loadClients)
	return ids
}

// startPolicy starts one more `alpd policy` process with policy's
// configuration and its own listeners, and returns it with its HTTP
// address.
func (lt *loadTest) startPolicy(t *testing.T) (*proc, string) {
	t.Helper()
	lt.extra++
	addrs := freeAddrs(t, 2)
	pol := *lt.c.byName["policy"]
	pol.httpAddr, pol.grpcAddr = addrs[0], addrs[1]
	file := filepath.Join(lt.c.dir, fmt.Sprintf("policy-%d.yaml", lt.extra))
	writeYAML(t, file, lt.c.config(&pol, pol.name, lt.c.dataDir))
	return startProc(t, fmt.Sprintf("alpd policy #%d", lt.extra), lt.c.bins.alpd, lt.c.env, pol.name, "--config", file), pol.httpAddr
}

// stop stops an alpd process: SIGTERM, its consumers drain, exit code 0.
func (lt *loadTest) stop(t *testing.T, p *proc) {
	t.Helper()
	p.stop(t)
	if t.Failed() {
		t.FailNow()
	}
}

// checkDecided requires a Decided on the decided stream for every envelope
// of the batch, decided on its merits (Lee's default rules withhold the
// free text: deliver_partial), and counts the outcomes.
func (lt *loadTest) checkDecided(ctx context.Context, t *testing.T, ids []string, outcomes map[string]int) {
	t.Helper()
	for _, id := range ids {
		subj, err := streams.DecidedSubject(splitTenant, lt.anaID, id)
		if err != nil {
			t.Fatal(err)
		}
		m, err := lt.decided.GetLastMsgForSubject(ctx, subj)
		if err != nil {
			t.Fatalf("Decided of envelope %s: %v", id, err)
		}
		ev, err := bus.Decode(m.Data)
		if err != nil {
			t.Fatal(err)
		}
		d := ev.GetDecided()
		outcomes[d.GetOutcome().String()]++
		if d.GetOutcome() == alpv1.Outcome_OUTCOME_REFUSE {
			t.Errorf("envelope %s refused: %v; want it decided on its merits", id, d.GetReasons())
			return
		}
	}
}

// cpuMeter reads the CPU time of the cluster's processes, of this test
// and of the whole machine.
type cpuMeter struct {
	policy int   // the first policy processes of pids
	pids   []int // policy processes, nats-server, the other alpd, this test
}

// cpuSample is what a cpuMeter read at one moment.
type cpuSample struct {
	procs   []time.Duration
	machine time.Duration // every core's busy time
}

// meter measures the policy processes ps and everything else of the
// cluster still running.
func (lt *loadTest) meter(ps []*proc) cpuMeter {
	m := cpuMeter{policy: len(ps)}
	for _, p := range append(ps, lt.c.ns) {
		m.pids = append(m.pids, p.cmd.Process.Pid)
	}
	for _, s := range lt.c.svcs {
		if !s.proc.exited() {
			m.pids = append(m.pids, s.proc.cmd.Process.Pid)
		}
	}
	m.pids = append(m.pids, os.Getpid())
	return m
}

func (m cpuMeter) sample(t *testing.T) cpuSample {
	t.Helper()
	var s cpuSample
	for _, pid := range m.pids {
		d, err := cpuTime(pid)
		if err != nil {
			t.Logf("CPU of process %d: %v", pid, err)
		}
		s.procs = append(s.procs, d)
	}
	var err error
	if s.machine, err = machineBusy(); err != nil {
		t.Logf("CPU of the machine: %v", err)
	}
	return s
}

// report says how much of a core each process used between a and b, wall
// apart, what the cluster spent per decision, and how busy the machine
// was.
func (m cpuMeter) report(a, b cpuSample, wall time.Duration, decisions uint64) (string, float64) {
	pct := func(d time.Duration) float64 { return 100 * d.Seconds() / wall.Seconds() }
	var parts []string
	var ours, rest time.Duration
	for i := range m.pids {
		d := b.procs[i] - a.procs[i]
		ours += d
		switch {
		case i < m.policy:
			parts = append(parts, fmt.Sprintf("policy#%d %.0f%%", i+1, pct(d)))
		case i == m.policy:
			parts = append(parts, fmt.Sprintf("nats-server %.0f%%", pct(d)))
		case i == len(m.pids)-1:
			parts = append(parts, fmt.Sprintf("the other %d alpd %.0f%%", len(m.pids)-m.policy-2, pct(rest)), fmt.Sprintf("this test %.0f%%", pct(d)))
		default:
			rest += d
		}
	}
	machine := b.machine - a.machine
	// What the cluster spends per decision does not depend on how busy
	// other programs keep the machine: it shows whether a second process
	// costs anything beyond its share of the work.
	perDecision := float64(ours.Microseconds()) / 1000 / float64(decisions)
	return strings.Join(parts, ", ") + fmt.Sprintf("; %.2f ms of CPU per decision; the machine busy %.0f%% of %d cores, %.0f%% of it other programs",
		perDecision, pct(machine), runtime.NumCPU(), pct(machine-min(ours, machine))), perDecision
}

// machineBusy is the time every core of the machine spent running
// something (not idle, waiting for I/O or stolen by the hypervisor) so
// far, from /proc/stat (Linux).
func machineBusy() (time.Duration, error) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, err
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)
	if len(f) < 9 || f[0] != "cpu" {
		return 0, fmt.Errorf("/proc/stat: unexpected first line %q", line)
	}
	// cpu user nice system idle iowait irq softirq steal …, in clock ticks.
	var ticks int64
	for i, s := range f[1:9] {
		v, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("/proc/stat: %w", err)
		}
		if i != 3 && i != 4 && i != 7 {
			ticks += v
		}
	}
	return time.Duration(ticks) * 10 * time.Millisecond, nil
}

// consumerMetrics reads from a process's /metrics how many events the
// consumer handled and their mean handling time.
func consumerMetrics(t *testing.T, addr, consumer string) (uint64, time.Duration) {
	t.Helper()
	status, body, err := get("http://" + addr + "/metrics")
	if err != nil || status != http.StatusOK {
		t.Fatalf("GET /metrics: %d %v", status, err)
	}
	label := `consumer="` + consumer + `"`
	value := func(name string) float64 {
		sc := bufio.NewScanner(bytes.NewReader(body))
		for sc.Scan() {
			line := sc.Text()
			if strings.HasPrefix(line, name+"{") && strings.Contains(line, label) {
				v, _ := strconv.ParseFloat(line[strings.LastIndexByte(line, ' ')+1:], 64)
				return v
			}
		}
		return 0
	}
	processed := value("alpd_bus_events_processed_total")
	var mean time.Duration
	if count := value("alpd_bus_handle_seconds_count"); count > 0 {
		mean = time.Duration(value("alpd_bus_handle_seconds_sum") / count * float64(time.Second)).Round(time.Microsecond)
	}
	return uint64(processed), mean
}
