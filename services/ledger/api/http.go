package api

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"io"
	"mime"
	"net/http"
	"net/url"
	"strconv"

	"github.com/alpd-project/alpd/internal/httpjson"
	"github.com/alpd-project/alpd/internal/httproute"
	"github.com/alpd-project/alpd/internal/ledgerlog"
)

// Paths.
const (
	PathHead        = "/v1/ledger"
	PathEntries     = "/v1/ledger/entries"
	PathInclusion   = "/v1/ledger/proof/inclusion"
	PathConsistency = "/v1/ledger/proof/consistency"
	PathExport      = "/v1/ledger/export"
)

// heldBody bounds POST /v1/ledger/proof/consistency: the held checkpoint
// (readHeld's limit).
const heldBody = 2 * ledgerlog.MaxCheckpointBytes

// Routes are the ledger's HTTP routes under /v1/ledger. Only the
// consistency proof from a held checkpoint takes a body; the export streams.
func (a *API) Routes() []httproute.Route {
	get := func(p string, h http.HandlerFunc) httproute.Route {
		return httproute.Route{Method: http.MethodGet, Pattern: p, Handler: h, Caller: httproute.AgentOrPerson, BodyLimit: httproute.NoBody}
	}
	routes := []httproute.Route{
		get(PathHead, a.serveHead),
		get(PathHead+"/{$}", a.serveHead),
		get(PathEntries, a.serveEntries),
		get(PathInclusion, a.serveInclusion),
		get(PathConsistency, a.serveConsistency),
		{Method: http.MethodPost, Pattern: PathConsistency, Handler: http.HandlerFunc(a.serveConsistencyFromHeld),
			Caller: httproute.AgentOrPerson, BodyLimit: heldBody},
		{Method: http.MethodGet, Pattern: PathExport, Handler: http.HandlerFunc(a.serveExport),
			Caller: httproute.AgentOrPerson, BodyLimit: httproute.NoBody, Streaming: true},
	}
	for _, p := range []string{PathHead, PathHead + "/{$}", PathEntries, PathInclusion, PathConsistency, PathExport} {
		allow := "GET, HEAD"
		if p == PathConsistency {
			allow = "GET, HEAD, POST"
		}
		routes = append(routes, httproute.Route{Pattern: p, Caller: httproute.AgentOrPerson, BodyLimit: httproute.NoBody,
			Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Allow", allow)
				writeError(w, httpjson.Errorf(http.StatusMethodNotAllowed, CodeMethodNotAllowed, "%s is not allowed here (allowed: %s)", r.Method, allow))
			})})
	}
	routes = append(routes, httproute.Route{Pattern: PathHead + "/", Caller: httproute.AgentOrPerson, BodyLimit: httproute.NoBody,
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			writeError(w, httpjson.Errorf(http.StatusNotFound, CodeNotFound, "no such ledger endpoint"))
		})})
	for i := range routes {
		routes[i].TooLarge = tooLarge
	}
	return routes
}

// tooLarge answers a refused body in the ledger's error form.
func tooLarge(w http.ResponseWriter, _ *http.Request, limit int64) {
	if limit == 0 {
		writeError(w, httpjson.Errorf(http.StatusRequestEntityTooLarge, CodeBodyTooLarge, "this request takes no body"))
		return
	}
	writeError(w, httpjson.Errorf(http.StatusRequestEntityTooLarge, CodeBodyTooLarge, "a checkpoint is at most %d bytes", ledgerlog.MaxCheckpointBytes))
}

// answer writes v with the latest checkpoint in CheckpointHeader.
func answer(w http.ResponseWriter, h *head, v any) {
	w.Header().Set(CheckpointHeader, base64.StdEncoding.EncodeToString(h.Checkpoint.Note))
	writeJSON(w, http.StatusOK, v)
}

