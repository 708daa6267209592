package pages_test

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/sha256"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/mod/sumdb/tlog"
	"golang.org/x/net/html"

	alpv1 "github.com/alpd-project/alpd/gen/alp/v1"
	"github.com/alpd-project/alpd/internal/httproute"
	"github.com/alpd-project/alpd/internal/ledgerlog"
	"github.com/alpd-project/alpd/internal/webui"
	"github.com/alpd-project/alpd/internal/webui/webuitest"
	"github.com/alpd-project/alpd/services/ledger/api"
	"github.com/alpd-project/alpd/services/ledger/pages"
	"github.com/alpd-project/alpd/services/ledger/storage"
)

const tenant = webuitest.Tenant

// fakeLog is one person's log in memory, kept as storage.Reader says.
type fakeLog struct {
	tree       *ledgerlog.MemoryTree
	entries    []storage.StoredEntry
	checkpoint []byte
	cpSize     uint64
}

// fakeStore is storage.Reader in memory: real leaves, a real tree, real
// signed checkpoints.
type fakeStore struct {
	t      *testing.T
	key    ed25519.PrivateKey
	keys   []storage.PublicKey
	mu     sync.Mutex
	logs   map[string]*fakeLog
	failAt string
}

func newFakeStore(t *testing.T) *fakeStore {
	_, key, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	vk, err := ledgerlog.VerifierKey(tenant, key.Public().(ed25519.PublicKey))
	if err != nil {
		t.Fatal(err)
	}
	return &fakeStore{t: t, key: key, logs: map[string]*fakeLog{},
		keys: []storage.PublicKey{{KeyID: "k1", Name: ledgerlog.KeyName(tenant), VerifierKey: vk, State: alpv1.KeyState_KEY_STATE_ACTIVE}}}
}

// append adds n send_requested entries to person's log; sign signs a
// checkpoint of the whole log afterwards.
func (f *fakeStore) append(person string, n int, sign bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	origin := ledgerlog.Origin(tenant, person)
	l := f.logs[person]
	if l == nil {
		l = &fakeLog{tree: ledgerlog.NewMemoryTree(n)}
		f.logs[person] = l
	}
	for range n {
		i := l.tree.Size()
		digest := sha256.Sum256(fmt.Appendf(nil, "envelope %d", i))
		salt := make([]byte, 32)
		e := ledgerlog.Entry{V: ledgerlog.EntryVersion, Log: origin, Index: i, Kind: ledgerlog.KindSendRequested,
			SourceEvent: fmt.Sprintf("ev-%d", i), EnvelopeID: fmt.Sprintf("env-%d", i), Commitment: ledgerlog.Commit(salt, digest),
			Counterparty: ledgerlog.Origin("partner.example", "p-carol"), Time: ledgerlog.FormatTime(time.Now())}
		leaf, err := e.Canonical()
		if err != nil {
			f.t.Fatalf("entry: %v", err)
		}
		if _, err := l.tree.Append(leaf); err != nil {
			f.t.Fatal(err)
		}
		l.entries = append(l.entries, storage.StoredEntry{Index: i, Leaf: leaf, Time: time.Now()})
	}
	if sign {
		root, err := ledgerlog.TreeHash(l.tree, l.tree.Size())
		if err != nil {
			f.t.Fatal(err)
		}
		s, err := ledgerlog.NoteSigner(tenant, f.key)
		if err != nil {
			f.t.Fatal(err)
		}
		cp, err := ledgerlog.SignCheckpoint(ledgerlog.Checkpoint{Origin: origin, Size: l.tree.Size(), Root: root}, s)
		if err != nil {
			f.t.Fatal(err)
		}
		l.checkpoint, l.cpSize = cp, l.tree.Size()
	}
}

func (f *fakeStore) log(person string) (*fakeLog, error) {
	if f.failAt != "" {
		return nil, errors.New(f.failAt)
	}
	l := f.logs[person]
	if l == nil {
		return nil, storage.ErrNoLog
	}
	return l, nil
}

func (f *fakeStore) Head(_ context.Context, t, person string) (storage.Head, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	l, err := f.log(person)
	if err != nil {
		return storage.Head{}, err
	}
	root, err := ledgerlog.TreeHash(l.tree, l.tree.Size())
	if err != nil {
		return storage.Head{}, err
	}
	return storage.Head{Origin: ledgerlog.Origin(t, person), Size: l.tree.Size(), Root: root, SignedCheckpoint: l.checkpoint, CheckpointSize: l.cpSize}, nil
}

func (f *fakeStore) Entries(_ context.Context, _, person string, from uint64, limit int) ([]storage.StoredEntry, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	l, err := f.log(person)
	if err != nil {
		return nil, err
	}
	end := min(from+uint64(limit), uint64(len(l.entries)))
	return append([]storage.StoredEntry(nil), l.entries[from:end]...), nil
}

