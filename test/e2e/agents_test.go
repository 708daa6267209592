package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/alpd-project/alpd/internal/testkit"
	"github.com/alpd-project/alpd/services/ingress/mcpapi"

	"github.com/alpd-project/alpd/test/internal/alpdtest"
)

// The agents of issue 13's deliveries, as a person's agents reach their
// broker: over the NLIP WebSocket (pushed items), MCP (the official Go
// SDK's client on streamable HTTP) and REST (/v1/agent/). Each reads
// through the door's public interface only.

// companyAgent is what an organization's admin and one of its people do
// to give the person a company-class agent: the admin registers a
// confidential client named name (POST /v1/admin/clients), and the agent
// runs the authorization code flow with PKCE S256 and the resource
// indicator for the person (company agents skip the consent page),
// authenticating with the client's secret. It returns the access token.
func companyAgent(t *testing.T, admin, person *webSession, name string, scopes ...string) string {
	t.Helper()
	return alpdtest.CompanyAgent(t, admin.Session, person.Session, name, scopes...)
}

// bearerGet is GET addr+path with a bearer token, decoding a JSON answer
// into v (when not nil and the status is 2xx).
func bearerGet(t *testing.T, addr, path, token string, v any) (int, []byte) {
	t.Helper()
	return bearerDo(t, http.MethodGet, addr, path, token, nil, v)
}

// bearerPost is POST addr+path with a bearer token and body as JSON.
func bearerPost(t *testing.T, addr, path, token string, body, v any) (int, []byte) {
	t.Helper()
	return bearerDo(t, http.MethodPost, addr, path, token, body, v)
}

func bearerDo(t *testing.T, method, addr, path, token string, body, v any) (int, []byte) {
	t.Helper()
	status, raw, err := tryBearer(context.Background(), method, addr, path, token, body)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	if v != nil && status < 300 {
		if err := json.Unmarshal(raw, v); err != nil {
			t.Fatalf("%s %s: %v: %s", method, path, err, raw)
		}
	}
	return status, raw
}

// tryBearer is one request with a bearer token (body, when not nil, as
// JSON); unlike bearerDo it reports a failed connection instead of failing
// the test, for clients that retry while the broker restarts.
func tryBearer(ctx context.Context, method, addr, path, token string, body any) (int, []byte, error) {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return 0, nil, err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, "http://"+addr+path, rd)
	if err != nil {
		return 0, nil, err
	}
	req.Header.Set("Authorization", "Bearer "+token)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := httpClient.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	return resp.StatusCode, raw, err
}

// problem is an RFC 9457 answer as an agent reads it.
type problem struct {
	Status  int    `json:"status"`
	Code    string `json:"code"`
	Detail  string `json:"detail"`
	Pointer string `json:"pointer"`
}

func problemOf(raw []byte) problem {
	var p problem
	_ = json.Unmarshal(raw, &p)
	return p
}

// agentItem is an inbox item as every door hands it to an agent: REST and
// MCP as one object, NLIP as the alp.item, alp.sender and alp.body parts
// of an item message (see nlipItem).
type agentItem struct {
	ID        string `json:"id"`
	Type      string `json:"type"`
	InReplyTo string `json:"in_reply_to"`
	Outcome   string `json:"outcome"`
	Acked     bool   `json:"acked"`
	Sender    struct {
		Text        string `json:"text"`
		Address     string `json:"address"`
		Agent       string `json:"agent"`
		TrustClass  string `json:"trust_class"`
		Attestation string `json:"attestation"`
		VerifiedBy  string `json:"verified_by"`
		OwnAgent    bool   `json:"own_agent"`
	} `json:"sender"`
	Body   map[string]any `json:"body"`
	Fields []struct {
		Pointer string `json:"pointer"`
		Class   string `json:"class"`
		Verdict string `json:"verdict"`
	} `json:"fields"`
	Held []heldNotice `json:"held"`
	// Line is the sender line of the item's text (the NLIP message's
	// content, the REST item's text): its second line.
	Line string `json:"-"`
	Text string `json:"text"`
	// At is when a pushed item was read off the WebSocket.
	At time.Time `json:"-"`
}

// heldNotice tells an agent what waits for its person.
type heldNotice struct {
	ID       string   `json:"id"`
	Kind     string   `json:"kind"`
	Pointers []string `json:"pointers"`
}

// verdict is the item's verdict on pointer ("" when it lists none).
func (it agentItem) verdict(pointer string) string {
	for _, f := range it.Fields {
		if f.Pointer == pointer {
			return f.Verdict
		}
	}
	return ""
}

