package api_test

import (
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"golang.org/x/mod/sumdb/tlog"

	alpv1 "github.com/alpd-project/alpd/gen/alp/v1"

	"github.com/alpd-project/alpd/internal/ledgerlog"
	"github.com/alpd-project/alpd/services/ledger/api"
	"github.com/alpd-project/alpd/services/ledger/storage"
)

func decodeHash(t testing.TB, s string) tlog.Hash {
	t.Helper()
	b, err := base64.StdEncoding.DecodeString(s)
	if err != nil || len(b) != 32 {
		t.Fatalf("%q is not a base64 hash", s)
	}
	return tlog.Hash(b)
}

func decodeHashes(t testing.TB, ss []string) []tlog.Hash {
	out := make([]tlog.Hash, len(ss))
	for i, s := range ss {
		out[i] = decodeHash(t, s)
	}
	return out
}

func TestHead(t *testing.T) {
	r := newRig(t, api.Limits{})
	r.store.add(ana, 7)
	r.store.sign(ana)
	r.store.add(ana, 2) // not signed yet

	for _, path := range []string{"/v1/ledger", "/v1/ledger/"} {
		h := okGet[headView](t, r, path, anaRead)
		if h.Origin != ledgerlog.Origin(tenant, ana) || h.Size != 9 || h.Checkpoint.Size != 7 || h.Checkpoint.Origin != h.Origin {
			t.Fatalf("%s: head %+v", path, h)
		}
		cp := r.openCheckpoint(t, ana, h.Checkpoint.Note)
		if cp.Size != 7 || base64.StdEncoding.EncodeToString(cp.Root[:]) != h.Checkpoint.Root {
			t.Errorf("checkpoint body %+v does not match the note %v", h.Checkpoint, cp)
		}
		root, _ := r.store.logs[ana].tree.Root(9)
		if decodeHash(t, h.Root) != root {
			t.Error("head root is not the root of all entries")
		}
		if len(h.PublicKeys) != 1 || h.PublicKeys[0].State != "active" || h.PublicKeys[0].Name != ledgerlog.KeyName(tenant) ||
			!strings.HasPrefix(h.PublicKeys[0].VerifierKey, ledgerlog.KeyName(tenant)+"+"+h.PublicKeys[0].KeyID+"+") {
			t.Errorf("public keys %+v", h.PublicKeys)
		}
	}

	// The web session reads the same.
	resp, data := r.do(t, request{path: "/v1/ledger", cookie: anaSession})
	if h := ok[headView](t, resp, data); h.Size != 9 {
		t.Errorf("session head %+v", h)
	}

	// Bo has no entries: his own empty log, not Ana's.
	resp, data = r.get(t, "/v1/ledger", boRead)
	refused(t, resp, data, http.StatusNotFound, api.CodeNoLog)

	resp, data = r.get(t, "/v1/ledger?person="+ana, anaRead)
	refused(t, resp, data, http.StatusBadRequest, api.CodeInvalidParameter)
}

func TestHeadErrors(t *testing.T) {
	r := newRig(t, api.Limits{})
	r.store.add(ana, 3)

	// Entries but no checkpoint yet.
	resp, data := r.get(t, "/v1/ledger", anaRead)
	if e := refused(t, resp, data, http.StatusServiceUnavailable, api.CodeCheckpointPending); e.RetryAfter != 1 || resp.Header.Get("Retry-After") != "1" {
		t.Errorf("no Retry-After: %+v %v", e, resp.Header)
	}
	r.store.sign(ana)

	r.backend.notReady = errors.New("ledger: not started")
	resp, data = r.get(t, "/v1/ledger", anaRead)
	refused(t, resp, data, http.StatusServiceUnavailable, api.CodeNotReady)
	r.backend.notReady = nil

	r.store.hosted[tenant] = false
	resp, data = r.get(t, "/v1/ledger", anaRead)
	refused(t, resp, data, http.StatusNotFound, api.CodeNotHosted)
	r.store.hosted[tenant] = true

	r.store.fail["Head"] = errors.New("fake: NATS is down")
	resp, data = r.get(t, "/v1/ledger", anaRead)
	if e := refused(t, resp, data, http.StatusInternalServerError, api.CodeInternal); strings.Contains(e.Message, "NATS") {
		t.Errorf("internal error leaks its cause: %q", e.Message)
	}
	delete(r.store.fail, "Head")

	r.store.fail["PublicKeys"] = errors.New("fake: keystore down")
	resp, data = r.get(t, "/v1/ledger", anaRead)
	refused(t, resp, data, http.StatusInternalServerError, api.CodeInternal)
	delete(r.store.fail, "PublicKeys")

	// A head whose checkpoint is of another log is never shown.
	r.store.add(bo, 2)
	r.store.logs[ana].checkpoint = r.store.sign(bo)
	resp, data = r.get(t, "/v1/ledger", anaRead)
	refused(t, resp, data, http.StatusInternalServerError, api.CodeInternal)
}

