package api_test

import (
	"context"
	"crypto/ed25519"
	"crypto/sha256"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	"golang.org/x/mod/sumdb/note"
	"golang.org/x/mod/sumdb/tlog"

	alpv1 "github.com/alpd-project/alpd/gen/alp/v1"
	"github.com/alpd-project/alpd/internal/accesstoken"
	"github.com/alpd-project/alpd/internal/agentauth"
	"github.com/alpd-project/alpd/internal/httpjson"
	"github.com/alpd-project/alpd/internal/keystore"
	"github.com/alpd-project/alpd/internal/ledgerlog"
	"github.com/alpd-project/alpd/internal/signin"
	"github.com/alpd-project/alpd/services/ledger/storage"
)

const (
	tenant   = "example.org"
	metadata = "https://broker.example/.well-known/oauth-protected-resource"
)

// fakeLog is one person's log, kept the way storage.Reader describes:
// leaves, a tree, openings, and the latest signed checkpoint.
type fakeLog struct {
	origin     string
	tree       *ledgerlog.MemoryTree
	entries    []storage.StoredEntry
	checkpoint []byte
	cpSize     uint64
}

// fakeStore is a storage.Reader in memory, with knobs to make it fail.
type fakeStore struct {
	t  testing.TB
	ks *keystore.MemoryStore

	mu     sync.Mutex
	logs   map[string]*fakeLog
	hosted map[string]bool
	// fail makes a method return an error.
	fail map[string]error
	// corruptProofs returns proofs that do not verify.
	corruptProofs bool
	// entriesGate, if set, is received from before Entries answers;
	// entriesEntered, if set, is sent to (without blocking) first.
	entriesGate, entriesEntered chan struct{}
	// entriesFailFrom makes Entries fail from this index on (0: never).
	entriesFailFrom uint64
}

func newFakeStore(t testing.TB) *fakeStore {
	t.Helper()
	ks := keystore.NewMemory()
	if _, err := ks.Generate(context.Background(), tenant, alpv1.KeyPurpose_KEY_PURPOSE_LEDGER); err != nil {
		t.Fatal(err)
	}
	return &fakeStore{t: t, ks: ks, logs: map[string]*fakeLog{}, hosted: map[string]bool{tenant: true}, fail: map[string]error{}}
}

func (f *fakeStore) log(person string) *fakeLog {
	l := f.logs[person]
	if l == nil {
		l = &fakeLog{origin: ledgerlog.Origin(tenant, person), tree: ledgerlog.NewMemoryTree(0)}
		f.logs[person] = l
	}
	return l
}

// add appends n entries to person's log: every third without a commitment,
// every fifth erased, the rest with an opening.
func (f *fakeStore) add(person string, n int) {
	f.t.Helper()
	f.mu.Lock()
	defer f.mu.Unlock()
	l := f.log(person)
	for range n {
		i := l.tree.Size()
		e := ledgerlog.Entry{V: ledgerlog.EntryVersion, Log: l.origin, Index: i, Kind: ledgerlog.KindSendRequested,
			SourceEvent: fmt.Sprintf("evt-%d", i), EnvelopeID: fmt.Sprintf("0192f0c4-7b1e-7a00-8000-%012d", i),
			Counterparty: "bo@other.example", Time: ledgerlog.FormatTime(time.Date(2026, 11, 30, 16, 4, 5, 0, time.UTC).Add(time.Duration(i) * time.Second))}
		var op *storage.Opening
		erased := false
		if i%3 != 2 {
			salt := sha256.Sum256(fmt.Appendf(nil, "salt %s %d", person, i))
			digest := sha256.Sum256(fmt.Appendf(nil, "envelope %s %d", person, i))
			e.Commitment = ledgerlog.Commit(salt[:], digest)
			if i%5 == 4 {
				erased = true
			} else {
				op = &storage.Opening{Salt: salt[:], Digest: digest[:]}
			}
		}
		leaf, err := e.Canonical()
		if err != nil {
			f.t.Fatal(err)
		}
		if _, err := l.tree.Append(leaf); err != nil {
			f.t.Fatal(err)
		}
		l.entries = append(l.entries, storage.StoredEntry{Index: i, Leaf: leaf, Time: time.Unix(1764518645+int64(i), 0), Opening: op, Erased: erased})
	}
}