func (f *fakeStore) HashReader(_ context.Context, _, person string) (tlog.HashReader, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	l, err := f.log(person)
	if err != nil {
		return nil, err
	}
	return l.tree, nil
}

func (f *fakeStore) InclusionProof(_ context.Context, _, person string, index, size uint64) (tlog.RecordProof, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	l, err := f.log(person)
	if err != nil {
		return nil, err
	}
	return ledgerlog.ProveInclusion(l.tree, index, size)
}

func (f *fakeStore) ConsistencyProof(_ context.Context, _, person string, older, newer uint64) (tlog.TreeProof, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	l, err := f.log(person)
	if err != nil {
		return nil, err
	}
	return ledgerlog.ProveConsistency(l.tree, older, newer)
}

func (f *fakeStore) PublicKeys(context.Context, string) ([]storage.PublicKey, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]storage.PublicKey(nil), f.keys...), nil
}

type backend struct {
	st    storage.Reader
	ready error
}

func (b backend) Ready() error            { return b.ready }
func (b backend) Storage() storage.Reader { return b.st }

var _ api.Backend = backend{}

func setup(t *testing.T, b *backend) *webuitest.Rig {
	return webuitest.New(t, func(r *webuitest.Rig) []httproute.Route {
		return pages.New(pages.Options{Backend: b, UI: r.UI}).Routes()
	})
}

// checks answers the page's verification lines by name: "ok", "failed" or
// "skipped", and the verdict.
func checks(t *testing.T, body string) (map[string]string, string, *html.Node) {
	t.Helper()
	doc := webuitest.CheckPage(t, body)
	out := map[string]string{}
	for _, n := range webuitest.FindAll(doc, func(n *html.Node) bool { return webuitest.Attr(n, "data-check") != "" }) {
		state := map[string]string{"ok": "ok", "bad": "failed", "muted": "skipped"}[webuitest.Attr(n, "class")]
		out[webuitest.Attr(n, "data-check")] = state
	}
	v := webuitest.ByID(doc, "verdict")
	if v == nil {
		return out, "", doc
	}
	return out, webuitest.Text(v), doc
}

func TestLedgerPage(t *testing.T) {
	st := newFakeStore(t)
	b := &backend{st: st}
	r := setup(t, b)
	alice, _ := r.SignInAs(webuitest.Alice)
	person := webuitest.Alice.PersonID

	// No entries yet.
	a := r.Get(alice, "/ledger/")
	if a.Status != http.StatusOK || !strings.Contains(a.Body, "no entries yet") || a.Header.Get("Content-Security-Policy") != webui.CSP {
		t.Fatalf("empty ledger: %d %s", a.Status, a.Body)
	}
	webuitest.CheckPage(t, a.Body)

	st.append(person, 60, true)
	a = r.Get(alice, "/ledger/")
	cs, verdict, doc := checks(t, a.Body)
	if verdict != "Verified" || cs["signature"] != "ok" || cs["inclusion"] != "ok" || cs["consistency"] != "skipped" {
		t.Fatalf("verification %v %q: %s", cs, verdict, a.Body)
	}
	rows := webuitest.FindAll(doc, func(n *html.Node) bool { return webuitest.Attr(n, "data-entry") != "" })
	if len(rows) != pages.ShownEntries || webuitest.Attr(rows[0], "data-entry") != "59" {
		t.Fatalf("%d rows, first %v", len(rows), rows[0].Attr)
	}
	if !strings.Contains(a.Body, "partner.example") || strings.Contains(a.Body, "p-carol") || !strings.Contains(a.Body, "send_requested") {
		t.Error("counterparty is not shown as its domain, or kind missing")
	}
	if n := webuitest.ByID(doc, "cp-size"); n == nil || !strings.HasPrefix(webuitest.Text(n), "60 entries") {
		t.Fatal("checkpoint size not shown")
	}
	if n := webuitest.ByID(doc, "export"); n == nil || webuitest.Attr(n, "href") != api.PathExport {
		t.Fatal("no export link")
	}
	again := webuitest.Attr(webuitest.ByID(doc, "check-again"), "href")

	// The ledger grows; from the head shown before it is consistent.
	st.append(person, 5, true)
	st.append(person, 2, false) // not signed yet
	a = r.Get(alice, again)
	cs, verdict, _ = checks(t, a.Body)
	if verdict != "Verified" || cs["consistency"] != "ok" || !strings.Contains(a.Body, "2 newer not signed yet") {
		t.Fatalf("after growth %v %q: %s", cs, verdict, a.Body)
	}

	// A head the ledger never had: not consistent.
	u, _ := url.Parse(again)
	q := u.Query()
	q.Set("root", "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=")
	cs, verdict, _ = checks(t, r.Get(alice, "/ledger/?"+q.Encode()).Body)
	if verdict != "Not verified" || cs["consistency"] != "failed" {
		t.Fatalf("forged head %v %q", cs, verdict)
	}
	// A head larger than the log: rollback.
	q.Set("since", "1000")
	if cs, _, _ := checks(t, r.Get(alice, "/ledger/?"+q.Encode()).Body); cs["consistency"] != "failed" {
		t.Fatalf("rollback %v", cs)
	}
	// A malformed head: 400.
	a = r.Get(alice, "/ledger/?since=x&root=y")
	if a.Status != http.StatusBadRequest || !strings.Contains(a.Body, pages.CodeBadHead) {
		t.Fatalf("bad head: %d", a.Status)
	}

	// The signing key revoked: the signature no longer counts.
	st.mu.Lock()
	st.keys[0].State = alpv1.KeyState_KEY_STATE_REVOKED
	st.mu.Unlock()
	cs, verdict, _ = checks(t, r.Get(alice, "/ledger/").Body)
	if verdict != "Not verified" || cs["signature"] != "failed" || cs["inclusion"] != "skipped" {
		t.Fatalf("revoked key %v %q", cs, verdict)
	}
	// Another key than the one that signed.
	other, _, _ := ed25519.GenerateKey(rand.Reader)
	vk, _ := ledgerlog.VerifierKey(tenant, other)
	st.mu.Lock()
	st.keys[0] = storage.PublicKey{KeyID: "k2", Name: ledgerlog.KeyName(tenant), VerifierKey: vk, State: alpv1.KeyState_KEY_STATE_ACTIVE}
	st.mu.Unlock()
	if cs, _, _ := checks(t, r.Get(alice, "/ledger/").Body); cs["signature"] != "failed" {
		t.Fatalf("foreign key %v", cs)
	}
}

