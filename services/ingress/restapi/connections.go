package restapi

import (
	"net/http"
	"time"

	"github.com/alpd-project/alpd/internal/httpjson"
	"github.com/alpd-project/alpd/internal/msgtypes"
	"github.com/alpd-project/alpd/services/ingress"
)

// connectionJSON is one of the person's connections or requests.
type connectionJSON struct {
	ID string `json:"id"`
	// With is the other party's address.
	With string `json:"with"`
	// State: requested, connected, declined or blocked.
	State string `json:"state"`
	// Direction: incoming (the other party asked) or outgoing.
	Direction string     `json:"direction"`
	Requested time.Time  `json:"requested"`
	Decided   *time.Time `json:"decided,omitempty"`
}

// connectionOf is one of the person's connections (ingress.Service.Connections,
// oldest request first) as this API shows it.
func connectionOf(c ingress.Connection) connectionJSON {
	cj := connectionJSON{ID: c.ID, With: c.With, State: c.State, Direction: c.Direction, Requested: c.Requested.UTC()}
	if !c.Decided.IsZero() {
		d := c.Decided.UTC()
		cj.Decided = &d
	}
	return cj
}

func connectionPosition(c connectionJSON) position {
	return position{Kind: "connections", Key: c.ID, Time: c.Requested.UnixNano()}
}

// listConnections is GET /v1/agent/connections.
func (a *API) listConnections(w http.ResponseWriter, r *http.Request) {
	snd, ok := a.admit(w, r, mayRead)
	if !ok {
		return
	}
	p, e := pageOf(r, "connections")
	if e != nil {
		a.fail(w, r, e)
		return
	}
	cs, err := a.s.Connections(r.Context(), snd)
	if err != nil {
		a.fail(w, r, classify(err))
		return
	}
	all := make([]connectionJSON, 0, len(cs))
	for _, c := range cs {
		all = append(all, connectionOf(c))
	}
	httpjson.Write(w, http.StatusOK, window(all, p, connectionPosition))
}

// connectRequest is POST /v1/agent/connections: the body of a
// connection.request/v1 (purpose, message, referred_by) beside the
// recipient, so the type's pointers are the request's.
type connectRequest struct {
	To         string `json:"to"`
	Purpose    string `json:"purpose"`
	Message    string `json:"message,omitempty"`
	ReferredBy string `json:"referred_by,omitempty"`
	From       string `json:"from,omitempty"`
}

// requestConnection is POST /v1/agent/connections: a connection.request/v1
// through the door, like any send (policy holds it for the recipient).
func (a *API) requestConnection(w http.ResponseWriter, r *http.Request) {
	var req connectRequest
	snd, key, ok := a.admitSend(w, r, maySend, &req)
	if !ok {
		return
	}
	env, e := envelopeOf(req.To, msgtypes.ConnectionRequest, ingress.ConnectionRequestBody(req.Purpose, req.Message, req.ReferredBy), "")
	if e != nil {
		a.fail(w, r, e)
		return
	}
	env.From = req.From
	a.submit(w, r, ingress.Submission{Sender: snd, Envelope: env, IdempotencyKey: key}, "")
}