func TestAuthentication(t *testing.T) {
	r := newRig(t, api.Limits{})
	r.store.add(ana, 4)
	r.store.sign(ana)
	r.store.add(bo, 2)
	r.store.sign(bo)

	for _, path := range []string{"/v1/ledger", "/v1/ledger/entries", "/v1/ledger/proof/inclusion?index=0", "/v1/ledger/proof/consistency?from=1", "/v1/ledger/export"} {
		resp, data := r.get(t, path, "")
		refused(t, resp, data, http.StatusUnauthorized, api.CodeAuthRequired)
		if c := resp.Header.Get("WWW-Authenticate"); !strings.HasPrefix(c, "Bearer ") || !strings.Contains(c, metadata) {
			t.Errorf("%s: challenge %q", path, c)
		}
		resp, data = r.get(t, path, "not-a-token")
		refused(t, resp, data, http.StatusUnauthorized, "invalid_token")
		resp, data = r.get(t, path, anaSend)
		refused(t, resp, data, http.StatusForbidden, "insufficient_scope")
		if c := resp.Header.Get("WWW-Authenticate"); !strings.Contains(c, `scope="alp.read"`) {
			t.Errorf("%s: challenge %q", path, c)
		}
	}

	// Each token reads its own person's log, whatever the request says.
	for _, tc := range []struct{ token, person string }{{anaRead, ana}, {boRead, bo}} {
		h := okGet[headView](t, r, "/v1/ledger", tc.token)
		if h.Origin != ledgerlog.Origin(tenant, tc.person) {
			t.Errorf("%s reads %s", tc.token, h.Origin)
		}
		es := okGet[entriesView](t, r, "/v1/ledger/entries", tc.token)
		for _, e := range es.Entries {
			if !strings.Contains(e.Leaf, ledgerlog.Origin(tenant, tc.person)) {
				t.Errorf("%s got a leaf of another log: %s", tc.token, e.Leaf)
			}
		}
	}
	// Bo cannot prove things about Ana's log by sending her checkpoint.
	resp, data := r.do(t, request{method: http.MethodPost, path: "/v1/ledger/proof/consistency", token: boRead,
		body: []byte(r.store.logs[ana].checkpoint)})
	refused(t, resp, data, http.StatusBadRequest, api.CodeInvalidCheckpoint)

	// A bearer token wins over a cookie.
	resp, data = r.do(t, request{path: "/v1/ledger", token: boRead, cookie: anaSession})
	if h := ok[headView](t, resp, data); h.Origin != ledgerlog.Origin(tenant, bo) {
		t.Errorf("bearer and cookie: read %s", h.Origin)
	}
	// A bad session is refused, with the bearer challenge.
	resp, data = r.do(t, request{path: "/v1/ledger", cookie: "forged"})
	refused(t, resp, data, http.StatusUnauthorized, "session_invalid")
	if resp.Header.Get("WWW-Authenticate") == "" {
		t.Error("no challenge for a bad session")
	}
	// A session cannot POST.
	resp, data = r.do(t, request{method: http.MethodPost, path: "/v1/ledger/proof/consistency", cookie: anaSession,
		body: []byte(r.store.logs[ana].checkpoint)})
	refused(t, resp, data, http.StatusUnauthorized, api.CodeBearerRequired)

	// Without sessions (split mode) a cookie is no credential.
	a := api.New(api.Options{Backend: r.backend, Auth: &fakeAuth{}})
	rec := httptest.NewRecorder()
	req := httptest.NewRequest(http.MethodGet, "/v1/ledger", nil)
	req.AddCookie(&http.Cookie{Name: "alpd_session", Value: anaSession})
	a.ServeHTTP(rec, req)
	if rec.Code != http.StatusUnauthorized || !strings.Contains(rec.Body.String(), api.CodeAuthRequired) {
		t.Errorf("split mode with a cookie: %d %s", rec.Code, rec.Body.String())
	}
}

