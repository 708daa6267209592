package nlipapi

import (
	"errors"
	"io"
	"net/http"

	"github.com/alpd-project/alpd/internal/httpjson"
	"github.com/alpd-project/alpd/internal/nlip"
)

// request is one NLIP request as far as the door could read it. Every
// answer to it, on HTTP and WebSocket, success or error, is finished by
// reply, which echoes the request's tokens: ECMA-430 §6.2 wants "the same
// submessage" back in every response, so no path may answer without them.
type request struct {
	// media is the encoding of the answer.
	media string
	// msg is the decoded message; nil when there is none or it is not
	// valid NLIP.
	msg *nlip.Message
	// unsupported refuses a body of another media type (not read);
	// refused, a body that could not be read or is not valid NLIP.
	unsupported, refused *httpjson.Error
	// tokens are what every answer echoes: msg's tokens, or those of an
	// invalid message that were read whole before its problem.
	tokens []nlip.Submessage
}

// unread is the request of an answer given before (or instead of) reading
// a message: a GET, a body refused unread. It has no tokens to echo.
func unread(media string) *request { return &request{media: media} }

// reply is m as the answer to q: a copy with q's tokens added.
func (q *request) reply(m *nlip.Message) *nlip.Message {
	out := m.Clone()
	nlip.EchoTokenParts(q.tokens, out)
	return out
}

// decodeRequest decodes one NLIP message's bytes (an HTTP body, a
// WebSocket message); a message it refuses keeps the tokens it still has.
func decodeRequest(media string, data []byte, lim nlip.Limits) *request {
	q := &request{media: media}
	m, err := decode(media, data, lim)
	if err != nil {
		q.refused = classify(err)
		if media == mediaCBOR {
			q.tokens = nlip.TokensOfCBOR(data, lim)
		} else {
			q.tokens = nlip.TokensOfJSON(data, lim)
		}
		return q
	}
	q.msg, q.tokens = m, m.Tokens()
	return q
}

// readRequest reads and decodes the body of an NLIP message request. It
// runs before anything else is checked, the credential included, so that
// every answer can echo the tokens. The route's body limit (httproute, the
// configured message size) already refused a body announced as too large
// unread, and cuts one that turns out too large.
func (a *API) readRequest(r *http.Request) *request {
	media, aerr := requestMedia(r)
	if aerr != nil {
		q := unread(replyMedia(r))
		q.unsupported = aerr
		return q
	}
	data, err := io.ReadAll(r.Body)
	if err != nil {
		q := unread(media)
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			q.refused = newError(http.StatusRequestEntityTooLarge, "too_large", "the NLIP message is larger than %d bytes", mbe.Limit)
		} else {
			q.refused = newError(http.StatusBadRequest, "unreadable_body", "the request body could not be read")
		}
		return q
	}
	return decodeRequest(media, data, a.cfg.Message)
}

// write answers an HTTP request with m, finished as the answer to q, with
// the CORS headers r's origin may have.
func (a *API) write(w http.ResponseWriter, r *http.Request, q *request, status int, m *nlip.Message) {
	a.allowOrigin(w.Header(), r)
	body, err := encode(q.media, q.reply(m))
	if err != nil {
		// Echoed tokens can take a reply past what NLIP allows (a request
		// of 256 tokens leaves no room for the answer's own parts): the
		// answer without them beats none.
		body, err = encode(q.media, m)
	}
	if err != nil {
		// Our own replies always encode; if one does not, say so plainly.
		http.Error(w, "internal error encoding the NLIP reply", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", q.media)
	httpjson.NoStore(w.Header())
	w.WriteHeader(status)
	_, _ = w.Write(body)
}

// fail answers an HTTP request with e, as an NLIP error message (its
// headers too: Retry-After, WWW-Authenticate).
func (a *API) fail(w http.ResponseWriter, r *http.Request, q *request, e *httpjson.Error) {
	e.SetHeaders(w.Header())
	a.write(w, r, q, e.Status, errorMessage(e))
}
