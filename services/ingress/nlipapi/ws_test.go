package nlipapi_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/alpd-project/alpd/internal/accesstoken"
	"github.com/alpd-project/alpd/internal/nlip"
	"github.com/alpd-project/alpd/internal/testkit"
	"github.com/alpd-project/alpd/services/ingress"
	"github.com/alpd-project/alpd/services/ingress/nlipapi"
)

func (r *rig) dial(t *testing.T, path, token, origin string) (*websocket.Conn, *http.Response, error) {
	t.Helper()
	return dialURL(t, r.srv.URL, path, token, origin)
}

// dialURL opens a WebSocket to path on the server at base.
func dialURL(t testing.TB, base, path, token, origin string) (*websocket.Conn, *http.Response, error) {
	t.Helper()
	h := http.Header{}
	if token != "" {
		h.Set("Authorization", "Bearer "+token)
	}
	if origin != "" {
		h.Set("Origin", origin)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, resp, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(base, "http")+path, &websocket.DialOptions{HTTPHeader: h})
	if c != nil {
		t.Cleanup(func() { c.CloseNow() })
	}
	return c, resp, err
}

func exchange(t *testing.T, c *websocket.Conn, typ websocket.MessageType, data []byte) (websocket.MessageType, *nlip.Message) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := c.Write(ctx, typ, data); err != nil {
		t.Fatal(err)
	}
	rt, reply, err := c.Read(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var m *nlip.Message
	if rt == websocket.MessageBinary {
		m, err = nlip.DecodeCBOR(reply, nlip.Limits{})
	} else {
		m, err = nlip.DecodeJSON(reply, nlip.Limits{})
	}
	if err != nil {
		t.Fatalf("reply frame is not NLIP: %v", err)
	}
	return rt, m
}

func TestWebSocketCBORAndText(t *testing.T) {
	r := newRig(t, rigOptions{nlip: nlipapi.Config{AllowedOrigins: []string{"app.example.org"}}})
	m, err := nlip.DecodeJSON(sendJSON("bo@other.example"), nlip.Limits{})
	if err != nil {
		t.Fatal(err)
	}
	cb, err := nlip.EncodeCBOR(m)
	if err != nil {
		t.Fatal(err)
	}
	c, _, err := r.dial(t, "/nlip/ws", r.token, "https://app.example.org")
	if err != nil {
		t.Fatal(err)
	}
	typ, reply := exchange(t, c, websocket.MessageBinary, cb)
	if typ != websocket.MessageBinary || result(t, reply)["outcome"] != "refuse" {
		t.Errorf("CBOR endpoint: %v %+v", typ, reply)
	}
	// Another message on the same connection.
	if _, reply := exchange(t, c, websocket.MessageBinary, cb); result(t, reply)["outcome"] != "refuse" {
		t.Errorf("second message: %+v", reply)
	}
	// Not CBOR: ECMA-432 §11's fallback advice, and the connection stays.
	if _, reply := exchange(t, c, websocket.MessageBinary, []byte{0xff, 0x00}); !strings.Contains(textOf(reply), "CBOR decoding failed") {
		t.Errorf("undecodable frame: %+v", reply)
	}
	// A text frame on the CBOR endpoint.
	if _, reply := exchange(t, c, websocket.MessageText, sendJSON("bo@other.example")); apiError(t, reply)["code"] != "wrong_frame_type" {
		t.Errorf("text frame on /nlip/ws: %+v", reply)
	}

	tc, _, err := r.dial(t, "/nlip/ws/text", r.token, "")
	if err != nil {
		t.Fatal(err)
	}
	typ, reply = exchange(t, tc, websocket.MessageText, sendJSON("bo@other.example"))
	if typ != websocket.MessageText || result(t, reply)["outcome"] != "refuse" {
		t.Errorf("text endpoint: %v %+v", typ, reply)
	}
}

