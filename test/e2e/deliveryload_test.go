package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/alpd-project/alpd/internal/config"
)

// Delivery measured end to end against the real alpd binary (all-in-one,
// embedded NATS, every write fsynced): a send by one person's agent until
// the item reaches the recipient's agent — pushed on its NLIP WebSocket,
// or announced on its MCP session and read there — beside a bare loopback
// HTTP echo of the same request, measured in the same run. They are
// measurements, not checks: they assert only that every item arrived,
// never a time, and run only when ALPD_LOAD is set (make bench):
//
//	ALPD_LOAD=1 go test -count=1 -run '^TestDeliveryLoad' -v ./test/e2e/
//
// ALPD_LOAD_N sets the serial rounds of the latency runs (default 1000,
// after 100 warm-up rounds); ALPD_LOAD_PER_AGENT the items each sending
// agent sends in the throughput runs (default 40); ALPD_LOAD_SYNC_INTERVAL
// the embedded NATS's nats.sync_interval (default always).

// loadParam is the integer environment variable name, or def.
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

func skipUnlessLoad(t *testing.T) {
	t.Helper()
	if os.Getenv("ALPD_LOAD") == "" {
		t.Skip("a measurement: set ALPD_LOAD=1 to run it (make bench)")
	}
}

// echoServer is the floor: a bare loopback HTTP server that answers each
// request with its body.
func echoServer(t *testing.T) *httptest.Server {
	t.Helper()
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.Copy(w, r.Body)
	}))
	t.Cleanup(s.Close)
	return s
}

// echoOnce is one round trip to the echo server with body.
func echoOnce(c *http.Client, url string, body []byte) (time.Duration, error) {
	start := time.Now()
	resp, err := c.Post(url, "application/json", bytes.NewReader(body))
	if err != nil {
		return 0, err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return time.Since(start), nil
}

// echoRate is the echo's throughput with conc clients making n requests
// each, in requests per second.
func echoRate(t *testing.T, url string, body []byte, conc, n int) float64 {
	t.Helper()
	var wg sync.WaitGroup
	errs := make([]error, conc)
	start := time.Now()
	for i := range conc {
		wg.Go(func() {
			c := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 1}, Timeout: 10 * time.Second}
			for range n {
				if _, err := echoOnce(c, url, body); err != nil {
					errs[i] = err
					return
				}
			}
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatalf("echo: %v", err)
	}
	return float64(conc*n) / time.Since(start).Seconds()
}

// quantiles are p50, p90 and p99 of ds (sorted in place).
func quantiles(ds []time.Duration) [3]time.Duration {
	slices.Sort(ds)
	q := func(p float64) time.Duration { return ds[int(p*float64(len(ds)-1))] }
	return [3]time.Duration{q(.5), q(.9), q(.99)}
}

// logLatency logs the rows' quantiles and each row's ratio to the last
// (the floor).
func logLatency(t *testing.T, rows []string, qs [][3]time.Duration) {
	t.Helper()
	us := func(d time.Duration) string { return strconv.FormatFloat(float64(d)/1e3, 'f', 0, 64) + "µs" }
	t.Logf("%-42s %10s %10s %10s", "", "p50", "p90", "p99")
	for i, name := range rows {
		t.Logf("%-42s %10s %10s %10s", name, us(qs[i][0]), us(qs[i][1]), us(qs[i][2]))
	}
	floor := qs[len(qs)-1]
	for i, name := range rows[:len(rows)-1] {
		r := func(j int) string { return strconv.FormatFloat(float64(qs[i][j])/float64(floor[j]), 'f', 1, 64) + "×" }
		t.Logf("%-42s %10s %10s %10s", "ratio "+name, r(0), r(1), r(2))
	}
}

// meetingFor is a meeting request body to addr.
func meetingFor(to string, n int) string {
	return fmt.Sprintf(`{"subject":"item %d","start":"2026-12-03T10:00:00Z","duration":"PT30M","attendees":[%q]}`, n, to)
}

// postNLIP sends msg with a keep-alive client and returns the envelope id
// of the decided (or pending) send.
func postNLIP(c *http.Client, addr, token string, msg []byte) (string, error) {
	req, _ := http.NewRequest(http.MethodPost, "http://"+addr+"/nlip/", bytes.NewReader(msg))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := c.Do(req)
	if err != nil {
		return "", err
	}
	raw, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	var r struct {
		EnvelopeID string `json:"envelope_id"`
		Outcome    string `json:"outcome"`
	}
	if c, ok := submessage(raw, "alp.result"); (resp.StatusCode != http.StatusOK && resp.StatusCode != http.StatusAccepted) ||
		!ok || json.Unmarshal(c, &r) != nil || r.Outcome == "refuse" {
		return "", fmt.Errorf("send: %d %.300s", resp.StatusCode, raw)
	}
	return r.EnvelopeID, nil
}

// arrivals follows a WebSocket's pushes: when each id arrived. It
// acknowledges what arrived in batches, as an agent does.
type arrivals struct {
	mu   sync.Mutex
	at   map[string]time.Time
	cond *sync.Cond
}

func followPushes(t *testing.T, ctx context.Context, w *wsAgent) *arrivals {
	a := &arrivals{at: map[string]time.Time{}}
	a.cond = sync.NewCond(&a.mu)
	go func() {
		var pending []string
		for {
			select {
			case it := <-w.items:
				a.mu.Lock()
				a.at[it.ID] = it.At
				a.cond.Broadcast()
				a.mu.Unlock()
				// At most 100 ids an acknowledgement; a burst is
				// acknowledged as it goes.
				if pending = append(pending, it.ID); len(pending) < 50 {
					continue
				}
			case <-time.After(20 * time.Millisecond):
			case <-ctx.Done():
				return
			}
			if len(pending) > 0 {
				if err := w.ack(ctx, pending...); err != nil && ctx.Err() == nil {
					t.Errorf("ack: %v", err)
					return
				}
				pending = nil
			}
		}
	}()
	return a
}

// wait returns when id arrived, waiting up to timeout.
func (a *arrivals) wait(id string, timeout time.Duration) (time.Time, bool) {
	deadline := time.Now().Add(timeout)
	stop := time.AfterFunc(timeout, func() { a.mu.Lock(); a.cond.Broadcast(); a.mu.Unlock() })
	defer stop.Stop()
	a.mu.Lock()
	defer a.mu.Unlock()
	for {
		if at, ok := a.at[id]; ok {
			return at, true
		}
		if time.Now().After(deadline) {
			return time.Time{}, false
		}
		a.cond.Wait()
	}
}

func (a *arrivals) count() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.at)
}

