package federation_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/alpd-project/alpd/internal/testkit"
	"github.com/alpd-project/alpd/test/internal/alpdtest"
)

// Federation measured end to end against real alpd processes (each with
// its embedded NATS, every write fsynced): 64 agents at once, 32 sending
// meeting requests back to back to their own connected colleague, whose 32
// agents watch their inboxes on the NLIP WebSocket. One item is from the
// send's first byte until it is pushed to the recipient's agent. The same
// run measures the cross-broker path (s<i>@a.example on A to r<i>@b.example
// on B: signed, sent over HTTPS, verified, decided on both sides,
// receipted), the same-broker path (s<i>@a.example to r<i>@a.example, both
// on A) and a loopback HTTPS echo of the same request with 32 clients.
// They are measurements, not checks: they assert only that every item
// arrived, and run only when ALPD_LOAD is set (make bench):
//
//	ALPD_LOAD=1 go test -count=1 -run '^TestFederationLoad' -v ./test/federation/
//
// ALPD_LOAD_PER_AGENT sets the items each sending agent sends (default 40).

func skipUnlessLoad(t *testing.T) {
	t.Helper()
	if os.Getenv("ALPD_LOAD") == "" {
		t.Skip("a measurement: set ALPD_LOAD=1 to run it (make bench)")
	}
}

func loadParam(t *testing.T, name string, def, least int) int {
	t.Helper()
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < least {
		t.Fatalf("%s=%q: want a number, at least %d", name, v, least)
	}
	return n
}

// loadSpec is a broker for the measurements: rates out of reach (the
// connection requests of 32 people from one broker included), no cap on
// the connections of one client address.
func loadSpec(name, domain string, users []string) BrokerSpec {
	return BrokerSpec{Name: name, Domains: []string{domain}, Users: users, Config: Sections(map[string]any{
		"nlip": unlimitedNLIP, "http": map[string]any{"max_conns_per_address": 0},
		"federation": map[string]any{"stranger_rate": "100000/min"}})}
}

// meeting is a meeting request body to addr.
func meeting(to string, n int) map[string]any {
	return map[string]any{"subject": fmt.Sprintf("item %d", n), "start": "2026-12-03T10:00:00Z", "duration": "PT30M", "attendees": []string{to}}
}

// pushes follows one agent's NLIP WebSocket: when each item was pushed.
// It acknowledges what arrived in batches, as an agent does.
type pushes struct {
	mu   sync.Mutex
	at   map[string]time.Time
	cond *sync.Cond
	err  error
}

// watchPushes opens the agent's NLIP WebSocket (text binding) on b.
func (h *Harness) watchPushes(t *testing.T, ctx context.Context, b *Broker, token string) *pushes {
	t.Helper()
	tr := h.Client().Transport.(*http.Transport).Clone()
	tr.ForceAttemptHTTP2 = false // the WebSocket upgrade is HTTP/1.1
	tr.TLSClientConfig = &tls.Config{RootCAs: h.Roots, MinVersion: tls.VersionTLS12, NextProtos: []string{"http/1.1"}}
	dctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	c, resp, err := websocket.Dial(dctx, strings.Replace(b.URL, "https://", "wss://", 1)+"/nlip/ws/text", &websocket.DialOptions{
		HTTPClient: &http.Client{Transport: tr}, HTTPHeader: http.Header{"Authorization": {"Bearer " + token}}})
	if err != nil {
		if resp != nil {
			t.Fatalf("open the NLIP WebSocket: handshake %d: %v", resp.StatusCode, err)
		}
		t.Fatalf("open the NLIP WebSocket: %v", err)
	}
	c.SetReadLimit(8 << 20)
	t.Cleanup(func() { c.CloseNow() })
	p := &pushes{at: map[string]time.Time{}}
	p.cond = sync.NewCond(&p.mu)
	fail := func(err error) {
		p.mu.Lock()
		if p.err == nil && ctx.Err() == nil {
			p.err = err
		}
		p.cond.Broadcast()
		p.mu.Unlock()
	}
	acks := make(chan string, 4096)
	go func() {
		for {
			_, data, err := c.Read(ctx)
			if err != nil {
				fail(err)
				return
			}
			if !bytes.Contains(data, []byte(`"alp:item"`)) {
				continue // the answer to an acknowledgement
			}
			at := time.Now()
			id, err := pushedID(data)
			if err != nil {
				fail(err)
				return
			}
			p.mu.Lock()
			if _, seen := p.at[id]; !seen {
				p.at[id] = at
			}
			p.cond.Broadcast()
			p.mu.Unlock()
			acks <- id
		}
	}()
	go func() {
		var pending []string
		for {
			select {
			case id := <-acks:
				if pending = append(pending, id); len(pending) < 50 {
					continue
				}
			case <-time.After(20 * time.Millisecond):
			case <-ctx.Done():
				return
			}
			if len(pending) == 0 {
				continue
			}
			raw, _ := json.Marshal(map[string]any{"ids": pending})
			msg := `{"format":"text","subformat":"english","content":"ack","submessages":[{"label":"alp.ack","format":"structured","subformat":"json","content":` + string(raw) + `}]}`
			if err := c.Write(ctx, websocket.MessageText, []byte(msg)); err != nil {
				fail(err)
				return
			}
			pending = nil
		}
	}()
	return p
}