// sign signs a checkpoint of person's whole log with the active key and
// makes it the latest; it returns the signed note.
func (f *fakeStore) sign(person string) []byte {
	f.t.Helper()
	f.mu.Lock()
	defer f.mu.Unlock()
	l := f.log(person)
	signed := f.signAt(l, l.tree.Size())
	l.checkpoint, l.cpSize = signed, l.tree.Size()
	return signed
}

// signAt signs a checkpoint of the first size leaves without making it
// the latest.
func (f *fakeStore) signAt(l *fakeLog, size uint64) []byte {
	f.t.Helper()
	cp, err := l.tree.Checkpoint(l.origin, size)
	if err != nil {
		f.t.Fatal(err)
	}
	return signWith(f.t, f.noteSigner(), cp)
}

func (f *fakeStore) noteSigner() note.Signer {
	f.t.Helper()
	ctx := context.Background()
	info, err := f.ks.Active(ctx, tenant, alpv1.KeyPurpose_KEY_PURPOSE_LEDGER)
	if err != nil {
		f.t.Fatal(err)
	}
	s, err := f.ks.Signer(ctx, tenant, alpv1.KeyPurpose_KEY_PURPOSE_LEDGER, info.KeyID)
	if err != nil {
		f.t.Fatal(err)
	}
	ns, err := ledgerlog.NoteSigner(tenant, s)
	if err != nil {
		f.t.Fatal(err)
	}
	return ns
}

func signWith(t testing.TB, ns note.Signer, cp ledgerlog.Checkpoint) []byte {
	t.Helper()
	signed, err := ledgerlog.SignCheckpoint(cp, ns)
	if err != nil {
		t.Fatal(err)
	}
	return signed
}

func (f *fakeStore) check(method, t string) error {
	if err := f.fail[method]; err != nil {
		return err
	}
	if !f.hosted[t] {
		return storage.ErrNotHosted
	}
	return nil
}

func (f *fakeStore) nonEmpty(person string) (*fakeLog, error) {
	l := f.logs[person]
	if l == nil || l.tree.Size() == 0 {
		return nil, storage.ErrNoLog
	}
	return l, nil
}

func (f *fakeStore) Head(_ context.Context, t, person string) (storage.Head, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.check("Head", t); err != nil {
		return storage.Head{}, err
	}
	l, err := f.nonEmpty(person)
	if err != nil {
		return storage.Head{}, err
	}
	root, err := l.tree.Root(l.tree.Size())
	if err != nil {
		return storage.Head{}, err
	}
	return storage.Head{Origin: l.origin, Size: l.tree.Size(), Root: root, SignedCheckpoint: l.checkpoint, CheckpointSize: l.cpSize}, nil
}