// textLine is the second line of an item's text: the sender line.
func textLine(text string) string {
	if lines := strings.Split(text, "\n"); len(lines) > 1 {
		return lines[1]
	}
	return ""
}

// nlipItem decodes an NLIP item message (messagetype alp:item).
func nlipItem(raw []byte) (agentItem, error) {
	var m struct {
		MessageType string `json:"messagetype"`
		Content     string `json:"content"`
	}
	var it agentItem
	if err := json.Unmarshal(raw, &m); err != nil || m.MessageType != "alp:item" {
		return it, fmt.Errorf("not an item message (%v): %.300s", err, raw)
	}
	c, ok := submessage(raw, "alp.item")
	if !ok {
		return it, fmt.Errorf("no alp.item: %.300s", raw)
	}
	if err := json.Unmarshal(c, &it); err != nil {
		return it, fmt.Errorf("alp.item: %w", err)
	}
	if c, ok = submessage(raw, "alp.sender"); !ok || json.Unmarshal(c, &it.Sender) != nil {
		return it, fmt.Errorf("no alp.sender: %.300s", raw)
	}
	if c, ok = submessage(raw, "alp.body"); ok {
		if err := json.Unmarshal(c, &it.Body); err != nil {
			return it, fmt.Errorf("alp.body: %w", err)
		}
	}
	it.Text, it.Line = m.Content, textLine(m.Content)
	return it, nil
}

// restItem reads one item over REST, waiting for it to arrive.
func restItem(t *testing.T, addr, token, id string) agentItem {
	t.Helper()
	var it agentItem
	testkit.Eventually(t, 15*time.Second, func() error {
		if status, raw := bearerGet(t, addr, "/v1/agent/inbox/"+id, token, &it); status != http.StatusOK {
			return fmt.Errorf("%d %s", status, raw)
		}
		return nil
	}, "item", id, "over REST")
	it.Line = textLine(it.Text)
	return it
}

// restPage is a page of the REST inbox.
type restPage struct {
	Items []agentItem `json:"items"`
	Next  string      `json:"next"`
}

// restAll is every item of the agent's inbox over REST (acknowledged ones
// too), oldest first.
func restAll(t *testing.T, addr, token string) []agentItem {
	t.Helper()
	var all []agentItem
	after := ""
	for {
		var page restPage
		if status, raw := bearerGet(t, addr, "/v1/agent/inbox?include_acked=true&limit=100&after="+url.QueryEscape(after), token, &page); status != http.StatusOK {
			t.Fatalf("GET /v1/agent/inbox: %d %s", status, raw)
		}
		all = append(all, page.Items...)
		if page.Next == "" {
			return all
		}
		after = page.Next
	}
}

// nlipAll is every item of the agent's inbox over NLIP's GET /nlip/inbox
// (acknowledged ones too), oldest first.
func nlipAll(t *testing.T, addr, token string) []agentItem {
	t.Helper()
	var all []agentItem
	after := ""
	for {
		status, raw := bearerGet(t, addr, "/nlip/inbox?include_acked=true&limit=100&after="+url.QueryEscape(after), token, nil)
		var items []agentItem
		if c, ok := submessage(raw, "alp.items"); status != http.StatusOK || !ok || json.Unmarshal(c, &items) != nil {
			t.Fatalf("GET /nlip/inbox: %d %.500s", status, raw)
		}
		all = append(all, items...)
		var next struct {
			After string `json:"after"`
		}
		if c, ok := submessage(raw, "alp.next"); !ok || json.Unmarshal(c, &next) != nil || next.After == "" {
			return all
		}
		after = next.After
	}
}