// TestDeliveryLoadPushLatency: ana's agent sends lee a meeting request
// over NLIP (a keep-alive HTTP client), and lee's agent watches his inbox
// on the NLIP WebSocket; one round is from the send's first byte until
// the item is pushed to lee's agent, serially (light load), interleaved
// one for one with a round trip of the same request to the loopback echo.
func TestDeliveryLoadPushLatency(t *testing.T) {
	skipUnlessLoad(t)
	n := loadParam(t, "ALPD_LOAD_N", 1000, 10)
	const warmup = 100
	d := startLoadBroker(t)
	d.waitDelivered(t, d.anaPAT, "meeting.request/v1", meetingFor("lee@example.org", -1))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	w := watchInbox(t, d.addr, d.lee.pat(t, "alp.read"))
	got := followPushes(t, ctx, w)
	echo := echoServer(t)
	sendClient := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 1}, Timeout: 10 * time.Second}
	echoClient := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 1}, Timeout: 10 * time.Second}

	var pushes, answers, echoes []time.Duration
	for i := range warmup + n {
		msg := nlipSend("lee@"+splitTenant, "meeting.request/v1", meetingFor("lee@example.org", i))
		start := time.Now()
		id, err := postNLIP(sendClient, d.addr, d.anaPAT, msg)
		if err != nil {
			t.Fatal(err)
		}
		answered := time.Since(start)
		at, ok := got.wait(id, 10*time.Second)
		if !ok {
			t.Fatalf("round %d: %s not pushed within 10s", i, id)
		}
		e, err := echoOnce(echoClient, echo.URL+"/nlip/", msg)
		if err != nil {
			t.Fatal(err)
		}
		if i >= warmup {
			pushes = append(pushes, at.Sub(start))
			answers = append(answers, answered)
			echoes = append(echoes, e)
		}
	}
	t.Logf("%d serial rounds after %d warm-up; one sender (PAT, NLIP HTTP), one recipient agent (NLIP WebSocket, acks in batches)", n, warmup)
	logLatency(t, []string{"send → pushed to lee's WebSocket", "send → sender's answer (decided)", "loopback echo"},
		[][3]time.Duration{quantiles(pushes), quantiles(answers), quantiles(echoes)})
	cancel()
	d.stop(t)
}

