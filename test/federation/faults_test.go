package federation_test

import (
	"bufio"
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/tls"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/alpd-project/alpd/internal/alpwire"
	"github.com/alpd-project/alpd/internal/bus"
	"github.com/alpd-project/alpd/internal/streams"
	"github.com/alpd-project/alpd/services/federation"
	"github.com/alpd-project/alpd/services/federation/discovery"
	"github.com/alpd-project/alpd/test/internal/alpdtest"
)

// unlimitedNLIP are agent rate limits out of reach: the fault tests send
// a thousand messages in seconds (as test/e2e's).
var unlimitedNLIP = map[string]any{
	"agent_per_minute": 6_000_000, "agent_burst": 1_000_000,
	"person_per_minute": 6_000_000, "person_burst": 1_000_000,
	"tenant_per_minute": 60_000_000, "tenant_burst": 10_000_000,
	"ws_per_minute": 6_000_000, "ws_burst": 1_000_000,
}

// faultSections are what the fault tests change in every broker: rates
// out of reach, no cap on the connections of one client address, and a
// short backoff (retry_max 2s: the breaker's open time is min(30s,
// retry_max)), so a remote that comes back is tried again within seconds.
func faultSections() map[string]any {
	return map[string]any{"nlip": unlimitedNLIP, "http": map[string]any{"max_conns_per_address": 0},
		"federation": map[string]any{"retry_min": "100ms", "retry_max": "2s"}}
}

// faultSpec is a broker for the fault tests, home of one domain.
func faultSpec(name, domain string, users ...string) BrokerSpec {
	return BrokerSpec{Name: name, Domains: []string{domain}, Users: users, Config: Sections(faultSections())}
}

// twoOrgs is ana@a.example (with several agents) and lee@b.example,
// connected, lee opted in to free text.
type twoOrgs struct {
	h       *Harness
	a, b    *Broker
	anaToks []string
	leeTok  string
	lee     *alpdtest.Session
}

// newTwoOrgs starts brokers A and B and connects ana and lee; ana gets
// agents tokens. tweakA, if set, changes A's alpd.yaml map last.
func newTwoOrgs(t *testing.T, agents int, tweakA func(conf map[string]any)) *twoOrgs {
	t.Helper()
	a := faultSpec("broker.a.example", "a.example", "ana")
	if tweakA != nil {
		a.Config = func(conf map[string]any) { Sections(faultSections())(conf); tweakA(conf) }
	}
	h := New(t, a, faultSpec("broker.b.example", "b.example", "lee"))
	o := &twoOrgs{h: h, a: h.Broker("broker.a.example"), b: h.Broker("broker.b.example")}
	first, ana := o.a.PAT(t, "a.example", "ana", "desk0", "alp.send", "alp.read")
	o.anaToks = []string{first}
	for i := 1; i < agents; i++ {
		o.anaToks = append(o.anaToks, ana.PAT(t, "desk"+strconv.Itoa(i), "alp.send", "alp.read"))
	}
	o.leeTok, o.lee = o.b.PAT(t, "b.example", "lee", "muse", "alp.send", "alp.read")
	connect(t, h, o.a, first, ana, o.lee)
	o.lee.OptInFreeText(t)
	return o
}