// pushedID is the item id of a pushed alp:item message.
func pushedID(raw []byte) (string, error) {
	var m struct {
		Submessages []struct {
			Label   string          `json:"label"`
			Content json.RawMessage `json:"content"`
		} `json:"submessages"`
	}
	if err := json.Unmarshal(raw, &m); err != nil {
		return "", fmt.Errorf("pushed item: %w", err)
	}
	for _, sm := range m.Submessages {
		var it struct {
			ID string `json:"id"`
		}
		if sm.Label == "alp.item" && json.Unmarshal(sm.Content, &it) == nil && it.ID != "" {
			return it.ID, nil
		}
	}
	return "", fmt.Errorf("no alp.item in %.300s", raw)
}

// wait returns when id was pushed, waiting up to timeout.
func (p *pushes) wait(id string, timeout time.Duration) (time.Time, error) {
	deadline := time.Now().Add(timeout)
	stop := time.AfterFunc(timeout, func() { p.mu.Lock(); p.cond.Broadcast(); p.mu.Unlock() })
	defer stop.Stop()
	p.mu.Lock()
	defer p.mu.Unlock()
	for {
		if at, ok := p.at[id]; ok {
			return at, nil
		}
		if p.err != nil {
			return time.Time{}, p.err
		}
		if time.Now().After(deadline) {
			return time.Time{}, fmt.Errorf("%s not pushed within %s", id, timeout)
		}
		p.cond.Wait()
	}
}

// loadPair is a sending agent and the recipient agent it writes to.
type loadPair struct {
	from                   *Broker
	to                     string // the recipient's address
	toBroker               *Broker
	fromToken, toToken     string
	fromSession, toSession *alpdtest.Session
	fromAddress            string
}

// loadRun is one path measured: items per second and each item's latency.
type loadRun struct {
	rate      float64
	latencies []time.Duration
	elapsed   time.Duration
	total     int
}