func TestEntriesPaging(t *testing.T) {
	r := newRig(t, api.Limits{DefaultPage: 4, MaxPage: 6})
	r.store.add(ana, 10)
	r.store.sign(ana)
	r.store.add(ana, 3) // 13 entries, checkpoint at 10

	// The default page, then following next to the end.
	var all []entryView
	path := "/v1/ledger/entries"
	pages := 0
	for {
		p := okGet[entriesView](t, r, path, anaRead)
		pages++
		if p.Size != 13 || p.Checkpoint.Size != 10 {
			t.Fatalf("page %+v", p)
		}
		all = append(all, p.Entries...)
		if p.Next == nil {
			break
		}
		if *p.Next != uint64(len(all)) {
			t.Fatalf("next %d after %d entries", *p.Next, len(all))
		}
		path = fmt.Sprintf("/v1/ledger/entries?from=%d", *p.Next)
	}
	if pages != 4 || len(all) != 13 {
		t.Fatalf("%d pages, %d entries", pages, len(all))
	}
	for i, e := range all {
		want := r.store.logs[ana].entries[i]
		h := ledgerlog.LeafHash([]byte(e.Leaf))
		if e.Index != uint64(i) || e.Leaf != string(want.Leaf) || decodeHash(t, e.LeafHash) != h || e.Erased != want.Erased {
			t.Fatalf("entry %d: %+v", i, e)
		}
		if (e.Opening != nil) != (want.Opening != nil) {
			t.Fatalf("entry %d: opening %v, want %v", i, e.Opening, want.Opening)
		}
		if e.Opening != nil {
			parsed, err := ledgerlog.ParseEntry([]byte(e.Leaf))
			if err != nil {
				t.Fatal(err)
			}
			salt, _ := base64.StdEncoding.DecodeString(e.Opening.Salt)
			digest, _ := hex.DecodeString(e.Opening.Digest)
			if err := ledgerlog.CheckOpening(parsed.Commitment, salt, [32]byte(digest)); err != nil {
				t.Fatalf("entry %d: opening does not open: %v", i, err)
			}
		}
	}

	// Edges.
	p := okGet[entriesView](t, r, "/v1/ledger/entries?from=11&limit=6", anaRead)
	if len(p.Entries) != 2 || p.Next != nil {
		t.Errorf("last page: %d entries, next %v", len(p.Entries), p.Next)
	}
	p = okGet[entriesView](t, r, "/v1/ledger/entries?from=13", anaRead)
	if len(p.Entries) != 0 || p.Next != nil || p.Entries == nil {
		t.Errorf("page at the end: %+v", p)
	}
	p = okGet[entriesView](t, r, "/v1/ledger/entries?from=2&limit=1", anaRead)
	if len(p.Entries) != 1 || p.Entries[0].Index != 2 || p.Next == nil || *p.Next != 3 {
		t.Errorf("one entry: %+v", p)
	}
	for q, code := range map[string]string{
		"from=14":                api.CodeOutOfRange,
		"from=-1":                api.CodeInvalidParameter,
		"from=01":                api.CodeInvalidParameter,
		"from=x":                 api.CodeInvalidParameter,
		"from=":                  api.CodeInvalidParameter,
		"from=1&from=2":          api.CodeInvalidParameter,
		"limit=0":                api.CodeInvalidParameter,
		"limit=7":                api.CodeInvalidParameter,
		"limt=3":                 api.CodeInvalidParameter,
		"from=99999999999999999": api.CodeOutOfRange,
		"from=%zz":               api.CodeInvalidParameter,
	} {
		resp, data := r.get(t, "/v1/ledger/entries?"+q, anaRead)
		refused(t, resp, data, http.StatusBadRequest, code)
	}

	// A store that answers entries out of order is not believed.
	r.store.logs[ana].entries[5].Index = 6
	resp, data := r.get(t, "/v1/ledger/entries?from=4", anaRead)
	refused(t, resp, data, http.StatusInternalServerError, api.CodeInternal)
	r.store.logs[ana].entries[5].Index = 5

	r.store.fail["Entries"] = storage.ErrNoLog
	resp, data = r.get(t, "/v1/ledger/entries", anaRead)
	refused(t, resp, data, http.StatusNotFound, api.CodeNoLog)
}

