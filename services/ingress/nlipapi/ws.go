package nlipapi

import (
	"context"
	"errors"
	"io"
	"net/http"
	"sync"
	"time"

	"github.com/coder/websocket"
	"golang.org/x/time/rate"

	"github.com/alpd-project/alpd/internal/httpjson"
	"github.com/alpd-project/alpd/internal/nlip"
	"github.com/alpd-project/alpd/services/ingress"
)

// cborFallback is ECMA-432 §11's answer to a frame that is not CBOR.
const cborFallback = "CBOR decoding failed. Fallback to text recommended."

// serveWebSocket is GET /nlip/ws (text=false: one CBOR NLIP message per
// binary frame, ECMA-432) and /nlip/ws/text (one JSON NLIP message per text
// frame, the standard's fallback). Only bearer authentication: no cookies,
// so a page on another origin cannot ride a person's session; browser
// origins must still be allowed. A credential with alp.read also gets the
// person's inbox pushed (push.go).
func (a *API) serveWebSocket(w http.ResponseWriter, r *http.Request, text bool) {
	// The handshake is a GET: no message, no tokens to echo.
	q := unread(replyMedia(r))
	if r.Method != http.MethodGet {
		w.Header().Set("Allow", http.MethodGet)
		a.fail(w, r, q, newError(http.StatusMethodNotAllowed, "method_not_allowed", "open the NLIP WebSocket with GET"))
		return
	}
	// Requests without Origin are not from a browser.
	if origin := r.Header.Get("Origin"); origin != "" && !a.originAllowed(r) {
		a.fail(w, r, q, newError(http.StatusForbidden, "origin_not_allowed", "WebSocket connections from origin %q are not allowed", origin))
		return
	}
	snd, aerr := a.authenticate(r)
	if aerr != nil {
		a.fail(w, r, q, aerr)
		return
	}
	release, aerr := a.ws.admit(snd)
	if aerr != nil {
		a.fail(w, r, q, aerr)
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
		rate:     rate.NewLimiter(rate.Limit(a.cfg.WSMessageRate.Limit), a.cfg.WSMessageRate.Burst),
		pongWait: a.cfg.WSWriteTimeout + a.decisionWait()}
	if text {
		conn.frame, conn.media = websocket.MessageText, mediaJSON
	}
	ctx, cancel := context.WithCancel(r.Context())
	var pusher sync.WaitGroup
	if a.door.MayRead(snd) == nil {
		conn.watching = true
		pusher.Go(func() { conn.push(ctx, ingress.InboxAgent(snd)) })
	}
	conn.serve(ctx)
	cancel()
	pusher.Wait()
}

// decisionWait is how long a send on a WebSocket may wait for policy's
// decision, while the connection reads nothing.
func (a *API) decisionWait() time.Duration { return a.door.DecisionWait() }

// wsConn is one agent's WebSocket.
type wsConn struct {
	api *API
	c   *websocket.Conn
	// frame and media: binary CBOR on /nlip/ws, text JSON on /nlip/ws/text.
	frame         websocket.MessageType
	media         string
	authorization string
	rate          *rate.Limiter
	// watching: the inbox is pushed (push.go), whose pings keep the
	// connection instead of the idle timeout. pongWait bounds waiting for
	// the agent to show it read what was pushed.
	watching bool
	pongWait time.Duration
	// checked is when the pusher last found the credential valid (its
	// goroutine's alone).
	checked time.Time
}

func (w *wsConn) serve(ctx context.Context) {
	for {
		// Closing from a timer (not a read deadline, which would drop the
		// connection without a close frame) tells the agent why. A
		// connection that only listens to pushes sends nothing: the
		// pusher's pings keep it instead.
		idle := time.AfterFunc(w.api.cfg.WSIdleTimeout, func() {
			if !w.watching {
				w.c.Close(websocket.StatusPolicyViolation, "idle timeout")
			}
		})
		typ, r, err := w.c.Reader(ctx)
		idle.Stop()
		if err != nil {
			// Closed by the agent or the idle timer: nothing more to say.
			return
		}
		q, reply, closeWith, err := w.handle(ctx, typ, r)
		if err != nil {
			// The connection failed mid-message: closed by the agent, the
			// read timer, or the library after a frame over the read
			// limit (1009).
			return
		}
		if reply == nil {
			continue // answered already
		}
		if err := w.write(ctx, q, reply); err != nil {
			return
		}
		if closeWith != "" {
			w.c.Close(websocket.StatusPolicyViolation, closeWith)
			return
		}
	}
}

// handle answers one message, whose first frame has arrived: the reply to
// q. closeWith, when set, ends the connection after the reply (the
// credential no longer holds); a nil reply was sent already; an error
// means the connection is gone. A message refused on its first frame is
// never read, so its answer has no tokens to echo.
func (w *wsConn) handle(ctx context.Context, typ websocket.MessageType, r io.Reader) (q *request, reply *nlip.Message, closeWith string, err error) {
	// Once begun, a message must arrive whole in time: a sender that
	// trickles a large frame holds a buffer, or at least a connection.
	slow := time.AfterFunc(w.api.cfg.WSReadTimeout, func() {
		w.c.Close(websocket.StatusPolicyViolation, "message not received within "+w.api.cfg.WSReadTimeout.String())
	})
	defer slow.Stop()
	in, err := w.receive(ctx, typ, r)
	if err != nil {
		return nil, nil, "", err
	}
	if in.refused != nil {
		q := unread(w.media)
		if in.closeWith != "" {
			return q, errorMessage(in.refused), in.closeWith, nil
		}
		// Answer at once, then drop the rest of the message as it comes,
		// keeping none of it.
		if err := w.write(ctx, q, errorMessage(in.refused)); err != nil {
			return nil, nil, "", err
		}
		return nil, nil, "", w.api.ws.discard(r)
	}
	slow.Stop()
	defer w.api.ws.give(personKey(in.snd), in.held)
	q = decodeRequest(w.media, in.data, w.api.cfg.Message)
	if e := q.refused; e != nil {
		if w.media == mediaCBOR {
			e.Message = cborFallback + " (" + e.Message + ")"
		}
		return q, errorMessage(e), "", nil
	}
	reply, _, aerr := w.api.exchange(ctx, in.snd, q.msg, "")
	if aerr != nil {
		return q, errorMessage(aerr), "", nil
	}
	return q, reply, "", nil
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

// write sends m as the answer to q: with q's tokens, as on HTTP
// (API.write).
func (w *wsConn) write(ctx context.Context, q *request, m *nlip.Message) error {
	data, err := encode(w.media, q.reply(m))
	if err != nil {
		// Without the echo rather than not at all (API.write).
		if data, err = encode(w.media, m); err != nil {
			return err
		}
	}
	wctx, cancel := context.WithTimeout(ctx, w.api.cfg.WSWriteTimeout)
	defer cancel()
	return w.c.Write(wctx, w.frame, data)
}