// nlipPost posts one NLIP message (JSON) with a bearer token.
func nlipPost(t *testing.T, addr, token string, msg []byte) (int, []byte) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, "http://"+addr+"/nlip/", bytes.NewReader(msg))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := httpClient.Do(req)
	if err != nil {
		t.Fatalf("POST /nlip/: %v", err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, raw
}

// nlipSend is an ALP send as an NLIP message; extra are more submessages
// (JSON objects).
func nlipSend(to, typ, body string, extra ...string) []byte {
	subs := append([]string{
		`{"label":"alp.to","format":"structured","subformat":"uri","content":"acct:` + to + `"}`,
		`{"label":"alp.body","format":"structured","subformat":"json","content":` + body + `}`,
	}, extra...)
	return []byte(`{"messagetype":"alp:` + typ + `","format":"text","subformat":"english","content":"from the e2e test","submessages":[` +
		strings.Join(subs, ",") + `]}`)
}

// nlipAck is an NLIP message acknowledging ids.
func nlipAck(ids ...string) []byte {
	b, _ := json.Marshal(map[string]any{"ids": ids})
	return []byte(`{"format":"text","subformat":"english","content":"ack","submessages":[` +
		`{"label":"alp.ack","format":"structured","subformat":"json","content":` + string(b) + `}]}`)
}

// wsAgent is an agent watching its inbox on the NLIP WebSocket's text
// binding: every frame is read as it comes (so the broker's pings are
// answered), item messages go to items, answers to the agent's own
// messages to replies.
type wsAgent struct {
	c       *websocket.Conn
	items   chan agentItem
	replies chan []byte
	// done is closed when the connection ends; err says why.
	done chan struct{}
	err  error
}

// dialInbox opens the WebSocket at addr with token; it reports a failed
// handshake instead of failing the test.
func dialInbox(ctx context.Context, addr, token string) (*wsAgent, error) {
	dctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	c, resp, err := websocket.Dial(dctx, "ws://"+addr+"/nlip/ws/text",
		&websocket.DialOptions{HTTPHeader: http.Header{"Authorization": {"Bearer " + token}}})
	if err != nil {
		if resp != nil {
			return nil, fmt.Errorf("handshake %d: %w", resp.StatusCode, err)
		}
		return nil, err
	}
	c.SetReadLimit(8 << 20)
	w := &wsAgent{c: c, items: make(chan agentItem, 4096), replies: make(chan []byte, 16), done: make(chan struct{})}
	go func() {
		defer close(w.done)
		for {
			_, data, err := c.Read(context.Background())
			if err != nil {
				w.err = err
				return
			}
			if bytes.Contains(data, []byte(`"alp:item"`)) {
				at := time.Now()
				it, err := nlipItem(data)
				it.At = at
				if err != nil {
					w.err = err
					c.CloseNow()
					return
				}
				w.items <- it
				continue
			}
			select {
			case w.replies <- data:
			default:
				w.err = errors.New("an answer nobody waited for")
				c.CloseNow()
				return
			}
		}
	}()
	return w, nil
}

// watchInbox is dialInbox failing the test on error, closed at cleanup.
func watchInbox(t *testing.T, addr, token string) *wsAgent {
	t.Helper()
	w, err := dialInbox(context.Background(), addr, token)
	if err != nil {
		t.Fatalf("open the NLIP WebSocket: %v", err)
	}
	t.Cleanup(func() { w.c.CloseNow() })
	return w
}

// next is the next pushed item, within timeout.
func (w *wsAgent) next(t *testing.T, timeout time.Duration) agentItem {
	t.Helper()
	select {
	case it := <-w.items:
		return it
	case <-w.done:
		t.Fatalf("the WebSocket ended: %v", w.err)
	case <-time.After(timeout):
		t.Fatalf("nothing pushed within %s", timeout)
	}
	return agentItem{}
}

// until reads pushed items until the one with id, which it returns.
func (w *wsAgent) until(t *testing.T, id string, timeout time.Duration) agentItem {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		if it := w.next(t, time.Until(deadline)); it.ID == id {
			return it
		}
	}
}