// measure has every pair's sender send per meeting requests back to back
// while every recipient's agent watches its WebSocket.
func (h *Harness) measure(t *testing.T, pairs []loadPair, per int) loadRun {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	got := make([]*pushes, len(pairs))
	for i, p := range pairs {
		got[i] = h.watchPushes(t, ctx, p.toBroker, p.toToken)
	}
	type sent struct {
		id    string
		start time.Time
	}
	sends := make([][]sent, len(pairs))
	errs := make([]error, len(pairs))
	start := time.Now()
	var wg sync.WaitGroup
	for i, p := range pairs {
		wg.Go(func() {
			for j := range per {
				s := time.Now()
				status, raw, err := h.agentTry(p.from, http.MethodPost, "/v1/agent/messages", p.fromToken,
					map[string]any{"to": p.to, "type": "meeting.request/v1", "body": meeting(p.to, j)})
				var out struct {
					ID string `json:"envelope_id"`
				}
				if err == nil && (status/100 != 2 || json.Unmarshal(raw, &out) != nil || out.ID == "") {
					err = fmt.Errorf("%d %.300s", status, raw)
				}
				if err != nil {
					errs[i] = fmt.Errorf("pair %d send %d: %w", i, j, err)
					return
				}
				sends[i] = append(sends[i], sent{out.ID, s})
			}
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	run := loadRun{total: len(pairs) * per}
	var last time.Time
	for i := range pairs {
		for _, s := range sends[i] {
			at, err := got[i].wait(s.id, 60*time.Second)
			if err != nil {
				t.Fatalf("pair %d (%s): %v", i, pairs[i].to, err)
			}
			run.latencies = append(run.latencies, at.Sub(s.start))
			if at.After(last) {
				last = at
			}
		}
	}
	run.elapsed = last.Sub(start)
	run.rate = float64(run.total) / run.elapsed.Seconds()
	return run
}

// echoRun is the floor: a loopback HTTPS server answering each request
// with its body, conc clients (each its own keep-alive connection)
// making n requests each.
func echoRun(t *testing.T, body []byte, conc, n int) loadRun {
	t.Helper()
	s := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.Copy(w, r.Body)
	}))
	defer s.Close()
	lat := make([][]time.Duration, conc)
	errs := make([]error, conc)
	var wg sync.WaitGroup
	start := time.Now()
	for i := range conc {
		wg.Go(func() {
			tr := s.Client().Transport.(*http.Transport).Clone()
			tr.MaxIdleConnsPerHost = 1
			c := &http.Client{Transport: tr, Timeout: 10 * time.Second}
			for range n {
				st := time.Now()
				resp, err := c.Post(s.URL+"/v1/agent/messages", "application/json", bytes.NewReader(body))
				if err != nil {
					errs[i] = err
					return
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				lat[i] = append(lat[i], time.Since(st))
			}
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatalf("echo: %v", err)
	}
	run := loadRun{total: conc * n, elapsed: time.Since(start)}
	run.rate = float64(run.total) / run.elapsed.Seconds()
	for _, l := range lat {
		run.latencies = append(run.latencies, l...)
	}
	return run
}

// quantiles are p50, p90 and p99 of ds (sorted in place).
func quantiles(ds []time.Duration) [3]time.Duration {
	slices.Sort(ds)
	q := func(p float64) time.Duration { return ds[int(p*float64(len(ds)-1))] }
	return [3]time.Duration{q(.5), q(.9), q(.99)}
}

// connectPair connects a sender and a recipient on their brokers: the
// sender asks; across brokers the recipient asks back (each broker
// records only what its own person decided), and each accepts.
func (h *Harness) connectPair(t *testing.T, p loadPair) {
	t.Helper()
	req := h.send(t, p.from, p.fromToken, p.to, "connection.request/v1", map[string]any{"purpose": "meeting"})
	if p.from == p.toBroker { // no delivery status: the request is held here
		acceptRequest(t, p.toSession, req)
		return
	}
	h.waitDelivery(t, p.from, p.fromToken, req, "held")
	acceptPending(t, p.toSession, p.fromAddress)
	back := h.send(t, p.toBroker, p.toToken, p.fromAddress, "connection.request/v1", map[string]any{"purpose": "meeting"})
	h.waitDelivery(t, p.toBroker, p.toToken, back, "held")
	acceptPending(t, p.fromSession, p.to)
}

// acceptRequest accepts the signed-in person's pending connection request
// made by the envelope id (a requester on the same broker is named by
// person id, not address).
func acceptRequest(t *testing.T, s *alpdtest.Session, envelopeID string) {
	t.Helper()
	var id string
	testkit.Eventually(t, 30*time.Second, func() error {
		status, raw := s.Do(t, http.MethodGet, "/v1/connections", nil)
		var out struct {
			Pending []struct {
				ID         string `json:"id"`
				EnvelopeID string `json:"envelope_id"`
			} `json:"pending"`
		}
		if status != http.StatusOK || json.Unmarshal(raw, &out) != nil {
			return fmt.Errorf("GET /v1/connections: %d %s", status, raw)
		}
		for _, p := range out.Pending {
			if p.EnvelopeID == envelopeID {
				id = p.ID
				return nil
			}
		}
		return fmt.Errorf("no pending request of envelope %s in %s", envelopeID, raw)
	}, "a pending connection request")
	if status, raw := s.Do(t, http.MethodPost, "/v1/connections/"+id+"/accept", nil); status != http.StatusOK {
		t.Fatalf("accept %s: %d %s", id, status, raw)
	}
}

// TestFederationLoad: 64 agents at once on each path — 32 senders on A
// writing to 32 recipients' agents watching their WebSockets, on B
// (cross-broker) and on A (same broker) — beside the loopback HTTPS echo
// of the same request with 32 clients. Items per second from the first
// send until the last push, and p50/p90/p99 of each item's send → pushed
// to the recipient's agent, with the ratios between them.
func TestFederationLoad(t *testing.T) {
	skipUnlessLoad(t)
	const pairsN = 32
	per := loadParam(t, "ALPD_LOAD_PER_AGENT", 40, 1)
	var aUsers, bUsers []string
	for i := range pairsN {
		aUsers = append(aUsers, fmt.Sprintf("s%d", i), fmt.Sprintf("r%d", i))
		bUsers = append(bUsers, fmt.Sprintf("r%d", i))
	}
	h := New(t, loadSpec("broker.a.example", "a.example", aUsers), loadSpec("broker.b.example", "b.example", bUsers))
	a, b := h.Broker("broker.a.example"), h.Broker("broker.b.example")
	cross, same := make([]loadPair, pairsN), make([]loadPair, pairsN)
	for i := range pairsN {
		s := fmt.Sprintf("s%d", i)
		sTok, sSess := a.PAT(t, "a.example", s, "desk", "alp.send", "alp.read")
		r := fmt.Sprintf("r%d", i)
		bTok, bSess := b.PAT(t, "b.example", r, "muse", "alp.send", "alp.read")
		aTok, aSess := a.PAT(t, "a.example", r, "muse", "alp.send", "alp.read")
		cross[i] = loadPair{from: a, to: r + "@b.example", toBroker: b, fromToken: sTok, toToken: bTok, fromSession: sSess, toSession: bSess,
			fromAddress: s + "@a.example"}
		same[i] = loadPair{from: a, to: r + "@a.example", toBroker: a, fromToken: sTok, toToken: aTok, fromSession: sSess, toSession: aSess,
			fromAddress: s + "@a.example"}
	}
	connStart := time.Now()
	for i := range pairsN {
		h.connectPair(t, cross[i])
		h.connectPair(t, same[i])
	}
	t.Logf("connected %d pairs across brokers and %d on one broker in %s", pairsN, pairsN, time.Since(connStart).Round(time.Millisecond))
	// Warm-up: one item on each path for each pair (discovery, keys,
	// connections, the recipients' first WebSockets).
	h.measure(t, cross, 1)
	h.measure(t, same, 1)

	crossRun := h.measure(t, cross, per)
	sameRun := h.measure(t, same, per)
	body, _ := json.Marshal(map[string]any{"to": cross[0].to, "type": "meeting.request/v1", "body": meeting(cross[0].to, 0)})
	echo := echoRun(t, body, pairsN, 200)

	ms := func(d time.Duration) string { return strconv.FormatFloat(float64(d)/1e6, 'f', 1, 64) + "ms" }
	rows := []struct {
		name string
		run  loadRun
	}{{"cross-broker (A → B, signed, receipted)", crossRun}, {"same broker (two people on A)", sameRun}, {"loopback HTTPS echo (32 clients)", echo}}
	t.Logf("%d items per path from %d sending agents to %d watching agents (64 agents)", crossRun.total, pairsN, pairsN)
	t.Logf("%-42s %10s %10s %10s %10s", "", "items/s", "p50", "p90", "p99")
	qs := make([][3]time.Duration, len(rows))
	for i, r := range rows {
		qs[i] = quantiles(r.run.latencies)
		t.Logf("%-42s %10.0f %10s %10s %10s", r.name, r.run.rate, ms(qs[i][0]), ms(qs[i][1]), ms(qs[i][2]))
	}
	ratio := func(x, y float64) string { return strconv.FormatFloat(x/y, 'f', 2, 64) + "×" }
	for _, c := range []struct {
		name string
		i, j int
	}{{"cross-broker / same broker", 0, 1}, {"cross-broker / echo", 0, 2}, {"same broker / echo", 1, 2}} {
		t.Logf("%-42s %10s %10s %10s %10s", "ratio "+c.name, ratio(rows[c.i].run.rate, rows[c.j].run.rate),
			ratio(float64(qs[c.i][0]), float64(qs[c.j][0])), ratio(float64(qs[c.i][1]), float64(qs[c.j][1])), ratio(float64(qs[c.i][2]), float64(qs[c.j][2])))
	}
}