func TestWebSocketRefusals(t *testing.T) {
	r := newRig(t, rigOptions{nlip: nlipapi.Config{Message: nlip.Limits{MaxMessageBytes: 2048}}})
	before := r.sendCount(t)
	if _, resp, err := r.dial(t, "/nlip/ws", r.token, "https://evil.example"); err == nil || resp == nil || resp.StatusCode != http.StatusForbidden {
		t.Errorf("cross-origin WebSocket: err=%v resp=%v", err, resp)
	}
	if _, resp, err := r.dial(t, "/nlip/ws/text", "", ""); err == nil || resp == nil || resp.StatusCode != http.StatusUnauthorized ||
		!strings.Contains(resp.Header.Get("WWW-Authenticate"), "resource_metadata=") {
		t.Errorf("WebSocket without a token: err=%v resp=%v", err, resp)
	}
	c, _, err := r.dial(t, "/nlip/ws/text", r.token, "")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := c.Write(ctx, websocket.MessageText, []byte(strings.Repeat(" ", 4096))); err != nil {
		t.Fatal(err)
	}
	_, _, err = c.Read(ctx)
	if websocket.CloseStatus(err) != websocket.StatusMessageTooBig {
		t.Errorf("oversize frame: %v, want close 1009", err)
	}
	if after := r.sendCount(t); after != before {
		t.Errorf("refused connections wrote %d events", after-before)
	}
}