// send writes one NLIP message and returns the answer.
func (w *wsAgent) send(ctx context.Context, msg []byte) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	if err := w.c.Write(ctx, websocket.MessageText, msg); err != nil {
		return nil, err
	}
	select {
	case r := <-w.replies:
		return r, nil
	case <-w.done:
		return nil, fmt.Errorf("the WebSocket ended: %w", w.err)
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// ack acknowledges ids on the WebSocket: nil once the broker answered
// that it recorded them.
func (w *wsAgent) ack(ctx context.Context, ids ...string) error {
	reply, err := w.send(ctx, nlipAck(ids...))
	if err != nil {
		return err
	}
	var acked struct {
		IDs []string `json:"ids"`
	}
	if c, ok := submessage(reply, "alp.acked"); !ok || json.Unmarshal(c, &acked) != nil || len(acked.IDs) != len(ids) {
		return fmt.Errorf("ack answered %.400s", reply)
	}
	return nil
}

// bearerTransport adds the agent's token to every request of the MCP
// client, as a connector configured with a token does.
type bearerTransport struct {
	token string
	base  http.RoundTripper
}

func (b bearerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return b.base.RoundTrip(r)
}

// mcpAgent is an MCP session of the official Go SDK's client on /mcp;
// news receives when a notifications/resources/updated of alp://inbox
// arrived (the first since it was last read).
type mcpAgent struct {
	s    *mcp.ClientSession
	news chan time.Time
}

// connectMCP opens an MCP session with token and subscribes to the
// inbox's news.
func connectMCP(t testing.TB, addr, name, token string) *mcpAgent {
	t.Helper()
	a := &mcpAgent{news: make(chan time.Time, 1)}
	client := mcp.NewClient(&mcp.Implementation{Name: name, Version: "e2e"}, &mcp.ClientOptions{
		ResourceUpdatedHandler: func(context.Context, *mcp.ResourceUpdatedNotificationRequest) {
			select {
			case a.news <- time.Now():
			default:
			}
		},
	})
	// Its own connections, as a separate client process has: the
	// session's stream holds one, its calls reuse the others.
	base := http.DefaultTransport.(*http.Transport).Clone()
	base.MaxIdleConnsPerHost = 4
	transport := &mcp.StreamableClientTransport{Endpoint: "http://" + addr + mcpapi.Path,
		HTTPClient: &http.Client{Transport: bearerTransport{token: token, base: base}}}
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	s, err := client.Connect(ctx, transport, nil)
	if err != nil {
		t.Fatalf("MCP session of %s: %v", name, err)
	}
	t.Cleanup(func() { _ = s.Close(); base.CloseIdleConnections() })
	if s.InitializeResult().Instructions != mcpapi.Instructions {
		t.Fatalf("%s's MCP session: instructions %q", name, s.InitializeResult().Instructions)
	}
	if err := s.Subscribe(ctx, &mcp.SubscribeParams{URI: "alp://inbox"}); err != nil {
		t.Fatalf("%s subscribes to alp://inbox: %v", name, err)
	}
	a.s = s
	return a
}

// call calls a tool and decodes its structured result into v; a tool
// error is returned as the error's text (the JSON of the refusal).
func (a *mcpAgent) call(ctx context.Context, tool string, args map[string]any, v any) error {
	ctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	res, err := a.s.CallTool(ctx, &mcp.CallToolParams{Name: tool, Arguments: args})
	if err != nil {
		return err
	}
	if res.IsError {
		var text []string
		for _, c := range res.Content {
			if tc, ok := c.(*mcp.TextContent); ok {
				text = append(text, tc.Text)
			}
		}
		return &toolError{tool: tool, text: strings.Join(text, "\n")}
	}
	raw, err := json.Marshal(res.StructuredContent)
	if err != nil {
		return err
	}
	if v != nil {
		return json.Unmarshal(raw, v)
	}
	return nil
}

// toolError is an MCP tool's refusal: its text is {"error": {…}}.
type toolError struct{ tool, text string }

func (e *toolError) Error() string { return e.tool + ": " + e.text }

// code is the refusal's stable code.
func (e *toolError) code() string {
	var v struct {
		Error problem `json:"error"`
	}
	_ = json.Unmarshal([]byte(e.text), &v)
	return v.Error.Code
}

// mustCall is call failing the test on any error.
func (a *mcpAgent) mustCall(t testing.TB, tool string, args map[string]any, v any) {
	t.Helper()
	if err := a.call(context.Background(), tool, args, v); err != nil {
		t.Fatalf("MCP %s: %v", tool, err)
	}
}

// deliveryBroker is the real alpd (all-in-one, embedded NATS on a
// loopback port) hosting example.org, whose test IdP knows ana (an
// organization admin) and lee; it can be killed and started again on the
// same data directory and addresses.
type deliveryBroker struct {
	b                   bins
	addr, natsAddr      string
	configFile, dataDir string
	mu                  sync.Mutex // guards p across restarts
	p                   *proc
	ana, lee            *webSession
	anaPAT              string
}

// unlimitedNLIP are rate limits out of reach, for tests that send
// thousands of messages in seconds.
var unlimitedNLIP = map[string]any{
	"agent_per_minute": 6_000_000, "agent_burst": 1_000_000,
	"person_per_minute": 6_000_000, "person_burst": 1_000_000,
	"tenant_per_minute": 60_000_000, "tenant_burst": 10_000_000,
	"ws_per_minute": 6_000_000, "ws_burst": 1_000_000,
}

// startDeliveryBroker starts the broker, signs ana and lee in and
// connects them (ana asks, lee accepts on his web session).
func startDeliveryBroker(t *testing.T, nlipConf map[string]any) *deliveryBroker {
	t.Helper()
	var sections map[string]any
	if nlipConf != nil {
		sections = map[string]any{"nlip": nlipConf}
	}
	d := newDeliveryBroker(t, nil, sections)
	d.ana, d.lee = signIn(t, d.addr, splitTenant, "ana"), signIn(t, d.addr, splitTenant, "lee")
	d.anaPAT = d.ana.pat(t, "alp.send", "alp.read")
	connectPeople(t, d.addr, d.anaPAT, "lee@"+splitTenant, d.lee)
	return d
}

// newDeliveryBroker starts the broker; its test IdP knows ana, lee and
// the other users named; sections are more of the configuration file's.
func newDeliveryBroker(t *testing.T, users []string, sections map[string]any) *deliveryBroker {
	t.Helper()
	addrs := freeAddrs(t, 2)
	d := &deliveryBroker{b: binaries(t), addr: addrs[0], natsAddr: addrs[1], dataDir: t.TempDir(),
		configFile: filepath.Join(t.TempDir(), "alpd.yaml")}
	idpUsers := []map[string]any{{"username": "ana", "password": "ana-pw", "roles": []string{"alp.admin"}},
		{"username": "lee", "password": "lee-pw"}}
	for _, u := range users {
		idpUsers = append(idpUsers, map[string]any{"username": u, "password": u + "-pw"})
	}
	conf := map[string]any{
		"broker":   map[string]any{"name": pathBroker, "tenants": []map[string]string{{"domain": splitTenant}}},
		"nats":     map[string]any{"listen": d.natsAddr},
		"identity": map[string]any{"test_idp": map[string]any{"enabled": true, "users": idpUsers}},
	}
	for k, v := range sections {
		if m, ok := v.(map[string]any); ok && k == "nats" {
			m["listen"] = d.natsAddr
		}
		// A section the broker already has (identity) is merged into.
		if m, ok := v.(map[string]any); ok {
			if have, ok := conf[k].(map[string]any); ok {
				for kk, vv := range m {
					have[kk] = vv
				}
				continue
			}
		}
		conf[k] = v
	}
	writeYAML(t, d.configFile, conf)
	d.start(t)
	return d
}

// connectPeople has the agent with senderToken ask recipient (address
// to) for a connection, which recipient accepts on their web session.
func connectPeople(t *testing.T, addr, senderToken, to string, recipient *webSession) {
	t.Helper()
	if r := sendTyped(t, addr, senderToken, to, "connection.request/v1", `{"purpose":"introduction"}`); r.Outcome != "hold" {
		t.Fatalf("connection request to %s: %+v", to, r)
	}
	acceptPending(t, recipient)
}

func (d *deliveryBroker) start(t *testing.T) {
	t.Helper()
	p := startProc(t, "alpd", d.b.alpd, hermeticEnv(), "--config", d.configFile, "--data-dir", d.dataDir, "--http-addr", d.addr)
	waitReady(t, p, d.addr)
	d.mu.Lock()
	d.p = p
	d.mu.Unlock()
}

// kill ends alpd with SIGKILL: no shutdown, no flush.
func (d *deliveryBroker) kill(t *testing.T) {
	t.Helper()
	d.mu.Lock()
	p := d.p
	d.mu.Unlock()
	if err := syscall.Kill(p.cmd.Process.Pid, syscall.SIGKILL); err != nil {
		t.Fatalf("kill -9 alpd: %v", err)
	}
	if _, ok := p.exitCode(10 * time.Second); !ok {
		t.Fatal("alpd still running 10s after SIGKILL")
	}
}

// stop ends alpd with SIGTERM (exit code 0 required).
func (d *deliveryBroker) stop(t *testing.T) {
	t.Helper()
	d.mu.Lock()
	p := d.p
	d.mu.Unlock()
	p.stop(t)
}

// waitDelivered sends typ to lee with token until policy delivers it (the
// acceptance reaches policy a moment after it is written) and returns the
// envelope id.
func (d *deliveryBroker) waitDelivered(t *testing.T, token, typ, body string) string {
	t.Helper()
	return waitDelivered(t, d.addr, token, "lee@"+splitTenant, typ, body)
}

func waitDelivered(t *testing.T, addr, token, to, typ, body string) string {
	t.Helper()
	var a policyAnswer
	testkit.Eventually(t, 15*time.Second, func() error {
		if a = sendTyped(t, addr, token, to, typ, body); a.Outcome != "deliver" && a.Outcome != "deliver_partial" {
			return fmt.Errorf("outcome %s: %+v", a.Outcome, a)
		}
		return nil
	}, "a", typ, "to lee is delivered")
	return a.EnvelopeID
}