// startLoadBroker is startDeliveryBroker with loadSections.
func startLoadBroker(t *testing.T) *deliveryBroker {
	t.Helper()
	d := newDeliveryBroker(t, nil, loadSections())
	d.ana, d.lee = signIn(t, d.addr, splitTenant, "ana"), signIn(t, d.addr, splitTenant, "lee")
	d.anaPAT = d.ana.pat(t, "alp.send", "alp.read")
	connectPeople(t, d.addr, d.anaPAT, "lee@"+splitTenant, d.lee)
	return d
}

// loadPair is a sending agent and the recipient agent it writes to.
type loadPair struct {
	from, to           string // addresses
	fromToken, toToken string
}

// loadPairs signs in n pairs of people (s<i>, r<i>), gives each a
// personal access token and connects each pair.
func loadPairs(t *testing.T, d *deliveryBroker, n int) []loadPair {
	t.Helper()
	pairs := make([]loadPair, n)
	for i := range pairs {
		s, r := signIn(t, d.addr, splitTenant, fmt.Sprintf("s%d", i)), signIn(t, d.addr, splitTenant, fmt.Sprintf("r%d", i))
		p := loadPair{from: fmt.Sprintf("s%d@%s", i, splitTenant), to: fmt.Sprintf("r%d@%s", i, splitTenant),
			fromToken: s.pat(t, "alp.send", "alp.read"), toToken: r.pat(t, "alp.send", "alp.read")}
		connectPeople(t, d.addr, p.fromToken, p.to, r)
		pairs[i] = p
	}
	for _, p := range pairs {
		waitDelivered(t, d.addr, p.fromToken, p.to, "meeting.request/v1", meetingFor(p.to, -1))
	}
	return pairs
}

// loadSections configure a broker for the measurements: rates out of
// reach, no cap on the connections of one client address (64 agents'
// come from 127.0.0.1, as from behind a load balancer), and the
// embedded NATS's sync interval of ALPD_LOAD_SYNC_INTERVAL.
func loadSections() map[string]any {
	interval := config.SyncAlways
	if v := os.Getenv("ALPD_LOAD_SYNC_INTERVAL"); v != "" {
		interval = v
	}
	return map[string]any{"nlip": unlimitedNLIP, "http": map[string]any{"max_conns_per_address": 0},
		"nats": map[string]any{"sync_interval": interval}}
}

// cpuMark is alpd's CPU time used so far (0 where /proc is not there).
func (d *deliveryBroker) cpuMark() time.Duration {
	d.mu.Lock()
	defer d.mu.Unlock()
	c, _ := cpuTime(d.p.cmd.Process.Pid)
	return c
}

func loadUsers(n int) []string {
	var users []string
	for i := range n {
		users = append(users, fmt.Sprintf("s%d", i), fmt.Sprintf("r%d", i))
	}
	return users
}

// TestDeliveryLoadThroughput: 64 agents at once — 32 senders, each a
// person's agent sending its own connected colleague meeting requests
// back to back over NLIP, and the 32 recipients' agents watching their
// inboxes on NLIP WebSockets (acknowledging in batches). Items delivered
// per second, from the first send until the last push, beside the echo's
// requests per second with 32 clients in the same run.
func TestDeliveryLoadThroughput(t *testing.T) {
	skipUnlessLoad(t)
	const pairsN = 32
	per := loadParam(t, "ALPD_LOAD_PER_AGENT", 40, 1)
	d := newDeliveryBroker(t, loadUsers(pairsN), loadSections())
	pairs := loadPairs(t, d, pairsN)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	got := make([]*arrivals, pairsN)
	for i, p := range pairs {
		got[i] = followPushes(t, ctx, watchInbox(t, d.addr, p.toToken))
	}
	// The first item of each pair (waitDelivered) is pushed on connect.
	for i := range pairs {
		for deadline := time.Now().Add(10 * time.Second); got[i].count() < 1; time.Sleep(10 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("pair %d: the first item was not pushed", i)
			}
		}
	}

	cpuStart, start := d.cpuMark(), time.Now()
	ids := make([][]string, pairsN)
	errs := make([]error, pairsN)
	var wg sync.WaitGroup
	for i, p := range pairs {
		wg.Go(func() {
			c := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 1}, Timeout: 10 * time.Second}
			for j := range per {
				id, err := postNLIP(c, d.addr, p.fromToken, nlipSend(p.to, "meeting.request/v1", meetingFor(p.to, j)))
				if err != nil {
					errs[i] = err
					return
				}
				ids[i] = append(ids[i], id)
			}
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	sent := time.Since(start)
	var last time.Time
	for i := range pairs {
		for _, id := range ids[i] {
			at, ok := got[i].wait(id, 30*time.Second)
			if !ok {
				t.Fatalf("pair %d: %s not pushed within 30s", i, id)
			}
			if at.After(last) {
				last = at
			}
		}
	}
	elapsed, cpu := last.Sub(start), d.cpuMark()-cpuStart
	total := pairsN * per
	rate := float64(total) / elapsed.Seconds()
	echo := echoServer(t)
	body := nlipSend(pairs[0].to, "meeting.request/v1", meetingFor(pairs[0].to, 0))
	floor := echoRate(t, echo.URL+"/nlip/", body, pairsN, 200)
	t.Logf("%d items from %d sending agents to %d watching agents (64 agents) in %s (all sends answered at %s)",
		total, pairsN, pairsN, elapsed.Round(time.Millisecond), sent.Round(time.Millisecond))
	t.Logf("delivered end to end: %.0f items/s; loopback echo with %d clients: %.0f req/s; ratio %.4f (the echo is %.0f× faster)",
		rate, pairsN, floor, rate/floor, floor/rate)
	t.Logf("alpd CPU per item delivered: %s (its ledger's work in the background included, until the last item arrived)", cpu/time.Duration(total))
	cancel()
	d.stop(t)
}