func TestWebSocketIdleAndRate(t *testing.T) {
	r := newRig(t, rigOptions{nlip: nlipapi.Config{WSIdleTimeout: 300 * time.Millisecond, WSMessageRate: ingress.Rate{Limit: 0.01, Burst: 1}}})
	// Without alp.read: a connection that watches the inbox is kept by
	// pings instead (TestWatchingWebSocketKeepsAlive).
	sendOnly := r.mint(t, "agent-send-only", accesstoken.ClassConsumer, "alp.send")
	c, _, err := r.dial(t, "/nlip/ws/text", sendOnly, "")
	if err != nil {
		t.Fatal(err)
	}
	if _, reply := exchange(t, c, websocket.MessageText, sendJSON("bo@other.example")); result(t, reply)["outcome"] != "refuse" {
		t.Fatalf("first: %+v", reply)
	}
	if _, reply := exchange(t, c, websocket.MessageText, sendJSON("bo@other.example")); apiError(t, reply)["code"] != "rate_limited" {
		t.Errorf("second within the rate: %+v", reply)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, _, err = c.Read(ctx)
	var ce websocket.CloseError
	if !errors.As(err, &ce) || ce.Code != websocket.StatusPolicyViolation || ce.Reason != "idle timeout" {
		t.Errorf("idle connection: %v", err)
	}
}

func textOf(m *nlip.Message) string { s, _ := m.Content.Text(); return s }

// handshakeError is the NLIP error a refused WebSocket handshake answered.
func handshakeError(t *testing.T, resp *http.Response) map[string]any {
	t.Helper()
	if resp == nil || resp.Body == nil {
		t.Fatal("no handshake response")
	}
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	m, err := nlip.DecodeJSON(data, nlip.Limits{})
	if err != nil {
		t.Fatalf("handshake answer %q is not NLIP: %v", data, err)
	}
	return apiError(t, m)
}

// TestWebSocketsCappedPerAgentAndPerson: nothing used to bound how many
// sockets one agent or person holds (issue 10, finding 4).
func TestWebSocketsCappedPerAgentAndPerson(t *testing.T) {
	r := newRig(t, rigOptions{nlip: nlipapi.Config{WSMaxPerAgent: 2, WSMaxPerPerson: 3}})
	first, _, err := r.dial(t, "/nlip/ws/text", r.token, "")
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := r.dial(t, "/nlip/ws/text", r.token, ""); err != nil {
		t.Fatal(err)
	}
	_, resp, err := r.dial(t, "/nlip/ws", r.token, "")
	if err == nil || resp.StatusCode != http.StatusTooManyRequests || handshakeError(t, resp)["code"] != "too_many_websockets" {
		t.Fatalf("third socket of one agent: err=%v resp=%v", err, resp)
	}
	// Another agent of the same person takes the person's last place.
	if _, _, err := r.dial(t, "/nlip/ws/text", r.mint(t, "agent-2", accesstoken.ClassConsumer, "alp.send"), ""); err != nil {
		t.Fatal(err)
	}
	_, resp, err = r.dial(t, "/nlip/ws/text", r.mint(t, "agent-3", accesstoken.ClassConsumer, "alp.send"), "")
	if err == nil || resp.StatusCode != http.StatusTooManyRequests || !strings.Contains(handshakeError(t, resp)["message"].(string), "person") {
		t.Fatalf("fourth socket of one person: err=%v resp=%v", err, resp)
	}
	// A closed socket gives its place back.
	first.Close(websocket.StatusNormalClosure, "")
	testkit.Eventually(t, 5*time.Second, func() error {
		_, _, err := r.dial(t, "/nlip/ws/text", r.token, "")
		return err
	}, "a place after closing a socket")
}

// TestWebSocketRateCheckedBeforeTheMessageIsRead: a message over the rate
// is answered on its first frame, before the rest arrives, and none of it
// is kept (issue 10, finding 4: the rate was checked after reading it all).
func TestWebSocketRateCheckedBeforeTheMessageIsRead(t *testing.T) {
	r := newRig(t, rigOptions{nlip: nlipapi.Config{WSMessageRate: ingress.Rate{Limit: 0.01, Burst: 1}}})
	c, _, err := r.dial(t, "/nlip/ws/text", r.token, "")
	if err != nil {
		t.Fatal(err)
	}
	if _, reply := exchange(t, c, websocket.MessageText, sendJSON("bo@other.example")); result(t, reply)["outcome"] != "refuse" {
		t.Fatalf("first: %+v", reply)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	w, err := c.Writer(ctx, websocket.MessageText)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Write(bytes.Repeat([]byte(" "), 64<<10)); err != nil {
		t.Fatal(err)
	}
	_, data, err := c.Read(ctx)
	if err != nil {
		t.Fatalf("no answer while the message was still being sent: %v", err)
	}
	m, err := nlip.DecodeJSON(data, nlip.Limits{})
	if err != nil || apiError(t, m)["code"] != "rate_limited" {
		t.Fatalf("answer %s: %v", data, err)
	}
	// The rest is dropped as it comes, and the connection goes on.
	if _, err := w.Write(bytes.Repeat([]byte(" "), 64<<10)); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if _, reply := exchange(t, c, websocket.MessageText, sendJSON("bo@other.example")); apiError(t, reply)["code"] != "rate_limited" {
		t.Errorf("next message: %+v", reply)
	}
}

// TestWebSocketMessageMustArriveInTime: a message begun and never finished
// used to hold its buffer until the idle timeout (issue 10, finding 4).
func TestWebSocketMessageMustArriveInTime(t *testing.T) {
	r := newRig(t, rigOptions{nlip: nlipapi.Config{WSReadTimeout: 300 * time.Millisecond, WSIdleTimeout: time.Minute}})
	c, _, err := r.dial(t, "/nlip/ws/text", r.token, "")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	w, err := c.Writer(ctx, websocket.MessageText)
	if err != nil {
		t.Fatal(err)
	}
	// More than the client's write buffer, so the frame is on its way (a
	// frame that does not end the message is not flushed).
	if _, err := w.Write(bytes.Repeat([]byte(" "), 16<<10)); err != nil {
		t.Fatal(err)
	}
	_, _, err = c.Read(ctx)
	var ce websocket.CloseError
	if !errors.As(err, &ce) || ce.Code != websocket.StatusPolicyViolation || !strings.HasPrefix(ce.Reason, "message not received within") {
		t.Errorf("unfinished message: %v, want close 1008 naming the read timeout", err)
	}
}

// TestWebSocketReadBudgetSharedByAll: the buffers of messages being
// received come from one budget; a message that does not fit is answered
// 503 server_busy and dropped as it arrives (issue 10, finding 4).
func TestWebSocketReadBudgetSharedByAll(t *testing.T) {
	r := newRig(t, rigOptions{})
	const limit = 64 << 10
	// The smallest budget allowed: twice the size limit, all of it one
	// person's share.
	api, srv := r.ownAPI(t, nlipapi.Config{Message: nlip.Limits{MaxMessageBytes: limit}, WSReadBuffer: 1})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	partial := func() *websocket.Conn {
		c, _, err := dialURL(t, srv.URL, "/nlip/ws/text", r.token, "")
		if err != nil {
			t.Fatal(err)
		}
		w, err := c.Writer(ctx, websocket.MessageText)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := w.Write(bytes.Repeat([]byte(" "), limit-100)); err != nil {
			t.Fatal(err)
		}
		return c
	}
	// Two messages just under the limit take all of it.
	partial()
	partial()
	testkit.Eventually(t, 5*time.Second, func() error {
		if s := api.WebSocketStats(); s.BufferedBytes != 2*(limit+1) {
			return fmt.Errorf("%+v", s)
		}
		return nil
	}, "two messages buffered")
	// The third finds no room.
	third := partial()
	_, data, err := third.Read(ctx)
	if err != nil {
		t.Fatal(err)
	}
	m, err := nlip.DecodeJSON(data, nlip.Limits{})
	if err != nil || apiError(t, m)["code"] != "server_busy" {
		t.Fatalf("answer %s: %v", data, err)
	}
	if s := api.WebSocketStats(); s.BufferedBytes != 2*(limit+1) || s.Open != 3 {
		t.Errorf("stats %+v: want only the first two messages buffered, all three open", s)
	}
}

// TestWebSocketReadBudgetPersonShare: one person's sockets hold at most a
// quarter of the read budget, so they cannot starve everyone else (issue
// 10, finding 4).
func TestWebSocketReadBudgetPersonShare(t *testing.T) {
	r := newRig(t, rigOptions{})
	const limit = 64 << 10
	// A quarter of 1 MiB is three messages just under the limit, not four.
	api, srv := r.ownAPI(t, nlipapi.Config{Message: nlip.Limits{MaxMessageBytes: limit}, WSReadBuffer: 1 << 20})
	other := r.br.Agent(t, tenant, "sub-cy", "cy@example.org", "agent-cy", "alp.send").Token
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	partial := func(token string) *websocket.Conn {
		c, _, err := dialURL(t, srv.URL, "/nlip/ws/text", token, "")
		if err != nil {
			t.Fatal(err)
		}
		w, err := c.Writer(ctx, websocket.MessageText)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := w.Write(bytes.Repeat([]byte(" "), limit-100)); err != nil {
			t.Fatal(err)
		}
		return c
	}
	for range 3 {
		partial(r.token)
	}
	testkit.Eventually(t, 5*time.Second, func() error {
		if s := api.WebSocketStats(); s.BufferedBytes != 3*(limit+1) {
			return fmt.Errorf("%+v", s)
		}
		return nil
	}, "three messages buffered")
	_, data, err := partial(r.token).Read(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if m, err := nlip.DecodeJSON(data, nlip.Limits{}); err != nil || apiError(t, m)["code"] != "server_busy" {
		t.Fatalf("ana's fourth: %s %v", data, err)
	}
	// Another person still has room.
	partial(other)
	testkit.Eventually(t, 5*time.Second, func() error {
		if s := api.WebSocketStats(); s.BufferedBytes != 4*(limit+1) {
			return fmt.Errorf("%+v", s)
		}
		return nil
	}, "another person's message buffered")
}