func TestLedgerTamperedEntry(t *testing.T) {
	st := newFakeStore(t)
	r := setup(t, &backend{st: st})
	alice, _ := r.SignInAs(webuitest.Alice)
	person := webuitest.Alice.PersonID
	st.append(person, 3, true)
	// The stored leaf is changed after it was signed.
	st.mu.Lock()
	l := st.logs[person]
	l.entries[1].Leaf = []byte(strings.Replace(string(l.entries[1].Leaf), "env-1", "env-9", 1))
	st.mu.Unlock()
	cs, verdict, _ := checks(t, r.Get(alice, "/ledger/").Body)
	if verdict != "Not verified" || cs["inclusion"] != "failed" || cs["signature"] != "ok" {
		t.Fatalf("tampered %v %q", cs, verdict)
	}
}

func TestLedgerRefusals(t *testing.T) {
	st := newFakeStore(t)
	b := &backend{st: st}
	r := setup(t, b)
	st.append(webuitest.Bob.PersonID, 3, true)
	anon := r.Browser()
	if a := r.Get(anon, "/ledger/"); a.Status != http.StatusFound || !strings.HasPrefix(a.Location, "/signin?") {
		t.Fatalf("no session: %d %q", a.Status, a.Location)
	}
	alice, _ := r.SignInAs(webuitest.Alice)
	// Alice sees her own (empty) ledger, never Bob's.
	if a := r.Get(alice, "/ledger/"); !strings.Contains(a.Body, "no entries yet") {
		t.Fatalf("Alice sees entries: %s", a.Body)
	}
	a := r.Get(alice, "/ledger/", "Authorization", "Bearer alp_at_agent")
	if a.Status != http.StatusForbidden || !strings.Contains(a.Body, webui.CodeAgentCredentials) {
		t.Fatalf("agent token: %d", a.Status)
	}
	if a := r.Get(alice, "/ledger/elsewhere"); a.Status != http.StatusNotFound {
		t.Fatalf("unknown path: %d", a.Status)
	}
	b.ready = errors.New("starting")
	if a := r.Get(alice, "/ledger/"); a.Status != http.StatusServiceUnavailable || !strings.Contains(a.Body, pages.CodeUnavailable) {
		t.Fatalf("not ready: %d", a.Status)
	}
	b.ready = nil
	st.failAt = "jetstream: timeout (secret detail)"
	a = r.Get(alice, "/ledger/")
	if a.Status != http.StatusServiceUnavailable || strings.Contains(a.Body, "secret detail") {
		t.Fatalf("storage failure: %d %s", a.Status, a.Body)
	}
	webuitest.CheckPage(t, a.Body)
}
