package api_test

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/alpd-project/alpd/internal/agentauth"
	"github.com/alpd-project/alpd/internal/ledgerlog"
	"github.com/alpd-project/alpd/internal/signin"
	"github.com/alpd-project/alpd/services/ledger/api"
)

// Persons and their credentials.
const (
	ana = "ana0001"
	bo  = "bo0002"
	// Tokens.
	anaRead = "tok-ana-read"
	anaSend = "tok-ana-send"
	boRead  = "tok-bo-read"
	// Session cookies.
	anaSession = "sess-ana"
)

// rig is the API on a fake store, served on a loopback HTTP server.
type rig struct {
	store   *fakeStore
	backend *fakeBackend
	api     *api.API
	srv     *httptest.Server
}

func newRig(t testing.TB, lim api.Limits) *rig {
	t.Helper()
	st := newFakeStore(t)
	b := &fakeBackend{store: st}
	auth := &fakeAuth{tokens: map[string]agentauth.Principal{
		anaRead: {Tenant: tenant, PersonID: ana, AgentID: "agent-1", Scopes: []string{"alp.read"}, Credential: agentauth.CredentialAccessToken},
		anaSend: {Tenant: tenant, PersonID: ana, AgentID: "agent-2", Scopes: []string{"alp.send"}, Credential: agentauth.CredentialAccessToken},
		boRead:  {Tenant: tenant, PersonID: bo, AgentID: "agent-3", Scopes: []string{"alp.read", "alp.send"}, Credential: agentauth.CredentialPAT},
	}}
	sessions := &fakeSessions{sessions: map[string]*signin.Session{
		anaSession: {Tenant: tenant, PersonID: ana, Address: "ana@example.org"},
	}}
	a := api.New(api.Options{Backend: b, Auth: auth, Sessions: sessions, Limits: lim})
	srv := httptest.NewServer(a)
	t.Cleanup(srv.Close)
	return &rig{store: st, backend: b, api: a, srv: srv}
}

// request is one HTTP request to the rig.
type request struct {
	method, path string
	token        string
	cookie       string
	body         []byte
	contentType  string
}

func (r *rig) do(t testing.TB, q request) (*http.Response, []byte) {
	t.Helper()
	if q.method == "" {
		q.method = http.MethodGet
	}
	var body io.Reader
	if q.body != nil {
		body = bytes.NewReader(q.body)
	}
	req, err := http.NewRequest(q.method, r.srv.URL+q.path, body)
	if err != nil {
		t.Fatal(err)
	}
	if q.token != "" {
		req.Header.Set("Authorization", "Bearer "+q.token)
	}
	if q.cookie != "" {
		req.AddCookie(&http.Cookie{Name: signin.SessionCookie, Value: q.cookie})
	}
	if q.contentType != "" {
		req.Header.Set("Content-Type", q.contentType)
	}
	resp, err := r.srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s %s: reading the body: %v", q.method, q.path, err)
	}
	return resp, data
}

func (r *rig) get(t testing.TB, path, token string) (*http.Response, []byte) {
	t.Helper()
	return r.do(t, request{path: path, token: token})
}

// ok decodes a 200 answer into v and checks the checkpoint header
// matches the body's checkpoint.
func ok[T any](t testing.TB, resp *http.Response, data []byte) T {
	t.Helper()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d, want 200: %s", resp.StatusCode, data)
	}
	if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
		t.Errorf("Content-Type %q", ct)
	}
	if cc := resp.Header.Get("Cache-Control"); cc != "no-store" {
		t.Errorf("Cache-Control %q", cc)
	}
	var v T
	if err := json.Unmarshal(data, &v); err != nil {
		t.Fatalf("%v: %s", err, data)
	}
	var cp struct {
		Checkpoint struct {
			Note string `json:"note"`
		} `json:"checkpoint"`
	}
	_ = json.Unmarshal(data, &cp)
	hdr, err := base64.StdEncoding.DecodeString(resp.Header.Get(api.CheckpointHeader))
	if err != nil || string(hdr) != cp.Checkpoint.Note || cp.Checkpoint.Note == "" {
		t.Errorf("checkpoint header %q does not carry the body's checkpoint %q", resp.Header.Get(api.CheckpointHeader), cp.Checkpoint.Note)
	}
	return v
}

