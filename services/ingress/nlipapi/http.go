package nlipapi

import (
	"errors"
	"net/http"

	"github.com/alpd-project/alpd/internal/httpjson"
	"github.com/alpd-project/alpd/services/ingress"
)

// serveMessage is POST /nlip and POST /nlip/ (ECMA-431 names /nlip; the
// reference server and AG2 use /nlip/, and AG2 follows no redirects, so
// both answer directly). The body is read first, so that every answer
// echoes its tokens; the checks then run in the order the answers rank.
func (a *API) serveMessage(w http.ResponseWriter, r *http.Request) {
	q := a.readRequest(r)
	if r.URL.Path != "/nlip" && r.URL.Path != "/nlip/" {
		a.fail(w, r, q, newError(http.StatusNotFound, "not_found", "no NLIP endpoint at %s", r.URL.Path))
		return
	}
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost+", "+http.MethodOptions)
		a.fail(w, r, q, newError(http.StatusMethodNotAllowed, "method_not_allowed", "POST an NLIP message to this endpoint"))
		return
	}
	if q.unsupported != nil {
		a.fail(w, r, q, q.unsupported)
		return
	}
	snd, aerr := a.authenticate(r)
	if aerr != nil {
		a.fail(w, r, q, aerr)
		return
	}
	if q.refused != nil {
		a.fail(w, r, q, q.refused)
		return
	}
	reply, status, aerr := a.exchange(r.Context(), snd, q.msg, r.Header.Get("Idempotency-Key"))
	if aerr != nil {
		a.fail(w, r, q, aerr)
		return
	}
	a.write(w, r, q, status, reply)
}

// serveEnvelope is GET /nlip/envelopes/{id}: the outcome of one of the
// person's envelopes, for agents whose send answered "pending". A GET
// carries no message, so there are no tokens to echo.
func (a *API) serveEnvelope(w http.ResponseWriter, r *http.Request) {
	q := unread(replyMedia(r))
	if r.Method != http.MethodGet {
		w.Header().Set("Allow", http.MethodGet+", "+http.MethodOptions)
		a.fail(w, r, q, newError(http.StatusMethodNotAllowed, "method_not_allowed", "GET an envelope's outcome"))
		return
	}
	snd, aerr := a.authenticate(r)
	if aerr != nil {
		a.fail(w, r, q, aerr)
		return
	}
	// The id names NATS subjects: parsed as the UUID it is before any use.
	id, err := ingress.ParseEnvelopeID(r.PathValue("id"))
	if err != nil {
		a.fail(w, r, q, classify(err))
		return
	}
	o, err := a.door.Status(r.Context(), snd, id)
	if errors.Is(err, ingress.ErrUnknownEnvelope) {
		a.fail(w, r, q, newError(http.StatusNotFound, "unknown_envelope", "no envelope %s was sent by this person (or it is too old)", id))
		return
	}
	if err != nil {
		a.fail(w, r, q, classify(err))
		return
	}
	a.write(w, r, q, status(o), a.result(o).message())
}

// authenticate admits the request's agent: its bearer credential and the
// rate limits.
func (a *API) authenticate(r *http.Request) (ingress.Sender, *httpjson.Error) {
	snd, err := a.door.Admit(r.Context(), r.Header.Get("Authorization"))
	if err != nil {
		return ingress.Sender{}, classify(err)
	}
	return snd, nil
}