// agentTry is agentDo for goroutines: the failure is returned.
func (h *Harness) agentTry(b *Broker, method, path, token string, body any) (int, []byte, error) {
	var r io.Reader
	if body != nil {
		raw, _ := json.Marshal(body)
		r = bytes.NewReader(raw)
	}
	req, _ := http.NewRequest(method, b.URL+path, r)
	req.Header.Set("Authorization", "Bearer "+token)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := h.AgentClient().Do(req)
	if err != nil {
		return 0, nil, fmt.Errorf("%s %s: %w", method, path, err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	return resp.StatusCode, raw, err
}

// sendMany sends n messages at once from the agents (message i by agent
// i mod len(tokens), each agent's one after the other) and returns their
// envelope ids in order.
func (h *Harness) sendMany(t *testing.T, b *Broker, tokens []string, n int, to func(i int) string, typ string, body func(i int) any) []string {
	t.Helper()
	ids := make([]string, n)
	errs := make([]error, len(tokens))
	var wg sync.WaitGroup
	for k, tok := range tokens {
		wg.Go(func() {
			for i := k; i < n; i += len(tokens) {
				status, raw, err := h.agentTry(b, http.MethodPost, "/v1/agent/messages", tok, map[string]any{"to": to(i), "type": typ, "body": body(i)})
				var out struct {
					ID string `json:"envelope_id"`
				}
				if err == nil && (status/100 != 2 || json.Unmarshal(raw, &out) != nil || out.ID == "") {
					err = fmt.Errorf("%d %s", status, raw)
				}
				if err != nil {
					errs[k] = fmt.Errorf("send %d to %s: %w", i, to(i), err)
					return
				}
				ids[i] = out.ID
			}
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	return ids
}

// notes sends n notes from ana's agents to lee.
func (o *twoOrgs) notes(t *testing.T, n int, label string) []string {
	t.Helper()
	return o.h.sendMany(t, o.a, o.anaToks, n, func(int) string { return "lee@b.example" }, "note/v1",
		func(i int) any { return map[string]any{"text": fmt.Sprintf("%s %d", label, i)} })
}

// openStream opens one of the broker's streams on a connection of its
// own, closed when ctx's caller returns (the tests poll for minutes, and
// the broker restarts meanwhile).
func openStream(ctx context.Context, t testing.TB, b *Broker, stream string) jetstream.Stream {
	t.Helper()
	nc, err := nats.Connect("nats://"+b.NATSAddr, nats.Timeout(5*time.Second), nats.NoReconnect())
	if err != nil {
		t.Fatalf("connect to %s's NATS: %v", b.Name, err)
	}
	context.AfterFunc(ctx, nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	s, err := js.Stream(ctx, bus.StreamName(b.NS, stream))
	if err != nil {
		t.Fatalf("%s: stream %s: %v", b.Name, stream, err)
	}
	return s
}

// subjectCounts are the messages on each subject of the broker's stream
// matching filter.
func subjectCounts(t testing.TB, b *Broker, stream, filter string) map[string]uint64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s := openStream(ctx, t, b, stream)
	info, err := s.Info(ctx, jetstream.WithSubjectFilter(filter))
	if err != nil {
		t.Fatalf("%s: stream %s: %v", b.Name, stream, err)
	}
	return info.State.Subjects
}

// streamMsgs is the number of messages in the broker's stream now.
func streamMsgs(t testing.TB, b *Broker, stream string) uint64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s := openStream(ctx, t, b, stream)
	info, err := s.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return info.State.Msgs
}

// verified is how many InboundVerified messages the broker stored for
// each envelope id (the last token of alp.inbound.….verified.<id>).
func verified(t testing.TB, b *Broker) map[string]uint64 {
	t.Helper()
	out := map[string]uint64{}
	for subj, n := range subjectCounts(t, b, "INBOUND", streams.InboundVerifiedFilter()) {
		out[subj[strings.LastIndexByte(subj, '.')+1:]] += n
	}
	return out
}

// metric is the sum of a counter's samples (every label) on the broker's
// /metrics.
func metric(t testing.TB, b *Broker, name string) float64 {
	t.Helper()
	status, body := b.Get(t, "/metrics")
	if status != http.StatusOK {
		t.Fatalf("%s /metrics: %d", b.Name, status)
	}
	var sum float64
	sc := bufio.NewScanner(bytes.NewReader(body))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		rest, ok := strings.CutPrefix(line, name)
		if !ok || (rest != "" && rest[0] != ' ' && rest[0] != '{') {
			continue
		}
		f := strings.Fields(line)
		v, err := strconv.ParseFloat(f[len(f)-1], 64)
		if err == nil {
			sum += v
		}
	}
	return sum
}

// federationMetrics are A's outbox counters, for a failure's message.
func federationMetrics(t testing.TB, b *Broker) string {
	t.Helper()
	var parts []string
	for _, n := range []string{"queued_total", `sent_total{broker="` + b.NS + `",kind="OUTBOX_KIND_ENVELOPE"}`, `sent_total{broker="` + b.NS + `",kind="OUTBOX_KIND_COSIGN"}`, "retries_total", "breaker_open_total", "failed_total", "received_total", "receipts_total"} {
		parts = append(parts, fmt.Sprintf("%s=%.0f", n, metric(t, b, "alpd_federation_"+n)))
	}
	return b.Name + ": " + strings.Join(parts, " ")
}

// progress waits until count() reaches want, failing with what report()
// says when it stays put for stall or the whole wait passes within.
func progress(t *testing.T, what string, want int, within, stall time.Duration, count func() int, report func() string) {
	t.Helper()
	start := time.Now()
	last, lastAt := -1, start
	for {
		n := count()
		if n >= want {
			t.Logf("%s: %d/%d after %s", what, n, want, time.Since(start).Round(time.Millisecond))
			return
		}
		now := time.Now()
		if n != last {
			last, lastAt = n, now
		}
		if now.Sub(lastAt) > stall {
			t.Fatalf("%s: stuck at %d/%d for %s; %s", what, n, want, stall, report())
		}
		if now.Sub(start) > within {
			t.Fatalf("%s: %d/%d after %s; %s", what, n, want, within, report())
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// states reads each envelope's delivery state as the sending agent does
// (8 requests at once).
func (h *Harness) states(t *testing.T, b *Broker, token string, ids []string) map[string]string {
	t.Helper()
	out := make(map[string]string, len(ids))
	var mu sync.Mutex
	var wg sync.WaitGroup
	next := make(chan string)
	for range 8 {
		wg.Go(func() {
			for id := range next {
				status, raw, err := h.agentTry(b, http.MethodGet, "/v1/agent/messages/"+id, token, nil)
				var m struct {
					Delivery *delivery `json:"delivery"`
				}
				state := "?"
				switch {
				case err != nil:
					state = "error: " + err.Error()
				case status != http.StatusOK || json.Unmarshal(raw, &m) != nil:
					state = fmt.Sprintf("%d %.200s", status, raw)
				case m.Delivery != nil:
					state = m.Delivery.State
				}
				mu.Lock()
				out[id] = state
				mu.Unlock()
			}
		})
	}
	for _, id := range ids {
		next <- id
	}
	close(next)
	wg.Wait()
	return out
}

// inboxIDs lists every item in the agent's inbox (acknowledged or not),
// page by page, and counts each id.
func (h *Harness) inboxIDs(t *testing.T, b *Broker, token string) map[string]int {
	t.Helper()
	out := map[string]int{}
	after := ""
	for {
		q := url.Values{"include_acked": {"true"}, "limit": {"100"}}
		if after != "" {
			q.Set("after", after)
		}
		status, raw := h.agentDo(t, b, http.MethodGet, "/v1/agent/inbox?"+q.Encode(), token, nil)
		var page struct {
			Items []inboxItem `json:"items"`
			Next  string      `json:"next"`
		}
		if status != http.StatusOK || json.Unmarshal(raw, &page) != nil {
			t.Fatalf("GET inbox: %d %.300s", status, raw)
		}
		for _, it := range page.Items {
			out[it.ID]++
		}
		if page.Next == "" || len(page.Items) == 0 {
			return out
		}
		after = page.Next
	}
}

// expectExactlyOnce waits (bounded) until every envelope of ids is
// verified once on B and delivered as ana's agent reads it, then checks
// none came twice: lee's inbox holds each exactly once and B's INBOUND
// one InboundVerified per envelope.
func (o *twoOrgs) expectExactlyOnce(t *testing.T, ids []string, within time.Duration) {
	t.Helper()
	want := map[string]bool{}
	for _, id := range ids {
		want[id] = true
	}
	if len(want) != len(ids) {
		t.Fatalf("%d sends made %d distinct envelope ids", len(ids), len(want))
	}
	report := func() string {
		return federationMetrics(t, o.a) + "; " + federationMetrics(t, o.b) + fmt.Sprintf("; A's outbox holds %d", streamMsgs(t, o.a, "OUTBOX"))
	}
	deadline := time.Now().Add(within)
	progress(t, "verified on B", len(ids), within, 60*time.Second, func() int {
		n := 0
		for id := range verified(t, o.b) {
			if want[id] {
				n++
			}
		}
		return n
	}, report)

	pending := ids
	var last map[string]string
	progress(t, "delivered as A's agent reads it", len(ids), time.Until(deadline), 60*time.Second, func() int {
		last = o.h.states(t, o.a, o.anaToks[0], pending)
		var still []string
		for _, id := range pending {
			if last[id] != "delivered" {
				still = append(still, id)
			}
		}
		pending = still
		return len(ids) - len(pending)
	}, func() string {
		counts := map[string]int{}
		for _, id := range pending {
			counts[last[id]]++
		}
		return fmt.Sprintf("states of the rest %v; %s", counts, report())
	})

	// Nothing left to send again: an item sent but not acknowledged (its
	// sender killed) comes back only after the outbox's ack wait.
	progress(t, "A's outbox drained", 1, time.Until(deadline)+time.Minute, 60*time.Second,
		func() int { return 1 - min(1, int(streamMsgs(t, o.a, "OUTBOX"))) }, report)
	inbox := o.h.inboxIDs(t, o.b, o.leeTok)
	got, twice := 0, 0
	for id, n := range inbox {
		if want[id] {
			got++
		}
		if n > 1 {
			twice++
		}
	}
	if got != len(ids) || twice != 0 {
		t.Errorf("lee's inbox holds %d of the %d envelopes (%d items in all), %d ids more than once", got, len(ids), len(inbox), twice)
	}
	v := verified(t, o.b)
	subjects, msgs := 0, uint64(0)
	for id, n := range v {
		if want[id] {
			subjects++
			msgs += n
		}
	}
	if subjects != len(ids) || msgs != uint64(len(ids)) {
		t.Errorf("B's INBOUND holds %d .verified. subjects with %d messages for the %d envelopes, want exactly %d of each",
			subjects, msgs, len(ids), len(ids))
	}
}

// TestRemoteDownThenBack: B is stopped; ana's agents send lee 1,000 notes
// while B is down for 60 s; B starts again on its data dir. Every note is
// delivered afterwards (each one's delivery state reaches delivered) and
// none twice: lee's inbox holds exactly 1,000 distinct items and B's
// INBOUND exactly 1,000 verified envelopes. A's metrics show the retries
// and the breaker that held its outbox meanwhile.
func TestRemoteDownThenBack(t *testing.T) {
	const n, down = 1000, 60 * time.Second
	o := newTwoOrgs(t, 8, nil)
	o.b.Stop(t)
	stopped := time.Now()
	ids := o.notes(t, n, "while B is down")
	t.Logf("%d notes sent in %s while B is down", n, time.Since(stopped).Round(time.Millisecond))
	if time.Since(stopped) > down/2 {
		t.Fatalf("sending took %s, more than half of B's %s down", time.Since(stopped).Round(time.Second), down)
	}
	time.Sleep(time.Until(stopped.Add(down)))
	retries, breaker := metric(t, o.a, "alpd_federation_retries_total"), metric(t, o.a, "alpd_federation_breaker_open_total")
	t.Logf("A while B was down: %s; outbox holds %d", federationMetrics(t, o.a), streamMsgs(t, o.a, "OUTBOX"))
	if retries == 0 || breaker == 0 {
		t.Errorf("A's metrics show %v retries and %v postponements by the open breaker while B was down; want both", retries, breaker)
	}
	back := time.Now()
	o.b.Start(t)
	o.expectExactlyOnce(t, ids, 4*time.Minute)
	t.Logf("all %d delivered %s after B was started again (%s)", n, time.Since(back).Round(time.Millisecond), federationMetrics(t, o.a))
}

// TestSenderKilledMidOutbox: with B down, A's outbox fills; B starts and
// A is killed -9 while it is delivering (some notes accepted by B and
// recorded, some accepted by B and not recorded by A, some not tried
// yet), then started again on its data dir. Nothing is lost or delivered
// twice.
func TestSenderKilledMidOutbox(t *testing.T) {
	const n = 400
	o := newTwoOrgs(t, 4, nil)
	o.b.Stop(t)
	ids := o.notes(t, n, "before the kill")
	progress(t, "A's outbox", n, time.Minute, 30*time.Second, func() int { return int(streamMsgs(t, o.a, "OUTBOX")) },
		func() string { return federationMetrics(t, o.a) })
	o.b.Start(t)
	progress(t, "verified on B before the kill", n/5, 2*time.Minute, 60*time.Second, func() int { return len(verified(t, o.b)) - 1 },
		func() string { return federationMetrics(t, o.a) })
	// B freezes (A's senders wait on it with their requests written),
	// then A freezes and B goes on: B stores and answers the sends A had
	// in flight, and A, killed, never reads those answers. A started
	// again sends them again, and B must recognise each.
	signal(t, o.b, syscall.SIGSTOP)
	time.Sleep(time.Second)
	signal(t, o.a, syscall.SIGSTOP)
	signal(t, o.b, syscall.SIGCONT)
	before := len(verified(t, o.b)) - 1
	time.Sleep(2 * time.Second)
	o.a.Kill(t)
	atKill := len(verified(t, o.b)) - 1
	t.Logf("B stored %d of the sends in flight while A was frozen", atKill-before)
	t.Logf("A killed with %d of %d verified on B", atKill, n)
	if atKill >= n {
		t.Fatalf("every note was delivered before A was killed: nothing was mid-outbox")
	}
	o.a.Start(t)
	o.expectExactlyOnce(t, ids, 4*time.Minute)
	// Without one, the kill caught no send in flight: nothing here tried
	// the receiver's dedupe.
	if n := metric(t, o.b, "alpd_federation_duplicates_total"); n == 0 {
		t.Errorf("B answered no send as a duplicate: A sent nothing again after the kill")
	} else {
		t.Logf("B answered %.0f sends as duplicates (A sent them again after the kill)", n)
	}
}

// signal sends sig to the broker's process.
func signal(t testing.TB, b *Broker, sig syscall.Signal) {
	t.Helper()
	if err := b.proc().Cmd.Process.Signal(sig); err != nil {
		t.Fatalf("%s: %v: %v", b.Name, sig, err)
	}
}

// stallingBroker is c.example's home broker as a remote that is up but
// slow: it answers discovery properly (the domain's document, its signed
// broker keys) and stalls every send until the sender gives up.
type stallingBroker struct {
	name, addr string
	lis        net.Listener
	srv        *http.Server
	stop       chan struct{}
	inflight   atomic.Int32
	sends      atomic.Int32
	// armed: sends stall; until then they are refused with 429, so that
	// A's outbox fills with items that all come back within a second or
	// two once armed (A's breaker counts no failure for a 429).
	armed atomic.Bool
	once  sync.Once
}

// listenStalling reserves the stalling broker's address before the harness
// starts (the resolve maps name it); serve starts it with a certificate of
// the harness's CA.
func listenStalling(t *testing.T, ip string) *stallingBroker {
	t.Helper()
	lis, err := net.Listen("tcp", net.JoinHostPort(ip, "0"))
	if err != nil {
		t.Fatal(err)
	}
	return &stallingBroker{name: "broker.c.example", addr: lis.Addr().String(), lis: lis, stop: make(chan struct{})}
}

// resolveIn adds the stalling broker's names to a broker's federation.resolve.
func (s *stallingBroker) resolveIn(conf map[string]any) {
	r := conf["federation"].(map[string]any)["resolve"].(map[string]string)
	r["c.example"], r[s.name] = s.addr, s.addr
}

func (s *stallingBroker) serve(t *testing.T, h *Harness) {
	t.Helper()
	host, port, _ := net.SplitHostPort(s.addr)
	certPEM, keyPEM, err := h.CA.IssueServer(s.name, []string{s.name, "c.example", host}, 24*time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	pub, priv, _ := ed25519.GenerateKey(rand.Reader)
	base := "https://" + s.name + ":" + port
	now := time.Now()
	keyID := alpwire.KeyID(pub)
	keys, err := alpwire.SignBrokerKeys(&alpwire.BrokerKeys{Broker: s.name, BrokerURL: base, FederationURL: base + alpwire.FederationPath,
		VerifyKeys:   map[string]alpwire.VerifyKey{keyID: {Key: base64.RawURLEncoding.EncodeToString(pub), ValidFromTS: now.Add(-time.Hour).UnixMilli()}},
		ValidUntilTS: now.Add(24 * time.Hour).UnixMilli()}, keyID, priv)
	if err != nil {
		t.Fatal(err)
	}
	doc, _ := json.Marshal(alpwire.DomainDoc{Wire: alpwire.Version, Domain: "c.example", Broker: s.name, BrokerURL: base, MaxAge: 3600})
	mux := http.NewServeMux()
	mux.HandleFunc("GET "+discovery.DomainDocPath, func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(doc)
	})
	mux.HandleFunc("GET "+discovery.BrokerKeysPath, func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(keys)
	})
	mux.HandleFunc("POST "+federation.SendPath, func(w http.ResponseWriter, r *http.Request) {
		if !s.armed.Load() {
			w.Header().Set("Retry-After", "1")
			http.Error(w, "not yet", http.StatusTooManyRequests)
			return
		}
		s.sends.Add(1)
		s.inflight.Add(1)
		defer s.inflight.Add(-1)
		select {
		case <-r.Context().Done():
		case <-s.stop:
		}
		http.Error(w, "stalled", http.StatusServiceUnavailable)
	})
	s.srv = &http.Server{Handler: mux, TLSConfig: &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}}
	go func() { _ = s.srv.ServeTLS(s.lis, "", "") }()
	// Before the harness stops the brokers: a broker's stalled requests end.
	t.Cleanup(func() {
		s.once.Do(func() { close(s.stop) })
		_ = s.srv.Close()
	})
}

// serialLatencies sends lee k notes one after the other, each once the
// one before is delivered, and returns each one's time from the send until
// ana's agent reads its delivery state as delivered (polled every 50 ms);
// it fails when one takes longer than limit.
func (o *twoOrgs) serialLatencies(t *testing.T, k int, label string, limit time.Duration) []time.Duration {
	t.Helper()
	var out []time.Duration
	for i := range k {
		start := time.Now()
		id := o.h.send(t, o.a, o.anaToks[i%len(o.anaToks)], "lee@b.example", "note/v1", map[string]any{"text": fmt.Sprintf("%s %d", label, i)})
		for {
			st := o.h.states(t, o.a, o.anaToks[0], []string{id})[id]
			if st == "delivered" {
				break
			}
			if time.Since(start) > limit {
				t.Fatalf("%s: note %d to lee still %s after %s (%s)", label, i, st, limit, federationMetrics(t, o.a))
			}
			time.Sleep(50 * time.Millisecond)
		}
		out = append(out, time.Since(start))
	}
	return out
}

// TestSlowRemoteDoesNotBlockOthers: c.example's home broker answers
// discovery but stalls every send until A gives up on it (once A's
// outbox holds every item for it). While A's
// outbox holds many items for c.example (as many stalled as A lets one
// remote hold), each of ana's notes to lee@b.example is still delivered
// about as fast as in a baseline of the same notes before, in the same
// run: none waits behind a stalled send (which would cost it the rest of
// that send's timeout, seconds).
func TestSlowRemoteDoesNotBlockOthers(t *testing.T) {
	const k, toC = 16, 300
	c := listenStalling(t, "127.0.0.60")
	o := newTwoOrgs(t, 8, c.resolveIn)
	c.serve(t, o.h)

	o.serialLatencies(t, 3, "warm-up", time.Minute)
	baseline := quantiles(o.serialLatencies(t, k, "baseline", time.Minute))

	o.h.sendMany(t, o.a, o.anaToks, toC, func(i int) string { return "p" + strconv.Itoa(i) + "@c.example" }, "connection.request/v1",
		func(int) any { return map[string]any{"purpose": "meeting"} })
	c.armed.Store(true)
	// The measure starts once c.example holds as many stalled sends as A
	// lets one remote hold, and A's ledger has recorded the 300 sends (ana's
	// log is one sequence: a note written behind 300 entries waits for
	// them, stalled remote or not).
	const perRemote = 16 // federation's default PerRemote
	deadline := time.Now().Add(time.Minute)
	for c.inflight.Load() < perRemote || streamMsgs(t, o.a, streams.LedgerWork) > 0 {
		if time.Now().After(deadline) {
			t.Fatalf("c.example's broker holds %d stalled sends (of %d tried), want %d; A's ledger work holds %d; %s",
				c.inflight.Load(), c.sends.Load(), perRemote, streamMsgs(t, o.a, streams.LedgerWork), federationMetrics(t, o.a))
		}
		time.Sleep(50 * time.Millisecond)
	}
	stalledAt, triedAt := time.Now(), c.sends.Load()
	// Generous: three times the baseline p99, and a second.
	limit := 3*baseline[2] + time.Second
	slowed := quantiles(o.serialLatencies(t, k, "beside the stalled remote", limit))
	ms := func(d time.Duration) string { return d.Round(time.Millisecond).String() }
	t.Logf("%d serial notes to lee: p50 %s, p99 %s before; p50 %s, p99 %s beside c.example's stalled sends (%d stalled at the start, %d more tried in the %s); ratios p50 %.1f×, p99 %.1f×",
		k, ms(baseline[0]), ms(baseline[2]), ms(slowed[0]), ms(slowed[2]), perRemote, c.sends.Load()-triedAt, ms(time.Since(stalledAt)),
		float64(slowed[0])/float64(baseline[0]), float64(slowed[2])/float64(baseline[2]))
}