// mcpSendArgs are send_message's arguments for a meeting request to.
func mcpSendArgs(to string, n int) map[string]any {
	var body map[string]any
	_ = json.Unmarshal([]byte(meetingFor(to, n)), &body)
	return map[string]any{"to": to, "type": "meeting.request/v1", "body": body}
}

// mcpEchoBody is a tools/call of send_message as it goes on the wire.
func mcpEchoBody(to string) []byte {
	b, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": 7, "method": "tools/call",
		"params": map[string]any{"name": "send_message", "arguments": mcpSendArgs(to, 0)}})
	return b
}

// TestDeliveryLoadMCPLatency: the same rounds through MCP — ana's agent
// calls send_message on its MCP session (the official Go SDK's client),
// lee's agent hears notifications/resources/updated for alp://inbox on
// its session's stream and reads the item with read_item — beside the
// echo of the same tools/call request.
func TestDeliveryLoadMCPLatency(t *testing.T) {
	skipUnlessLoad(t)
	n := loadParam(t, "ALPD_LOAD_N", 1000, 10)
	const warmup = 100
	d := startLoadBroker(t)
	d.waitDelivered(t, d.anaPAT, "meeting.request/v1", meetingFor("lee@example.org", -1))
	sender := connectMCP(t, d.addr, "ana-agent", d.anaPAT)
	reader := connectMCP(t, d.addr, "lee-agent", d.lee.pat(t, "alp.read"))
	var first struct {
		Items []agentItem `json:"items"`
	}
	reader.mustCall(t, "check_inbox", map[string]any{"limit": 100}, &first)
	var ids []string
	for _, it := range first.Items {
		ids = append(ids, it.ID)
	}
	reader.mustCall(t, "ack", map[string]any{"ids": ids}, nil)
	echo := echoServer(t)
	echoClient := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 1}, Timeout: 10 * time.Second}
	body := mcpEchoBody("lee@" + splitTenant)

	var news, reads, answers, echoes []time.Duration
	for i := range warmup + n {
		select {
		case <-reader.news:
		default:
		}
		start := time.Now()
		var sent struct {
			EnvelopeID string `json:"envelope_id"`
			Outcome    string `json:"outcome"`
		}
		sender.mustCall(t, "send_message", mcpSendArgs("lee@"+splitTenant, i), &sent)
		answered := time.Since(start)
		var heard time.Time
		select {
		case heard = <-reader.news:
		case <-time.After(10 * time.Second):
			t.Fatalf("round %d: no news of %s within 10s", i, sent.EnvelopeID)
		}
		var it agentItem
		reader.mustCall(t, "read_item", map[string]any{"id": sent.EnvelopeID}, &it)
		read := time.Since(start)
		reader.mustCall(t, "ack", map[string]any{"ids": []string{sent.EnvelopeID}}, nil)
		e, err := echoOnce(echoClient, echo.URL+"/mcp", body)
		if err != nil {
			t.Fatal(err)
		}
		if i >= warmup {
			news = append(news, heard.Sub(start))
			reads = append(reads, read)
			answers = append(answers, answered)
			echoes = append(echoes, e)
		}
	}
	t.Logf("%d serial rounds after %d warm-up; one sending MCP session, one reading MCP session (subscribed to alp://inbox)", n, warmup)
	logLatency(t, []string{"send_message → news on lee's stream", "send_message → read_item answered", "send_message answered (decided)", "loopback echo"},
		[][3]time.Duration{quantiles(news), quantiles(reads), quantiles(answers), quantiles(echoes)})
	_, _ = sender.s.Close(), reader.s.Close()
	d.stop(t)
}

