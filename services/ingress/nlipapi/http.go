package nlipapi

import (
	"errors"
	"github.com/alpd-project/alpd/internal/httpjson"
	"net/http"

	"github.com/alpd-project/alpd/services/ingress"
)

// serveMessage is POST /nlip and POST /nlip/ (ECMA-431 names /nlip; the
// reference server and AG2 use /nlip/, and AG2 follows no redirects, so
// both answer directly).
func (a *API) serveMessage(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path != "/nlip" && r.URL.Path != "/nlip/" {
		writeError(w, r, newError(http.StatusNotFound, "not_found", "no NLIP endpoint at %s", r.URL.Path))
		return
	}
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		writeError(w, r, newError(http.StatusMethodNotAllowed, "method_not_allowed", "POST an NLIP message to this endpoint"))
		return
	}
	media, aerr := requestMedia(r)
	if aerr != nil {
		writeError(w, r, aerr)
		return
	}
	snd, aerr := a.authenticate(r)
	if aerr != nil {
		writeError(w, r, aerr)
		return
	}
	m, aerr := a.readMessage(r, media)
	if aerr != nil {
		writeError(w, r, aerr)
		return
	}
	reply, status, aerr := a.exchange(r.Context(), snd, m, r.Header.Get("Idempotency-Key"))
	if aerr != nil {
		writeError(w, r, aerr)
		return
	}
	writeMessage(w, r, status, reply)
}

// serveEnvelope is GET /nlip/envelopes/{id}: the outcome of one of the
// person's envelopes, for agents whose send answered "pending".
func (a *API) serveEnvelope(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet {
		w.Header().Set("Allow", http.MethodGet)
		writeError(w, r, newError(http.StatusMethodNotAllowed, "method_not_allowed", "GET an envelope's outcome"))
		return
	}
	snd, aerr := a.authenticate(r)
	if aerr != nil {
		writeError(w, r, aerr)
		return
	}
	// The id names NATS subjects: parsed as the UUID it is before any use.
	id, err := ingress.ParseEnvelopeID(r.PathValue("id"))
	if err != nil {
		writeError(w, r, classify(err))
		return
	}
	o, err := a.door.Status(r.Context(), snd, id)
	if errors.Is(err, ingress.ErrUnknownEnvelope) {
		writeError(w, r, newError(http.StatusNotFound, "unknown_envelope", "no envelope %s was sent by this person (or it is too old)", id))
		return
	}
	if err != nil {
		writeError(w, r, classify(err))
		return
	}
	writeMessage(w, r, status(o), a.result(o).message())
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