func TestInclusion(t *testing.T) {
	r := newRig(t, api.Limits{})
	r.store.add(ana, 9)
	r.store.sign(ana)
	r.store.add(ana, 4) // 13 entries, checkpoint at 9

	for i := range uint64(9) {
		p := okGet[inclusionView](t, r, fmt.Sprintf("/v1/ledger/proof/inclusion?index=%d", i), anaRead)
		cp := r.openCheckpoint(t, ana, p.Checkpoint.Note)
		leaf := ledgerlog.LeafHash(r.store.logs[ana].entries[i].Leaf)
		if p.Index != i || p.Size != 9 || decodeHash(t, p.LeafHash) != leaf || decodeHash(t, p.Root) != cp.Root {
			t.Fatalf("proof %d: %+v", i, p)
		}
		if err := ledgerlog.VerifyInclusion(decodeHashes(t, p.Proof), cp, i, leaf); err != nil {
			t.Fatalf("proof %d does not verify against the checkpoint: %v", i, err)
		}
	}
	// In a larger tree than the checkpoint's: the root is given, unsigned.
	p := okGet[inclusionView](t, r, "/v1/ledger/proof/inclusion?index=11&size=13", anaRead)
	root, _ := r.store.logs[ana].tree.Root(13)
	if decodeHash(t, p.Root) != root || p.Size != 13 {
		t.Fatalf("proof in 13: %+v", p)
	}
	if err := tlog.CheckRecord(decodeHashes(t, p.Proof), 13, root, 11, decodeHash(t, p.LeafHash)); err != nil {
		t.Fatal(err)
	}

	for q, want := range map[string]string{
		"":                    api.CodeInvalidParameter,
		"index=x":             api.CodeInvalidParameter,
		"index=13":            api.CodeOutOfRange,
		"index=3&size=3":      api.CodeOutOfRange,
		"index=1&size=14":     api.CodeOutOfRange,
		"index=1&size=0":      api.CodeInvalidParameter,
		"index=1&tree_size=3": api.CodeInvalidParameter,
	} {
		resp, data := r.get(t, "/v1/ledger/proof/inclusion?"+q, anaRead)
		refused(t, resp, data, http.StatusBadRequest, want)
	}

	// An entry newer than the checkpoint: retry once it is signed.
	resp, data := r.get(t, "/v1/ledger/proof/inclusion?index=9", anaRead)
	refused(t, resp, data, http.StatusServiceUnavailable, api.CodeCheckpointPending)

	// A proof that does not verify is never served.
	r.store.corruptProofs = true
	resp, data = r.get(t, "/v1/ledger/proof/inclusion?index=2", anaRead)
	refused(t, resp, data, http.StatusInternalServerError, api.CodeInternal)
	r.store.corruptProofs = false

	// Nor one whose tree disagrees with the checkpoint.
	other := r.store.logs[ana].tree
	r.store.logs[ana].tree = ledgerlog.NewMemoryTree(0)
	for range 13 {
		_, _ = r.store.logs[ana].tree.Append([]byte("rewritten"))
	}
	resp, data = r.get(t, "/v1/ledger/proof/inclusion?index=2", anaRead)
	refused(t, resp, data, http.StatusInternalServerError, api.CodeInternal)
	r.store.logs[ana].tree = other

	r.store.fail["HashReader"] = errors.New("fake: tiles gone")
	resp, data = r.get(t, "/v1/ledger/proof/inclusion?index=2", anaRead)
	refused(t, resp, data, http.StatusInternalServerError, api.CodeInternal)
}