// TestDeliveryLoadMCPThroughput: 64 MCP sessions at once — 32 agents
// calling send_message back to back, each to its own connected colleague,
// whose 32 agents read their inboxes on their own sessions when told
// (check_inbox, then ack). Items delivered per second, from the first
// send until the last is read, beside the echo of the same tools/call
// with 32 clients.
func TestDeliveryLoadMCPThroughput(t *testing.T) {
	skipUnlessLoad(t)
	const pairsN = 32
	per := loadParam(t, "ALPD_LOAD_PER_AGENT", 40, 1)
	d := newDeliveryBroker(t, loadUsers(pairsN), loadSections())
	pairs := loadPairs(t, d, pairsN)
	senders := make([]*mcpAgent, pairsN)
	readers := make([]*mcpAgent, pairsN)
	for i, p := range pairs {
		senders[i] = connectMCP(t, d.addr, fmt.Sprintf("s%d-agent", i), p.fromToken)
		readers[i] = connectMCP(t, d.addr, fmt.Sprintf("r%d-agent", i), p.toToken)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	got := make([]*arrivals, pairsN)
	var reading sync.WaitGroup
	readErrs := make([]error, pairsN)
	for i, r := range readers {
		got[i] = &arrivals{at: map[string]time.Time{}}
		got[i].cond = sync.NewCond(&got[i].mu)
		reading.Go(func() {
			for ctx.Err() == nil {
				var page struct {
					Items []agentItem `json:"items"`
				}
				if err := r.call(ctx, "check_inbox", map[string]any{"limit": 100}, &page); err != nil {
					if ctx.Err() == nil {
						readErrs[i] = err
					}
					return
				}
				var ids []string
				now := time.Now()
				got[i].mu.Lock()
				for _, it := range page.Items {
					if _, ok := got[i].at[it.ID]; !ok {
						got[i].at[it.ID] = now
					}
					ids = append(ids, it.ID)
				}
				got[i].cond.Broadcast()
				got[i].mu.Unlock()
				if len(ids) > 0 {
					if err := r.call(ctx, "ack", map[string]any{"ids": ids}, nil); err != nil && ctx.Err() == nil {
						readErrs[i] = err
						return
					}
					continue
				}
				// Nothing waiting: until the session hears of new
				// items (or a while, should news be coalesced away).
				select {
				case <-r.news:
				case <-time.After(250 * time.Millisecond):
				case <-ctx.Done():
				}
			}
		})
	}

	cpuStart, start := d.cpuMark(), time.Now()
	ids := make([][]string, pairsN)
	errs := make([]error, pairsN)
	var wg sync.WaitGroup
	for i, p := range pairs {
		wg.Go(func() {
			for j := range per {
				var sent struct {
					EnvelopeID string `json:"envelope_id"`
				}
				if err := senders[i].call(ctx, "send_message", mcpSendArgs(p.to, j), &sent); err != nil {
					errs[i] = err
					return
				}
				ids[i] = append(ids[i], sent.EnvelopeID)
			}
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	sent := time.Since(start)
	var last time.Time
	for i := range pairs {
		for _, id := range ids[i] {
			at, ok := got[i].wait(id, 30*time.Second)
			if !ok {
				t.Fatalf("pair %d: %s not read within 30s (reader: %v)", i, id, readErrs[i])
			}
			if at.After(last) {
				last = at
			}
		}
	}
	cancel()
	reading.Wait()
	if err := errors.Join(readErrs...); err != nil {
		t.Fatal(err)
	}
	elapsed, cpu := last.Sub(start), d.cpuMark()-cpuStart
	total := pairsN * per
	rate := float64(total) / elapsed.Seconds()
	echo := echoServer(t)
	floor := echoRate(t, echo.URL+"/mcp", mcpEchoBody(pairs[0].to), pairsN, 200)
	t.Logf("%d items from %d sending MCP sessions to %d reading MCP sessions (64 agents) in %s (all send_message answered at %s)",
		total, pairsN, pairsN, elapsed.Round(time.Millisecond), sent.Round(time.Millisecond))
	t.Logf("delivered end to end: %.0f items/s; loopback echo with %d clients: %.0f req/s; ratio %.4f (the echo is %.0f× faster)",
		rate, pairsN, floor, rate/floor, floor/rate)
	t.Logf("alpd CPU per item delivered: %s (its ledger's work in the background included, until the last item arrived)", cpu/time.Duration(total))
	for i := range pairs {
		_, _ = senders[i].s.Close(), readers[i].s.Close()
	}
	d.stop(t)
}
