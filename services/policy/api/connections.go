package api

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"

	"github.com/alpd-project/alpd/internal/httpjson"
	"github.com/alpd-project/alpd/services/policy/relationships"
)

// connectionsJSON is GET /v1/connections: the requests waiting for the
// person's answer (without those from parties they blocked) and every
// connection they are part of, asked or asking, oldest first.
type connectionsJSON struct {
	Pending     []relationships.Connection `json:"pending"`
	Connections []relationships.Connection `json:"connections"`
}

func (a *API) listConnections(w http.ResponseWriter, r *http.Request) {
	c, ok := a.person(w, r, false)
	if !ok {
		return
	}
	pending, err := a.o.Relationships.Pending(c.Tenant, c.PersonID)
	if err != nil {
		a.fail(w, r, relError(err))
		return
	}
	all, err := a.o.Relationships.Connections(c.Tenant, c.PersonID)
	if err != nil {
		a.fail(w, r, relError(err))
		return
	}
	httpjson.Write(w, http.StatusOK, connectionsJSON{Pending: orEmpty(pending), Connections: orEmpty(all)})
}

type answer int

const (
	accept answer = iota
	decline
	block
)

func (a answer) String() string { return [...]string{"accept", "decline", "block"}[a] }

// answerJSON is the answer to accept, decline and block: the connection
// as it now stands, and for block what went on the block list.
type answerJSON struct {
	Connection relationships.Connection `json:"connection"`
	Blocked    *relationships.Target    `json:"blocked,omitempty"`
}

// answerConnection is the person's answer to connection {id}: accept and
// decline a request made of them; block the other party of any of their
// connections (asked or asking), whatever its state.
func (a *API) answerConnection(how answer) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, ok := a.person(w, r, true)
		if !ok {
			return
		}
		id := r.PathValue("id")
		var (
			res answerJSON
			err error
		)
		switch how {
		case accept:
			if res.Connection, err = a.o.Relationships.Accept(r.Context(), c.Tenant, c.PersonID, id); err == nil && a.o.Accepted != nil {
				if err := a.o.Accepted(r.Context(), c.Tenant, c.PersonID, res.Connection); err != nil {
					// Accepted here, the asker not told yet: accepting
					// again tells them (the same notice, stored once).
					a.fail(w, r, &httpjson.Error{Status: http.StatusServiceUnavailable, Code: CodeAskerNotTold, RetryAfter: 1,
						Message: "the connection is accepted, but its asker could not be told yet; accept again", Cause: err})
					return
				}
			}
		case decline:
			res.Connection, err = a.o.Relationships.Decline(r.Context(), c.Tenant, c.PersonID, id)
		case block:
			var t relationships.Target
			if t, err = a.o.Relationships.BlockConnection(r.Context(), c.Tenant, c.PersonID, id); err == nil {
				res.Blocked = &t
				res.Connection, err = a.o.Relationships.Connection(c.Tenant, id)
			}
		}
		if err != nil {
			a.fail(w, r, relError(err))
			return
		}
		a.log.InfoContext(r.Context(), "connection answered", "tenant", c.Tenant, "person_id", c.PersonID, "connection", id, "answer", how.String())
		httpjson.Write(w, http.StatusOK, res)
	})
}

// blocksJSON is the person's block list.
type blocksJSON struct {
	Blocks []relationships.Target `json:"blocks"`
}

func (a *API) writeBlocks(w http.ResponseWriter, r *http.Request, c caller) {
	list, err := a.o.Relationships.Blocks(c.Tenant, c.PersonID)
	if err != nil {
		a.fail(w, r, relError(err))
		return
	}
	httpjson.Write(w, http.StatusOK, blocksJSON{Blocks: orEmpty(list)})
}

func (a *API) listBlocks(w http.ResponseWriter, r *http.Request) {
	if c, ok := a.person(w, r, false); ok {
		a.writeBlocks(w, r, c)
	}
}

// addBlock is POST /v1/blocks {"kind": "person"|"address"|"domain",
// "value": …}; it answers the block list.
func (a *API) addBlock(w http.ResponseWriter, r *http.Request) {
	c, ok := a.person(w, r, true)
	if !ok {
		return
	}
	var t relationships.Target
	if e := readJSON(r, &t); e != nil {
		a.fail(w, r, e)
		return
	}
	if err := a.o.Relationships.Block(r.Context(), c.Tenant, c.PersonID, t); err != nil {
		a.fail(w, r, relError(err))
		return
	}
	a.writeBlocks(w, r, c)
}

// removeBlock is DELETE /v1/blocks/{kind}/{value} (the value
// path-escaped); it answers the block list.
func (a *API) removeBlock(w http.ResponseWriter, r *http.Request) {
	c, ok := a.person(w, r, true)
	if !ok {
		return
	}
	t := relationships.Target{Kind: relationships.TargetKind(r.PathValue("kind")), Value: r.PathValue("value")}
	if err := a.o.Relationships.Unblock(r.Context(), c.Tenant, c.PersonID, t); err != nil {
		a.fail(w, r, relError(err))
		return
	}
	a.writeBlocks(w, r, c)
}

// readJSON decodes the request body, a single JSON value with no unknown
// member, into v.
func readJSON(r *http.Request, v any) *httpjson.Error {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		return bodyError(err)
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return badRequest("the body is not the expected JSON: %v", err)
	}
	if dec.More() {
		return badRequest("the body holds more than one JSON value")
	}
	return nil
}

// orEmpty makes a nil list an empty one, so the JSON says [] and not null.
func orEmpty[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}