func TestConsistency(t *testing.T) {
	r := newRig(t, api.Limits{})
	r.store.add(ana, 3)
	held := r.store.sign(ana) // what Ana's client kept
	r.store.add(ana, 10)
	r.store.sign(ana)
	r.store.add(ana, 2) // 15 entries, checkpoint at 13

	older := r.openCheckpoint(t, ana, string(held))
	check := func(c consistencyView, from uint64) {
		t.Helper()
		newer := r.openCheckpoint(t, ana, c.Checkpoint.Note)
		if c.From != from || c.To != 13 || newer.Size != 13 || decodeHash(t, c.ToRoot) != newer.Root {
			t.Fatalf("consistency %+v", c)
		}
		if err := ledgerlog.VerifyConsistency(decodeHashes(t, c.Proof), older, newer); err != nil {
			t.Fatalf("proof does not join the held checkpoint to the latest: %v", err)
		}
	}

	// GET with the size the reader held.
	c := okGet[consistencyView](t, r, "/v1/ledger/proof/consistency?from=3", anaRead)
	check(c, 3)
	if decodeHash(t, c.FromRoot) != older.Root {
		t.Error("from_root is not the held root")
	}
	// POST with the checkpoint itself, raw or as JSON.
	resp, data := r.do(t, request{method: http.MethodPost, path: "/v1/ledger/proof/consistency", token: anaRead, body: held, contentType: "text/plain"})
	c = ok[consistencyView](t, resp, data)
	check(c, 3)
	if c.Held == nil || c.Held.Size != 3 {
		t.Errorf("held %+v", c.Held)
	}
	resp, data = r.do(t, request{method: http.MethodPost, path: "/v1/ledger/proof/consistency", token: anaRead,
		body: fmt.Appendf(nil, `{"checkpoint":%q}`, held), contentType: "application/json; charset=utf-8"})
	check(ok[consistencyView](t, resp, data), 3)
	// The latest checkpoint itself: an empty proof.
	latest := r.store.logs[ana].checkpoint
	resp, data = r.do(t, request{method: http.MethodPost, path: "/v1/ledger/proof/consistency", token: anaRead, body: latest})
	if c := ok[consistencyView](t, resp, data); c.From != 13 || c.To != 13 || len(c.Proof) != 0 {
		t.Errorf("from the latest: %+v", c)
	}
	// Between two sizes, the newer beyond the checkpoint.
	c = okGet[consistencyView](t, r, "/v1/ledger/proof/consistency?from=5&to=15", anaRead)
	r5, _ := r.store.logs[ana].tree.Root(5)
	r15, _ := r.store.logs[ana].tree.Root(15)
	if err := tlog.CheckTree(decodeHashes(t, c.Proof), 15, r15, 5, r5); err != nil || decodeHash(t, c.FromRoot) != r5 {
		t.Errorf("5→15: %v", err)
	}

	for q, want := range map[string]string{
		"":             api.CodeInvalidParameter,
		"from=0":       api.CodeInvalidParameter,
		"from=14":      api.CodeOutOfRange, // beyond the checkpoint
		"from=3&to=16": api.CodeOutOfRange,
		"from=4&to=3":  api.CodeOutOfRange,
		"from=4&to=0":  api.CodeInvalidParameter,
		"to=3":         api.CodeInvalidParameter,
	} {
		resp, data := r.get(t, "/v1/ledger/proof/consistency?"+q, anaRead)
		refused(t, resp, data, http.StatusBadRequest, want)
	}

	r.store.corruptProofs = true
	resp, data = r.get(t, "/v1/ledger/proof/consistency?from=3", anaRead)
	refused(t, resp, data, http.StatusInternalServerError, api.CodeInternal)
	r.store.corruptProofs = false
}

