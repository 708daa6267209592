package restapi

import (
	"net/http"
	"net/url"

	"github.com/alpd-project/alpd/internal/httpjson"
)

// MediaSchema is the media type of a JSON Schema document.
const MediaSchema = "application/schema+json"

// typeJSON describes one message type.
type typeJSON struct {
	Name string `json:"name"`
	// Owner is the organization (tenant) that registered it; absent for a
	// built-in type.
	Owner   string `json:"owner,omitempty"`
	Builtin bool   `json:"builtin"`
	// Digest identifies the schema's exact bytes.
	Digest string `json:"digest"`
	// Commits lists what a message of the type commits its recipient to
	// (held for the person's approval).
	Commits []string `json:"commits,omitempty"`
	// Schema is where its JSON Schema is.
	Schema string `json:"schema"`
}

// listTypes is GET /v1/agent/types.
func (a *API) listTypes(w http.ResponseWriter, r *http.Request) {
	snd, ok := a.admit(w, r, maySendOrRead)
	if !ok {
		return
	}
	p, e := pageOf(r, "types")
	if e != nil {
		a.fail(w, r, e)
		return
	}
	// The built-in types and the agent's organization's, sorted by name.
	ts, err := a.s.Types(snd)
	if err != nil {
		a.fail(w, r, classify(err))
		return
	}
	all := make([]typeJSON, 0, len(ts))
	for _, t := range ts {
		all = append(all, typeJSON{Name: t.Name(), Owner: t.Owner(), Builtin: t.Builtin(), Digest: t.Digest(),
			Commits: t.Commits(), Schema: a.cfg.PublicURL + PathTypes + "/" + url.PathEscape(t.Name())})
	}
	httpjson.Write(w, http.StatusOK, window(all, p, func(t typeJSON) position { return position{Kind: "types", Key: t.Name} }))
}

// getType is GET /v1/agent/types/{name}: the type's JSON Schema itself,
// as registered. The name holds slashes (meeting.request/v1): sent as they
// are or escaped (%2F), both reach here. Another organization's type is
// not found, like one that does not exist.
func (a *API) getType(w http.ResponseWriter, r *http.Request) {
	snd, ok := a.admit(w, r, maySendOrRead)
	if !ok {
		return
	}
	t, err := a.s.Type(snd, r.PathValue("name"))
	if err != nil {
		a.fail(w, r, classify(err))
		return
	}
	h := w.Header()
	httpjson.NoStore(h)
	h.Set("Content-Type", MediaSchema)
	h.Set("ETag", `"`+t.Digest()+`"`)
	w.WriteHeader(http.StatusOK)
	if r.Method != http.MethodHead {
		_, _ = w.Write(t.Schema())
	}
}
