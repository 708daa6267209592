package nlipapi

import (
	"context"
	"net/http"
	"net/url"
	"path"
	"strings"
	"time"

	"github.com/coder/websocket"
	"golang.org/x/time/rate"

	"github.com/alpd-project/alpd/internal/nlip"
)

// writeTimeout bounds sending one reply frame.
const writeTimeout = 10 * time.Second

// cborFallback is ECMA-432 §11's answer to a frame that is not CBOR.
const cborFallback = "CBOR decoding failed. Fallback to text recommended."

// serveWebSocket is GET /nlip/ws (text=false: one CBOR NLIP message per
// binary frame, ECMA-432) and /nlip/ws/text (one JSON NLIP message per text
// frame, the standard's fallback). Only bearer authentication: no cookies,
// so a page on another origin cannot ride a person's session; browser
// origins must still be allowed.
func (a *API) serveWebSocket(w http.ResponseWriter, r *http.Request, text bool) {
	if r.Method != http.MethodGet {
		w.Header().Set("Allow", http.MethodGet)
		writeError(w, r, newError(http.StatusMethodNotAllowed, "method_not_allowed", "open the NLIP WebSocket with GET"))
		return
	}
	if aerr := a.checkOrigin(r); aerr != nil {
		writeError(w, r, aerr)
		return
	}
	if _, aerr := a.authenticate(r); aerr != nil {
		writeError(w, r, aerr)
		return
	}
	// The origin was checked above, with our allow-list and an NLIP error.
	c, err := websocket.Accept(w, r, &websocket.AcceptOptions{InsecureSkipVerify: true})
	if err != nil {
		return // Accept answered the handshake error itself.
	}
	defer c.CloseNow()
	c.SetReadLimit(int64(a.cfg.Message.MaxMessageBytes))
	conn := &wsConn{api: a, c: c, frame: websocket.MessageBinary, media: mediaCBOR, authorization: r.Header.Get("Authorization"),
		rate: rate.NewLimiter(rate.Limit(a.cfg.WSMessageRate.Limit), a.cfg.WSMessageRate.Burst)}
	if text {
		conn.frame, conn.media = websocket.MessageText, mediaJSON
	}
	conn.serve(r.Context())
}

// checkOrigin allows requests without Origin (not from a browser), from
// the broker's own host, and from the configured patterns.
func (a *API) checkOrigin(r *http.Request) *apiError {
	origin := r.Header.Get("Origin")
	if origin == "" {
		return nil
	}
	u, err := url.Parse(origin)
	if err == nil && u.Host != "" {
		if strings.EqualFold(u.Host, r.Host) {
			return nil
		}
		for _, pat := range a.cfg.AllowedOrigins {
			target := u.Host
			if strings.Contains(pat, "://") {
				target = u.Scheme + "://" + u.Host
			}
			if ok, _ := path.Match(strings.ToLower(pat), strings.ToLower(target)); ok {
				return nil
			}
		}
	}
	return newError(http.StatusForbidden, "origin_not_allowed", "WebSocket connections from origin %q are not allowed", origin)
}

// wsConn is one agent's WebSocket.
type wsConn struct {
	api *API
	c   *websocket.Conn
	// frame and media: binary CBOR on /nlip/ws, text JSON on /nlip/ws/text.
	frame         websocket.MessageType
	media         string
	authorization string
	rate          *rate.Limiter
}

func (w *wsConn) serve(ctx context.Context) {
	for {
		// Closing from a timer (not a read deadline, which would drop the
		// connection without a close frame) tells the agent why.
		idle := time.AfterFunc(w.api.cfg.WSIdleTimeout, func() {
			w.c.Close(websocket.StatusPolicyViolation, "idle timeout")
		})
		typ, data, err := w.c.Read(ctx)
		idle.Stop()
		if err != nil {
			// Closed by the agent, the idle timer, or the library after a
			// frame over the read limit (1009): nothing more to say.
			return
		}
		reply, closeWith := w.handle(ctx, typ, data)
		if err := w.write(ctx, reply); err != nil {
			return
		}
		if closeWith != "" {
			w.c.Close(websocket.StatusPolicyViolation, closeWith)
			return
		}
	}
}

// handle answers one frame. closeWith, when set, ends the connection after
// the reply (the credential no longer holds).
func (w *wsConn) handle(ctx context.Context, typ websocket.MessageType, data []byte) (reply *nlip.Message, closeWith string) {
	if typ != w.frame {
		return errorMessage(newError(http.StatusUnsupportedMediaType, "wrong_frame_type",
			"this endpoint takes one NLIP message (%s) per %s frame", w.media, w.frame)), ""
	}
	if !w.rate.Allow() {
		e := newError(http.StatusTooManyRequests, "rate_limited", "too many messages on this connection; slow down")
		e.RetryAfter = 1
		return errorMessage(e), ""
	}
	// Tokens expire and get revoked while a connection lasts: check the
	// credential for every message.
	p, err := w.api.backend.Authenticator().Authenticate(ctx, w.authorization)
	if err != nil {
		return errorMessage(classify(err)), "credential no longer valid"
	}
	if aerr := w.api.limits.allow(p, time.Now()); aerr != nil {
		return errorMessage(aerr), ""
	}
	m, err := decode(w.media, data, w.api.cfg.Message)
	if err != nil {
		e := classify(err)
		if w.media == mediaCBOR {
			e.Message = cborFallback + " (" + e.Message + ")"
		}
		return errorMessage(e), ""
	}
	reply, _, aerr := w.api.exchange(ctx, p, m, "")
	if aerr != nil {
		return errorMessage(aerr), ""
	}
	return reply, ""
}

func (w *wsConn) write(ctx context.Context, m *nlip.Message) error {
	data, err := encode(w.media, m)
	if err != nil {
		return err
	}
	wctx, cancel := context.WithTimeout(ctx, writeTimeout)
	defer cancel()
	return w.c.Write(wctx, w.frame, data)
}