func TestConsistencyFromHeldRefused(t *testing.T) {
	r := newRig(t, api.Limits{})
	r.store.add(ana, 6)
	r.store.sign(ana)
	r.store.add(bo, 6)
	boCP := r.store.sign(bo)
	post := func(body []byte, contentType string) (*http.Response, []byte) {
		return r.do(t, request{method: http.MethodPost, path: "/v1/ledger/proof/consistency", token: anaRead, body: body, contentType: contentType})
	}

	// Another person's checkpoint, garbage, nothing, too much.
	resp, data := post(boCP, "")
	refused(t, resp, data, http.StatusBadRequest, api.CodeInvalidCheckpoint)
	resp, data = post([]byte("hello\n"), "")
	refused(t, resp, data, http.StatusBadRequest, api.CodeInvalidCheckpoint)
	resp, data = post(nil, "")
	refused(t, resp, data, http.StatusBadRequest, api.CodeInvalidCheckpoint)
	resp, data = post([]byte(strings.Repeat("x", 2*ledgerlog.MaxCheckpointBytes+1)), "")
	refused(t, resp, data, http.StatusRequestEntityTooLarge, api.CodeBodyTooLarge)
	resp, data = post([]byte(`{"checkpoint":"x","more":1}`), "application/json")
	refused(t, resp, data, http.StatusBadRequest, api.CodeInvalidCheckpoint)
	resp, data = r.do(t, request{method: http.MethodPost, path: "/v1/ledger/proof/consistency?from=1", token: anaRead, body: boCP})
	refused(t, resp, data, http.StatusBadRequest, api.CodeInvalidParameter)

	l := r.store.logs[ana]
	// Signed by a key that is not the tenant's.
	forged := ledgerlog.NewMemoryTree(0)
	for _, e := range l.entries {
		_, _ = forged.Append(e.Leaf)
	}
	other := newFakeStore(t)
	cp, _ := forged.Checkpoint(l.origin, 6)
	resp, data = post(signWith(t, other.noteSigner(), cp), "")
	refused(t, resp, data, http.StatusBadRequest, api.CodeInvalidCheckpoint)

	// Signed by our key, but larger than the log: rolled back.
	_, _ = forged.Append([]byte("an entry the log no longer has"))
	cp, _ = forged.Checkpoint(l.origin, 7)
	resp, data = post(signWith(t, r.store.noteSigner(), cp), "")
	refused(t, resp, data, http.StatusConflict, api.CodeCheckpointAhead)

	// Signed by our key, but the log disagrees: rewritten history.
	rewritten := ledgerlog.NewMemoryTree(0)
	for i := range 4 {
		_, _ = rewritten.Append(fmt.Appendf(nil, "another history %d", i))
	}
	cp, _ = rewritten.Checkpoint(l.origin, 4)
	resp, data = post(signWith(t, r.store.noteSigner(), cp), "")
	refused(t, resp, data, http.StatusConflict, api.CodeCheckpointInconsistent)

	// Signed only by a key since revoked as compromised.
	cp, _ = l.tree.Checkpoint(l.origin, 3)
	byOld := signWith(t, r.store.noteSigner(), cp)
	ctx := t.Context()
	old, _ := r.store.ks.Active(ctx, tenant, alpv1.KeyPurpose_KEY_PURPOSE_LEDGER)
	if _, err := r.store.ks.Rotate(ctx, tenant, old.Purpose); err != nil {
		t.Fatal(err)
	}
	resp, data = post(byOld, "")
	ok[consistencyView](t, resp, data) // a retired key still vouches
	if err := r.store.ks.Revoke(ctx, tenant, old.Purpose, old.KeyID, old.Created); err != nil {
		t.Fatal(err)
	}
	r.store.sign(ana) // the latest checkpoint, by the new key
	resp, data = post(byOld, "")
	refused(t, resp, data, http.StatusBadRequest, api.CodeCheckpointKeyRevoked)
	h := okGet[headView](t, r, "/v1/ledger", anaRead)
	if len(h.PublicKeys) != 2 || h.PublicKeys[0].State != "revoked" || h.PublicKeys[1].State != "active" {
		t.Errorf("keys after rotation and revocation: %+v", h.PublicKeys)
	}
}

func TestMethodsAndPaths(t *testing.T) {
	r := newRig(t, api.Limits{})
	for _, tc := range []struct{ method, path, allow string }{
		{http.MethodPost, "/v1/ledger", "GET, HEAD"},
		{http.MethodDelete, "/v1/ledger/entries", "GET, HEAD"},
		{http.MethodPut, "/v1/ledger/proof/consistency", "GET, HEAD, POST"},
		{http.MethodPost, "/v1/ledger/export", "GET, HEAD"},
		{http.MethodPost, "/v1/ledger/proof/inclusion", "GET, HEAD"},
	} {
		resp, data := r.do(t, request{method: tc.method, path: tc.path, token: anaRead})
		refused(t, resp, data, http.StatusMethodNotAllowed, api.CodeMethodNotAllowed)
		if resp.Header.Get("Allow") != tc.allow {
			t.Errorf("%s %s: Allow %q", tc.method, tc.path, resp.Header.Get("Allow"))
		}
	}
	for _, p := range []string{"/v1/ledger/nope", "/v1/ledger/proof", "/v1/ledger/entries/3"} {
		resp, data := r.get(t, p, anaRead)
		refused(t, resp, data, http.StatusNotFound, api.CodeNotFound)
	}
}