// fail writes e and logs what the reader does not see.
func (a *API) fail(w http.ResponseWriter, r *http.Request, e *httpjson.Error) {
	if e.Status >= 500 && e.Cause != nil {
		a.log.Error("ledger api: read failed", "path", r.URL.Path, "code", e.Code, "err", e.Cause)
	}
	writeError(w, e)
}

func (a *API) serveHead(w http.ResponseWriter, r *http.Request) {
	rd, e := a.authenticate(r)
	if e == nil {
		_, e = params(r)
	}
	if e != nil {
		a.fail(w, r, e)
		return
	}
	h, e := a.readHead(r.Context(), rd)
	if e != nil {
		a.fail(w, r, e)
		return
	}
	keys, e := h.keys(r.Context())
	if e != nil {
		a.fail(w, r, e)
		return
	}
	v := headJSON{Origin: h.Origin, Size: h.Size, Root: b64(h.Root[:]), Checkpoint: checkpointView(h.Checkpoint),
		PublicKeys: make([]keyJSON, 0, len(keys))}
	for _, k := range keys {
		v.PublicKeys = append(v.PublicKeys, keyView(k))
	}
	answer(w, h, v)
}

func (a *API) serveEntries(w http.ResponseWriter, r *http.Request) {
	rd, e := a.authenticate(r)
	if e != nil {
		a.fail(w, r, e)
		return
	}
	q, e := params(r, "from", "limit")
	if e != nil {
		a.fail(w, r, e)
		return
	}
	from, e := uintParam(q, "from", 0, false)
	if e != nil {
		a.fail(w, r, e)
		return
	}
	limit, e := uintParam(q, "limit", uint64(a.limits.DefaultPage), false)
	if e == nil && (limit == 0 || limit > uint64(a.limits.MaxPage)) {
		e = badParam("limit must be 1..%d", a.limits.MaxPage)
	}
	if e != nil {
		a.fail(w, r, e)
		return
	}
	p, e := a.entries(r.Context(), rd, from, int(limit))
	if e != nil {
		a.fail(w, r, e)
		return
	}
	v := entriesJSON{Entries: make([]entryJSON, 0, len(p.Entries)), Size: p.Size, Checkpoint: checkpointView(p.Checkpoint)}
	for _, x := range p.Entries {
		v.Entries = append(v.Entries, entryView(x))
	}
	if p.Next != 0 {
		v.Next = &p.Next
	}
	answer(w, p.head, v)
}

func (a *API) serveInclusion(w http.ResponseWriter, r *http.Request) {
	rd, e := a.authenticate(r)
	if e != nil {
		a.fail(w, r, e)
		return
	}
	index, size, e := sizePair(r, "index", "size")
	if e != nil {
		a.fail(w, r, e)
		return
	}
	p, e := a.inclusionProof(r.Context(), rd, index, size)
	if e != nil {
		a.fail(w, r, e)
		return
	}
	answer(w, p.head, inclusionJSON{Index: p.Index, Size: p.TreeSize, LeafHash: b64(p.LeafHash[:]), Proof: hashes(p.Proof),
		Root: b64(p.Root[:]), Checkpoint: checkpointView(p.Checkpoint)})
}

func (a *API) serveConsistency(w http.ResponseWriter, r *http.Request) {
	rd, e := a.authenticate(r)
	if e != nil {
		a.fail(w, r, e)
		return
	}
	from, to, e := sizePair(r, "from", "to")
	if e != nil {
		a.fail(w, r, e)
		return
	}
	c, e := a.consistencyProof(r.Context(), rd, from, to)
	if e != nil {
		a.fail(w, r, e)
		return
	}
	answer(w, c.head, consistencyView(c))
}

// serveConsistencyFromHeld takes the signed checkpoint the reader holds,
// as the raw note (any content type but JSON) or as {"checkpoint": note}.
func (a *API) serveConsistencyFromHeld(w http.ResponseWriter, r *http.Request) {
	rd, e := a.authenticate(r)
	if e == nil {
		_, e = params(r)
	}
	if e != nil {
		a.fail(w, r, e)
		return
	}
	signed, e := readHeld(r)
	if e != nil {
		a.fail(w, r, e)
		return
	}
	c, e := a.consistencyFromHeld(r.Context(), rd, signed)
	if e != nil {
		a.fail(w, r, e)
		return
	}
	answer(w, c.head, consistencyView(c))
}