// okGet is ok of a GET.
func okGet[T any](t testing.TB, r *rig, path, token string) T {
	t.Helper()
	resp, data := r.get(t, path, token)
	return ok[T](t, resp, data)
}

type apiErr struct {
	Status     int    `json:"status"`
	Code       string `json:"code"`
	Message    string `json:"message"`
	RetryAfter int    `json:"retry_after"`
}

// refused checks an error answer's status and code and returns it.
func refused(t testing.TB, resp *http.Response, data []byte, status int, code string) apiErr {
	t.Helper()
	var body struct {
		Error apiErr `json:"error"`
	}
	if err := json.Unmarshal(data, &body); err != nil {
		t.Fatalf("error answer is not JSON (%v): %s", err, data)
	}
	if resp.StatusCode != status || body.Error.Status != status || body.Error.Code != code || body.Error.Message == "" {
		t.Fatalf("got %d %+v, want %d %s", resp.StatusCode, body.Error, status, code)
	}
	if resp.Header.Get(api.CheckpointHeader) != "" {
		t.Errorf("error answer carries a checkpoint")
	}
	return body.Error
}

// views of the answers, as a client reads them.
type checkpointView struct {
	Note   string `json:"note"`
	Origin string `json:"origin"`
	Size   uint64 `json:"size"`
	Root   string `json:"root"`
}

type headView struct {
	Origin     string         `json:"origin"`
	Size       uint64         `json:"size"`
	Root       string         `json:"root"`
	Checkpoint checkpointView `json:"checkpoint"`
	PublicKeys []struct {
		KeyID       string `json:"key_id"`
		Name        string `json:"name"`
		VerifierKey string `json:"vkey"`
		PublicKey   string `json:"public_key"`
		State       string `json:"state"`
	} `json:"public_keys"`
}

type entryView struct {
	Index    uint64 `json:"index"`
	Leaf     string `json:"leaf"`
	LeafHash string `json:"leaf_hash"`
	Opening  *struct {
		Salt   string `json:"salt"`
		Digest string `json:"digest"`
	} `json:"opening"`
	Erased bool `json:"erased"`
}

type entriesView struct {
	Entries    []entryView    `json:"entries"`
	Next       *uint64        `json:"next"`
	Size       uint64         `json:"size"`
	Checkpoint checkpointView `json:"checkpoint"`
}

type inclusionView struct {
	Index      uint64         `json:"index"`
	Size       uint64         `json:"size"`
	LeafHash   string         `json:"leaf_hash"`
	Proof      []string       `json:"proof"`
	Root       string         `json:"root"`
	Checkpoint checkpointView `json:"checkpoint"`
}

type consistencyView struct {
	From       uint64   `json:"from"`
	To         uint64   `json:"to"`
	FromRoot   string   `json:"from_root"`
	ToRoot     string   `json:"to_root"`
	Proof      []string `json:"proof"`
	Held       *struct{ Size uint64 }
	Checkpoint checkpointView `json:"checkpoint"`
}

// openCheckpoint verifies a checkpoint note with the store's keys, as a
// reader does with the keys it pinned.
func (r *rig) openCheckpoint(t testing.TB, person, note string) ledgerlog.Checkpoint {
	t.Helper()
	keys, err := r.store.PublicKeys(t.Context(), tenant)
	if err != nil {
		t.Fatal(err)
	}
	var vkeys []string
	for _, k := range keys {
		vkeys = append(vkeys, k.VerifierKey)
	}
	v, err := ledgerlog.Verifiers(vkeys...)
	if err != nil {
		t.Fatal(err)
	}
	cp, err := ledgerlog.OpenCheckpoint([]byte(note), ledgerlog.Origin(tenant, person), v)
	if err != nil {
		t.Fatal(err)
	}
	return cp
}