func (f *fakeStore) Entries(ctx context.Context, t, person string, from uint64, limit int) ([]storage.StoredEntry, error) {
	if f.entriesEntered != nil {
		select {
		case f.entriesEntered <- struct{}{}:
		default:
		}
	}
	if f.entriesGate != nil {
		select {
		case <-f.entriesGate:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.check("Entries", t); err != nil {
		return nil, err
	}
	if limit < 1 {
		return nil, storage.ErrInvalid
	}
	if f.entriesFailFrom != 0 && from >= f.entriesFailFrom {
		return nil, errors.New("fake: stream went away")
	}
	l, err := f.nonEmpty(person)
	if err != nil {
		return nil, err
	}
	if from >= uint64(len(l.entries)) {
		return nil, nil
	}
	end := min(uint64(len(l.entries)), from+uint64(limit))
	return append([]storage.StoredEntry(nil), l.entries[from:end]...), nil
}

func (f *fakeStore) HashReader(_ context.Context, t, person string) (tlog.HashReader, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.check("HashReader", t); err != nil {
		return nil, err
	}
	l, err := f.nonEmpty(person)
	if err != nil {
		return nil, err
	}
	return l.tree, nil
}

func (f *fakeStore) InclusionProof(_ context.Context, t, person string, index, size uint64) (tlog.RecordProof, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.check("InclusionProof", t); err != nil {
		return nil, err
	}
	l, err := f.nonEmpty(person)
	if err != nil {
		return nil, err
	}
	if index >= size || size > l.tree.Size() {
		return nil, storage.ErrInvalid
	}
	p, err := l.tree.InclusionProof(index, size)
	if err == nil && f.corruptProofs && len(p) > 0 {
		p[0][0] ^= 1
	}
	return p, err
}

func (f *fakeStore) ConsistencyProof(_ context.Context, t, person string, oldSize, newSize uint64) (tlog.TreeProof, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.check("ConsistencyProof", t); err != nil {
		return nil, err
	}
	l, err := f.nonEmpty(person)
	if err != nil {
		return nil, err
	}
	if oldSize == 0 || oldSize > newSize || newSize > l.tree.Size() {
		return nil, storage.ErrInvalid
	}
	p, err := l.tree.ConsistencyProof(oldSize, newSize)
	if err == nil && f.corruptProofs && len(p) > 0 {
		p[0][0] ^= 1
	}
	return p, err
}

func (f *fakeStore) PublicKeys(ctx context.Context, t string) ([]storage.PublicKey, error) {
	if err := f.check("PublicKeys", t); err != nil {
		return nil, err
	}
	infos, err := f.ks.Keys(ctx, t, alpv1.KeyPurpose_KEY_PURPOSE_LEDGER)
	if err != nil {
		return nil, err
	}
	var out []storage.PublicKey
	for _, k := range infos {
		vkey, err := ledgerlog.VerifierKey(t, k.PublicKey)
		if err != nil {
			return nil, err
		}
		out = append(out, storage.PublicKey{KeyID: ledgerlog.FormatKeyID(ledgerlog.KeyID(ledgerlog.KeyName(t), k.PublicKey)),
			Name: ledgerlog.KeyName(t), VerifierKey: vkey, PublicKey: ed25519.PublicKey(k.PublicKey), State: k.State,
			Created: k.Created, CompromisedAt: k.CompromisedAt})
	}
	return out, nil
}

// fakeBackend is the ledger service as the API sees it.
type fakeBackend struct {
	store    *fakeStore
	notReady error
}

func (b *fakeBackend) Ready() error            { return b.notReady }
func (b *fakeBackend) Storage() storage.Reader { return b.store }

// fakeAuth knows a few tokens.
type fakeAuth struct {
	tokens map[string]agentauth.Principal
}

func (a *fakeAuth) Authenticate(_ context.Context, authz string, scopes ...string) (agentauth.Principal, error) {
	if authz == "" {
		return agentauth.Principal{}, &agentauth.Error{Status: http.StatusUnauthorized, Description: "a bearer token is required",
			Challenge: accesstoken.Challenge(metadata, scopes...)}
	}
	tok, ok := accesstoken.BearerToken(authz)
	p, known := a.tokens[tok]
	if !ok || !known {
		e := &accesstoken.Error{Code: accesstoken.CodeInvalidToken, Description: "the token is not valid"}
		return agentauth.Principal{}, &agentauth.Error{Status: http.StatusUnauthorized, Code: e.Code, Description: e.Description,
			Challenge: e.WWWAuthenticate(metadata)}
	}
	for _, s := range scopes {
		has := false
		for _, g := range p.Scopes {
			has = has || g == s
		}
		if !has {
			e := &accesstoken.Error{Code: accesstoken.CodeInsufficientScope, Description: "scope " + s + " is required", Scope: s}
			return agentauth.Principal{}, &agentauth.Error{Status: http.StatusForbidden, Code: e.Code, Description: e.Description,
				Challenge: e.WWWAuthenticate(metadata)}
		}
	}
	return p, nil
}

// fakeSessions knows session cookies by value.
type fakeSessions struct {
	sessions map[string]*signin.Session
}

func (s *fakeSessions) Session(r *http.Request) (*signin.Session, error) {
	c, err := r.Cookie(signin.SessionCookie)
	if err != nil {
		return nil, signin.ErrNoSession
	}
	if sess := s.sessions[c.Value]; sess != nil {
		return sess, nil
	}
	return nil, &httpjson.Error{Status: http.StatusUnauthorized, Code: signin.CodeSessionInvalid, Message: "the session cookie is not valid; sign in again"}
}
