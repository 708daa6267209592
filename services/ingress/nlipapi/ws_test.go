package nlipapi_test

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/alpd-project/alpd/internal/nlip"
	"github.com/alpd-project/alpd/services/ingress/nlipapi"
)

func (r *rig) dial(t *testing.T, path, token, origin string) (*websocket.Conn, *http.Response, error) {
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
	c, resp, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(r.srv.URL, "http")+path, &websocket.DialOptions{HTTPHeader: h})
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
	r := newRig(t, rigOptions{nlip: nlipapi.Config{WSIdleTimeout: 300 * time.Millisecond, WSMessageRate: nlipapi.Rate{Limit: 0.01, Burst: 1}}})
	c, _, err := r.dial(t, "/nlip/ws/text", r.token, "")
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