func consistencyView(c *consistency) consistencyJSON {
	v := consistencyJSON{From: c.From, To: c.To, FromRoot: b64(c.FromRoot[:]), ToRoot: b64(c.ToRoot[:]),
		Proof: hashes(c.Proof), Checkpoint: checkpointView(c.Checkpoint)}
	if c.Held != nil {
		v.Held = &bodyJSON{Origin: c.Held.Origin, Size: c.Held.Size, Root: b64(c.Held.Root[:])}
	}
	return v
}

// readHeld reads the body of a consistency request.
func readHeld(r *http.Request) ([]byte, *httpjson.Error) {
	// JSON escaping at most doubles a note's newlines; 2x is ample.
	const limit = heldBody
	body, err := io.ReadAll(io.LimitReader(r.Body, limit+1))
	switch {
	case err != nil:
		return nil, httpjson.Errorf(http.StatusBadRequest, CodeInvalidCheckpoint, "reading the request body failed")
	case len(body) > limit:
		return nil, httpjson.Errorf(http.StatusRequestEntityTooLarge, CodeBodyTooLarge, "a checkpoint is at most %d bytes", ledgerlog.MaxCheckpointBytes)
	}
	if ct, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type")); ct != "application/json" {
		return body, nil
	}
	var in struct {
		Checkpoint string `json:"checkpoint"`
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&in); err != nil || dec.More() {
		return nil, httpjson.Errorf(http.StatusBadRequest, CodeInvalidCheckpoint, `the body must be {"checkpoint": "<signed note>"}`)
	}
	return []byte(in.Checkpoint), nil
}

// params returns the query, refusing parameters not in allowed and
// repeated ones: a misspelt parameter must not silently read something
// else.
func params(r *http.Request, allowed ...string) (url.Values, *httpjson.Error) {
	q, err := url.ParseQuery(r.URL.RawQuery)
	if err != nil {
		return nil, badParam("the query string is malformed")
	}
	for k, vs := range q {
		ok := false
		for _, a := range allowed {
			ok = ok || k == a
		}
		switch {
		case !ok:
			return nil, badParam("unknown parameter %q", truncate(k))
		case len(vs) > 1:
			return nil, badParam("parameter %q is given more than once", k)
		}
	}
	return q, nil
}

// uintParam reads a decimal parameter.
// sizePair reads the query's only parameters: first (required) and size
// (optional, 0 when absent: "the latest checkpoint's", but at least 1 when
// given).
func sizePair(r *http.Request, first, size string) (uint64, uint64, *httpjson.Error) {
	q, e := params(r, first, size)
	if e != nil {
		return 0, 0, e
	}
	a, e := uintParam(q, first, 0, true)
	if e != nil {
		return 0, 0, e
	}
	b, e := uintParam(q, size, 0, false)
	if e == nil && q.Has(size) && b == 0 {
		e = badParam("%s must be at least 1", size)
	}
	return a, b, e
}

func uintParam(q url.Values, name string, def uint64, required bool) (uint64, *httpjson.Error) {
	if !q.Has(name) {
		if required {
			return 0, badParam("parameter %q is required", name)
		}
		return def, nil
	}
	s := q.Get(name)
	n, err := strconv.ParseUint(s, 10, 64)
	if err != nil || strconv.FormatUint(n, 10) != s {
		return 0, badParam("parameter %q must be a decimal number", name)
	}
	if n > ledgerlog.MaxIndex {
		return 0, httpjson.Errorf(http.StatusBadRequest, CodeOutOfRange, "parameter %q is too large", name)
	}
	return n, nil
}

func truncate(s string) string {
	if len(s) > 40 {
		return s[:40] + "…"
	}
	return s
}
