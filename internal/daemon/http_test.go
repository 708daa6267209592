package daemon

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/alpd-project/alpd/internal/config"
	"github.com/alpd-project/alpd/internal/connlimit"
	"github.com/alpd-project/alpd/internal/httproute"
)

var tenants = []string{"a.example", "b.example"}

// startDaemon runs a whole all-in-one alpd (embedded NATS, test IdP for
// both tenants, so every identity route exists) until the test ends.
func startDaemon(t *testing.T, tweak func(*config.HTTP)) (*Daemon, string) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	_ = l.Close()
	cfg := config.Default()
	cfg.DataDir = t.TempDir()
	cfg.HTTP.Addr = addr
	for _, tn := range tenants {
		cfg.Broker.Tenants = append(cfg.Broker.Tenants, config.Tenant{Domain: tn})
	}
	cfg.Identity.TestIdP = config.TestIdP{Enabled: true, Listen: "127.0.0.1:0",
		Users: []config.TestUser{{Username: "ana", Password: "pw"}}}
	cfg.NLIP.DecisionWait = time.Second
	if tweak != nil {
		tweak(&cfg.HTTP)
	}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	d, err := Complete(ctx, cfg, "", func(string) string { return "" }, slog.New(slog.DiscardHandler))
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("run: %v", err)
		}
	})
	deadline := time.Now().Add(60 * time.Second)
	for {
		resp, err := http.Get("http://" + addr + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("alpd not ready: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	return d, addr
}

var wildcard = regexp.MustCompile(`\{[^}]*\}`)

// concretePath is a path the pattern matches.
func concretePath(pattern string) string {
	return wildcard.ReplaceAllStringFunc(pattern, func(w string) string {
		if w == "{$}" {
			return ""
		}
		return "x"
	})
}

// announce sends only the header of a request announcing length body
// bytes, and reads the answer: the body never follows.
func announce(t *testing.T, addr, method, path string, length int64) (*http.Response, []byte, *bufio.Reader) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	_ = c.SetDeadline(time.Now().Add(15 * time.Second))
	fmt.Fprintf(c, "%s %s HTTP/1.1\r\nHost: %s\r\nContent-Type: application/x-www-form-urlencoded\r\nContent-Length: %d\r\n\r\n",
		method, path, addr, length)
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("%s %s announcing %d bytes: no answer before the body was sent: %v", method, path, length, err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp, body, br
}

// TestEveryRouteHasABodyLimitAndTheServerItsTimeouts walks every HTTP
// route the broker mounts (all services, both tenants): each declares a
// valid caller and body limit, GET routes take none, and a request
// announcing one byte over the limit is refused with 413 before its body
// is sent. The server has every timeout and the per-address cap.
func TestEveryRouteHasABodyLimitAndTheServerItsTimeouts(t *testing.T) {
	// The walk opens one connection per route, faster than the server lets
	// refused ones go (it lingers on a connection it closes with a body
	// unread): more than the default cap per address.
	d, addr := startDaemon(t, func(h *config.HTTP) { h.MaxConnsPerAddress = 1024 })
	c := d.cfg.HTTP
	srv := d.http
	if srv.ReadHeaderTimeout != c.ReadHeaderTimeout || srv.ReadTimeout != c.ReadTimeout || srv.WriteTimeout != c.WriteTimeout ||
		srv.IdleTimeout != c.IdleTimeout || srv.MaxHeaderBytes != c.MaxHeaderBytes {
		t.Errorf("server %+v does not have the configured limits %+v", srv, c)
	}
	if srv.ReadHeaderTimeout <= 0 || srv.ReadTimeout <= 0 || srv.WriteTimeout <= 0 || srv.IdleTimeout <= 0 || srv.MaxHeaderBytes <= 0 {
		t.Errorf("a server timeout or limit is unset: %+v", srv)
	}
	if _, ok := d.httpLis.(*connlimit.Listener); !ok || c.MaxConnsPerAddress <= 0 {
		t.Errorf("the listener (%T) does not cap connections per address (%d)", d.httpLis, c.MaxConnsPerAddress)
	}

	routes := d.broker.Routes()
	keys := map[string]httproute.Route{}
	for _, rt := range routes {
		if err := rt.Check(); err != nil {
			t.Error(err)
		}
		keys[rt.Key()] = rt
	}
	want := []string{"GET /healthz", "GET /readyz", "GET /metrics", "POST /v1/ops/trace", "/signin", "/signout",
		"/signin/callback/{tenant}", "/v1/pats", "/v1/pats/{id}", "/v1/admin/clients", "/nlip", "/nlip/",
		"/nlip/ws", "GET /v1/ledger/export", "POST /v1/ledger/proof/consistency", "/.well-known/oauth-protected-resource",
		"PUT /v1/rules/{party}", "POST /v1/connections/{id}/accept", "PUT /v1/admin/policies/{set}", "PUT /v1/admin/types/{name...}",
		"POST /v1/ops/policy/push"}
	for _, tn := range tenants {
		for _, p := range []string{"/token", "/revoke", "/authorize", "/register", "/consent", "/jwks", "/"} {
			want = append(want, "/oauth/"+tn+p)
		}
		want = append(want, "/.well-known/oauth-authorization-server/oauth/"+tn)
	}
	for _, k := range want {
		if _, ok := keys[k]; !ok {
			t.Errorf("route %q is not mounted", k)
		}
	}
	for _, k := range []string{"/oauth/a.example/token", "/oauth/a.example/revoke", "/oauth/a.example/authorize", "/signout"} {
		if l := keys[k].BodyLimit; l <= 0 || l > 64<<10 {
			t.Errorf("%s: body limit %d, want a small form's", k, l)
		}
	}
	if l := keys["/nlip"].BodyLimit; l != int64(d.cfg.NLIP.MaxMessageBytes) {
		t.Errorf("/nlip: body limit %d, want nlip.max_message_bytes %d", l, d.cfg.NLIP.MaxMessageBytes)
	}

	claimed := map[string][]string{} // pattern → its routes' methods
	for _, rt := range routes {
		claimed[rt.Pattern] = append(claimed[rt.Pattern], rt.Method)
	}
	for _, rt := range routes {
		method := rt.Method
		if method == "" {
			// A method no route of the pattern claims more specifically.
			for _, m := range []string{http.MethodPut, http.MethodPatch, http.MethodPost, http.MethodDelete} {
				if !slices.Contains(claimed[rt.Pattern], m) {
					method = m
					break
				}
			}
		}
		path := concretePath(rt.Pattern)
		resp, body, _ := announce(t, addr, method, path, rt.Limit()+1)
		if resp.StatusCode != http.StatusRequestEntityTooLarge || !resp.Close {
			t.Errorf("%s %s (route %q, limit %d) with %d bytes announced: %d close=%v %s",
				method, path, rt.Key(), rt.Limit(), rt.Limit()+1, resp.StatusCode, resp.Close, body)
		}
	}
	t.Logf("%d routes walked", len(routes))
}

// TestUnauthenticatedPostsOverTheLimitAreRefusedUnread: the public POST
// routes (the OAuth token, revocation, authorization and registration
// endpoints of each tenant, sign-out) answer a 9 MiB body with 413 while
// only its header has been sent, and close the connection.
func TestUnauthenticatedPostsOverTheLimitAreRefusedUnread(t *testing.T) {
	_, addr := startDaemon(t, nil)
	paths := []string{"/signout"}
	for _, tn := range tenants {
		for _, p := range []string{"/token", "/revoke", "/authorize", "/register"} {
			paths = append(paths, "/oauth/"+tn+p)
		}
	}
	for _, p := range paths {
		resp, body, br := announce(t, addr, http.MethodPost, p, 9<<20)
		if resp.StatusCode != http.StatusRequestEntityTooLarge || !resp.Close {
			t.Errorf("POST %s: %d close=%v %s", p, resp.StatusCode, resp.Close, body)
			continue
		}
		if strings.HasPrefix(p, "/oauth/") && !strings.Contains(string(body), `"error":"invalid_request"`) {
			t.Errorf("POST %s: not an OAuth error: %s", p, body)
		}
		if _, err := br.ReadByte(); err == nil {
			t.Errorf("POST %s: the connection stays open after the refusal", p)
		}
	}
}

// dropped reports whether the server closes c within bound (reading and
// discarding whatever it answers first).
func dropped(c net.Conn, bound time.Duration) error {
	_ = c.SetReadDeadline(time.Now().Add(bound))
	_, err := io.Copy(io.Discard, c)
	if ne, ok := err.(net.Error); ok && ne.Timeout() {
		return fmt.Errorf("still open after %s", bound)
	}
	return nil
}

// TestSlowClientsAreDropped: with small timeouts, a client that stalls in
// its header, one that stalls in its body, an idle keep-alive connection
// and one that never sends anything are all closed by the server; and a
// client address over the connection cap has its extra connection closed.
func TestSlowClientsAreDropped(t *testing.T) {
	const maxConns = 6
	_, addr := startDaemon(t, func(h *config.HTTP) {
		h.ReadHeaderTimeout = 500 * time.Millisecond
		h.ReadTimeout = time.Second
		h.WriteTimeout = 2 * time.Second
		h.IdleTimeout = 500 * time.Millisecond
		h.MaxConnsPerAddress = maxConns
	})
	dial := func() net.Conn {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	conns := map[string]net.Conn{}
	c := dial()
	fmt.Fprintf(c, "POST /oauth/a.example/token HTTP/1.1\r\nHost: %s\r\nContent-Type: applica", addr)
	conns["half a header"] = c
	c = dial()
	fmt.Fprintf(c, "POST /oauth/a.example/token HTTP/1.1\r\nHost: %s\r\nContent-Type: application/x-www-form-urlencoded\r\nContent-Length: 1000\r\n\r\ngrant_type=auth", addr)
	conns["half a body"] = c
	c = dial()
	fmt.Fprintf(c, "GET /healthz HTTP/1.1\r\nHost: %s\r\n\r\n", addr)
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil || resp.StatusCode != http.StatusOK || resp.Close {
		t.Fatalf("keep-alive request: %v %v", resp, err)
	}
	resp.Body.Close()
	conns["idle keep-alive"] = c
	conns["silent"] = dial()
	for what, c := range conns {
		if err := dropped(c, 20*time.Second); err != nil {
			t.Errorf("%s: %v", what, err)
		}
	}

	// The cap: maxConns held connections, then one more.
	for range maxConns {
		dial()
	}
	extra := dial()
	if err := dropped(extra, 20*time.Second); err != nil {
		t.Fatalf("over the cap: %v", err)
	}
	// Once the held ones are dropped (header timeout), /metrics counts the
	// refusal.
	var refused float64
	deadline := time.Now().Add(20 * time.Second)
	for refused == 0 && time.Now().Before(deadline) {
		time.Sleep(100 * time.Millisecond)
		refused = metric(t, addr, "alpd_http_connections_refused_total")
	}
	if refused < 1 {
		t.Fatalf("alpd_http_connections_refused_total = %v after a connection over the cap", refused)
	}
}

// metric reads one unlabelled metric from /metrics (0 when unreachable).
func metric(t *testing.T, addr, name string) float64 {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		return 0
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil && !errors.Is(err, io.EOF) {
		return 0
	}
	for line := range strings.Lines(string(data)) {
		if v, ok := strings.CutPrefix(line, name+" "); ok {
			f, _ := strconv.ParseFloat(strings.TrimSpace(v), 64)
			return f
		}
	}
	return 0
}
