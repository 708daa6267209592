package nlipapi

import (
	"context"
	"errors"
	"github.com/alpd-project/alpd/internal/httpjson"
	"io"
	"net/http"
	"net/url"
	"path"
	"strings"
	"time"

	"github.com/coder/websocket"
	"golang.org/x/time/rate"

	"github.com/alpd-project/alpd/internal/nlip"
	"github.com/alpd-project/alpd/services/ingress"
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
	snd, aerr := a.authenticate(r)
	if aerr != nil {
		writeError(w, r, aerr)
		return
	}
	release, aerr := a.ws.admit(snd)
	if aerr != nil {
		writeError(w, r, aerr)
		return
	}
	defer release()
	// The origin was checked above, with our allow-list and an NLIP error.
	// Compression stays off (the library's default): inflating would need
	// a window per connection, and a small frame could grow large.
	c, err := websocket.Accept(w, r, &websocket.AcceptOptions{InsecureSkipVerify: true})
	if err != nil {
		return // Accept answered the handshake error itself.
	}
	defer c.CloseNow()
	// The library ends a message past this with 1009; below it, the
	// message's buffer is drawn from the shared budget (wsLimits.read).
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
func (a *API) checkOrigin(r *http.Request) *httpjson.Error {
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
		typ, r, err := w.c.Reader(ctx)
		idle.Stop()
		if err != nil {
			// Closed by the agent or the idle timer: nothing more to say.
			return
		}
		reply, closeWith, err := w.handle(ctx, typ, r)
		if err != nil {
			// The connection failed mid-message: closed by the agent, the
			// read timer, or the library after a frame over the read
			// limit (1009).
			return
		}
		if reply == nil {
			continue // answered already
		}
		if err := w.write(ctx, reply); err != nil {
			return
		}
		if closeWith != "" {
			w.c.Close(websocket.StatusPolicyViolation, closeWith)
			return
		}
	}
}

// handle answers one message, whose first frame has arrived. closeWith,
// when set, ends the connection after the reply (the credential no longer
// holds); a nil reply was sent already; an error means the connection is
// gone.
func (w *wsConn) handle(ctx context.Context, typ websocket.MessageType, r io.Reader) (reply *nlip.Message, closeWith string, err error) {
	// Once begun, a message must arrive whole in time: a sender that
	// trickles a large frame holds a buffer, or at least a connection.
	slow := time.AfterFunc(w.api.cfg.WSReadTimeout, func() {
		w.c.Close(websocket.StatusPolicyViolation, "message not received within "+w.api.cfg.WSReadTimeout.String())
	})
	defer slow.Stop()
	in, err := w.receive(ctx, typ, r)
	if err != nil {
		return nil, "", err
	}
	if in.refused != nil {
		if in.closeWith != "" {
			return errorMessage(in.refused), in.closeWith, nil
		}
		// Answer at once, then drop the rest of the message as it comes,
		// keeping none of it.
		if err := w.write(ctx, errorMessage(in.refused)); err != nil {
			return nil, "", err
		}
		return nil, "", w.api.ws.discard(r)
	}
	slow.Stop()
	defer w.api.ws.give(personKey(in.snd), in.held)
	m, err := decode(w.media, in.data, w.api.cfg.Message)
	if err != nil {
		e := classify(err)
		if w.media == mediaCBOR {
			e.Message = cborFallback + " (" + e.Message + ")"
		}
		return errorMessage(e), "", nil
	}
	reply, _, aerr := w.api.exchange(ctx, in.snd, m, "")
	if aerr != nil {
		return errorMessage(aerr), "", nil
	}
	return reply, "", nil
}

// incoming is one message read whole, or why it was refused.
type incoming struct {
	snd  ingress.Sender
	data []byte
	// held is the buffer taken from the read budget, to give back once
	// the message is handled.
	held int64
	// refused: the answer instead; the rest of the message is unread.
	// closeWith, when set, ends the connection after it.
	refused   *httpjson.Error
	closeWith string
}

// receive reads the message from r after every check that needs only its
// first frame (type, rates, credential), so a refused message is never
// buffered. An error means the connection failed.
func (w *wsConn) receive(ctx context.Context, typ websocket.MessageType, r io.Reader) (incoming, error) {
	if typ != w.frame {
		return incoming{refused: newError(http.StatusUnsupportedMediaType, "wrong_frame_type",
			"this endpoint takes one NLIP message (%s) per %s frame", w.media, w.frame)}, nil
	}
	if !w.rate.Allow() {
		e := newError(http.StatusTooManyRequests, "rate_limited", "too many messages on this connection; slow down")
		e.RetryAfter = 1
		return incoming{refused: e}, nil
	}
	// Tokens expire and get revoked while a connection lasts: check the
	// credential for every message.
	snd, err := w.api.door.Admit(ctx, w.authorization)
	var limited *ingress.RateLimited
	switch {
	case errors.As(err, &limited):
		return incoming{refused: classify(err)}, nil
	case err != nil:
		return incoming{refused: classify(err), closeWith: "credential no longer valid"}, nil
	}
	data, held, err := w.api.ws.read(personKey(snd), r, int64(w.api.cfg.Message.MaxMessageBytes))
	if errors.Is(err, errReadBudget) {
		e := newError(http.StatusServiceUnavailable, "server_busy",
			"the broker is receiving too many large WebSocket messages right now; send this one again in a moment")
		e.RetryAfter = 1
		return incoming{refused: e}, nil
	}
	if err != nil {
		return incoming{}, err
	}
	return incoming{snd: snd, data: data, held: held}, nil
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
