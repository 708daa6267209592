package seal

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/proto"

	alpv1 "github.com/alpd-project/alpd/gen/alp/v1"
	"github.com/alpd-project/alpd/internal/alp"
	"github.com/alpd-project/alpd/internal/keystore"
	"github.com/alpd-project/alpd/internal/natstest"
)

const (
	bucket = "alp_test_datakeys"
	tn     = "example.org"
	dataP  = alpv1.KeyPurpose_KEY_PURPOSE_DATA
)

type rig struct {
	srv *server.Server
	js  jetstream.JetStream
	kv  jetstream.KeyValue
	ks  *keystore.MemoryStore
}

func newRig(t *testing.T) *rig {
	t.Helper()
	ctx := context.Background()
	s := natstest.RunJetStream(t)
	js, err := jetstream.New(natstest.Connect(t, s))
	if err != nil {
		t.Fatal(err)
	}
	kv, err := js.CreateKeyValue(ctx, BucketConfig(bucket))
	if err != nil {
		t.Fatal(err)
	}
	ks := keystore.NewMemory()
	for _, tenant := range []string{tn, "other.example"} {
		if _, err := ks.Generate(ctx, tenant, dataP); err != nil {
			t.Fatal(err)
		}
	}
	return &rig{srv: s, js: js, kv: kv, ks: ks}
}

// replica is another Sealer on its own connection, as another broker
// replica would have.
func (e *rig) replica(t *testing.T, opts ...Option) *Sealer {
	t.Helper()
	js, err := jetstream.New(natstest.Connect(t, e.srv))
	if err != nil {
		t.Fatal(err)
	}
	kv, err := js.KeyValue(context.Background(), bucket)
	if err != nil {
		t.Fatal(err)
	}
	return New(kv, e.ks, opts...)
}

func mustSeal(t *testing.T, s *Sealer, tenant, person string, pt, aad []byte) *alpv1.SealedBody {
	t.Helper()
	b, err := s.Seal(context.Background(), tenant, person, pt, aad)
	if err != nil {
		t.Fatalf("Seal(%s, %s): %v", tenant, person, err)
	}
	return b
}

func mustOpen(t *testing.T, s *Sealer, b *alpv1.SealedBody, aad, want []byte) {
	t.Helper()
	got, err := s.Open(context.Background(), b, aad)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("Open = %q, want %q", got, want)
	}
}

// The bucket's layout, as internal/personkeys stores it.
func kvKey(tenant, person string) string { return tenant + "." + person }

type storedEntry struct {
	Format    int    `json:"format"`
	Version   uint32 `json:"version"`
	Wrapped   []byte `json:"wrapped"`
	Destroyed bool   `json:"destroyed"`
}

func parseEntry(b []byte) (storedEntry, error) {
	var e storedEntry
	err := json.Unmarshal(b, &e)
	if err == nil && e.Format != 1 {
		err = fmt.Errorf("format %d", e.Format)
	}
	return e, err
}

func wrapAAD(tenant, person string, version uint32) []byte {
	return binary.BigEndian.AppendUint32(lp(nil, []byte("alp-seal/data-key/v1"), []byte(tenant), []byte(person)), version)
}

// storedKey returns the wrapped data key in the bucket and its unwrapped form.
func (e *rig) storedKey(t *testing.T, tenant, person string) (wrapped, raw []byte) {
	t.Helper()
	ent, err := e.kv.Get(context.Background(), kvKey(tenant, person))
	if err != nil {
		t.Fatal(err)
	}
	v, err := parseEntry(ent.Value())
	if err != nil || v.Destroyed {
		t.Fatalf("stored value %s: %v", ent.Value(), err)
	}
	raw, err = e.ks.Unwrap(context.Background(), tenant, dataP, v.Wrapped, wrapAAD(tenant, person, v.Version))
	if err != nil {
		t.Fatal(err)
	}
	return v.Wrapped, raw
}

func TestBucketConfig(t *testing.T) {
	c := BucketConfig("alp_x_datakeys")
	if c.Bucket != "alp_x_datakeys" || c.History != 1 || c.Storage != jetstream.FileStorage || c.TTL != 0 {
		t.Fatalf("BucketConfig = %+v", c)
	}
}

func TestRoundTrip(t *testing.T) {
	e := newRig(t)
	s := New(e.kv, e.ks)
	tests := []struct {
		name    string
		pt, aad []byte
	}{
		{"empty", nil, []byte("env-1")},
		{"small", []byte(`{"type":"meeting.request"}`), []byte("env-2")},
		{"no aad", []byte("hello"), nil},
		{"large", bytes.Repeat([]byte("x"), 256<<10), []byte("env-3")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := mustSeal(t, s, tn, "p1", tt.pt, tt.aad)
			if b.GetTenant() != tn || b.GetPersonId() != "p1" || b.GetKeyVersion() != 1 || len(b.GetNonce()) != 12 {
				t.Fatalf("sealed body %v", b)
			}
			if len(tt.pt) > 4 && bytes.Contains(b.GetCiphertext(), tt.pt[:5]) {
				t.Fatal("ciphertext holds plaintext")
			}
			mustOpen(t, s, b, tt.aad, tt.pt)
			// Through the wire form too, and from a fresh Sealer.
			bin, _ := proto.Marshal(b)
			var back alpv1.SealedBody
			if err := proto.Unmarshal(bin, &back); err != nil {
				t.Fatal(err)
			}
			mustOpen(t, e.replica(t), &back, tt.aad, tt.pt)
		})
	}
	b1 := mustSeal(t, s, tn, "p1", []byte("same"), nil)
	b2 := mustSeal(t, s, tn, "p1", []byte("same"), nil)
	if bytes.Equal(b1.GetNonce(), b2.GetNonce()) || bytes.Equal(b1.GetCiphertext(), b2.GetCiphertext()) {
		t.Fatal("two seals of one plaintext are identical")
	}
}

func TestOpenFailures(t *testing.T) {
	e := newRig(t)
	s := New(e.kv, e.ks)
	ctx := context.Background()
	aad := []byte("env-1")
	b := mustSeal(t, s, tn, "p1", []byte("secret body"), aad)
	mustSeal(t, s, tn, "p2", []byte("x"), nil)
	mustSeal(t, s, "other.example", "p1", []byte("x"), nil)
	mod := func(f func(*alpv1.SealedBody)) *alpv1.SealedBody {
		c := proto.Clone(b).(*alpv1.SealedBody)
		f(c)
		return c
	}
	tests := []struct {
		name string
		body *alpv1.SealedBody
		aad  []byte
		want error
	}{
		{"wrong aad", b, []byte("env-2"), ErrOpenFailed},
		{"missing aad", b, nil, ErrOpenFailed},
		{"tampered ciphertext", mod(func(c *alpv1.SealedBody) { c.Ciphertext[0] ^= 1 }), aad, ErrOpenFailed},
		{"tampered tag", mod(func(c *alpv1.SealedBody) { c.Ciphertext[len(c.Ciphertext)-1] ^= 1 }), aad, ErrOpenFailed},
		{"truncated", mod(func(c *alpv1.SealedBody) { c.Ciphertext = c.Ciphertext[:len(c.Ciphertext)-1] }), aad, ErrOpenFailed},
		{"tampered nonce", mod(func(c *alpv1.SealedBody) { c.Nonce[0] ^= 1 }), aad, ErrOpenFailed},
		{"moved to another person", mod(func(c *alpv1.SealedBody) { c.PersonId = "p2" }), aad, ErrOpenFailed},
		{"moved to another tenant", mod(func(c *alpv1.SealedBody) { c.Tenant = "other.example" }), aad, ErrOpenFailed},
		{"unknown person", mod(func(c *alpv1.SealedBody) { c.PersonId = "nobody" }), aad, ErrNoDataKey},
		{"other key version", mod(func(c *alpv1.SealedBody) { c.KeyVersion = 2 }), aad, ErrNoDataKey},
		{"no key version", mod(func(c *alpv1.SealedBody) { c.KeyVersion = 0 }), aad, ErrMalformed},
		{"short nonce", mod(func(c *alpv1.SealedBody) { c.Nonce = c.Nonce[:8] }), aad, ErrMalformed},
		{"no ciphertext", mod(func(c *alpv1.SealedBody) { c.Ciphertext = nil }), aad, ErrMalformed},
		{"nil body", nil, aad, ErrMalformed},
		{"bad person id", mod(func(c *alpv1.SealedBody) { c.PersonId = "p1.x" }), aad, alp.ErrInvalidPersonID},
		{"bad tenant", mod(func(c *alpv1.SealedBody) { c.Tenant = "EXAMPLE.org" }), aad, alp.ErrInvalidTenant},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pt, err := s.Open(ctx, tt.body, tt.aad)
			if !errors.Is(err, tt.want) {
				t.Fatalf("Open = %q, %v; want %v", pt, err, tt.want)
			}
			if !strings.HasPrefix(err.Error(), "seal: ") {
				t.Errorf("error without context: %v", err)
			}
		})
	}
}

func TestInvalidIDs(t *testing.T) {
	e := newRig(t)
	s := New(e.kv, e.ks)
	ctx := context.Background()
	tests := []struct {
		tenant, person string
		want           error
	}{
		{"", "p1", alp.ErrInvalidTenant},
		{"Example.org", "p1", alp.ErrInvalidTenant},
		{"example.org.", "p1", alp.ErrInvalidTenant},
		{"exa*mple.org", "p1", alp.ErrInvalidTenant},
		{"example.org", "", alp.ErrInvalidPersonID},
		{"example.org", "ana@example.org", alp.ErrInvalidPersonID},
		{"example.org", "a.b", alp.ErrInvalidPersonID},
		{"example.org", "a b", alp.ErrInvalidPersonID},
		{"example.org", "a*", alp.ErrInvalidPersonID},
		{"example.org", "a>", alp.ErrInvalidPersonID},
		{"example.org", "a/b", alp.ErrInvalidPersonID},
		{"example.org", "é", alp.ErrInvalidPersonID},
		{"example.org", strings.Repeat("a", 129), alp.ErrInvalidPersonID},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("%q/%q", tt.tenant, tt.person), func(t *testing.T) {
			if _, err := s.Seal(ctx, tt.tenant, tt.person, []byte("x"), nil); !errors.Is(err, tt.want) {
				t.Errorf("Seal: %v, want %v", err, tt.want)
			}
			if err := s.Destroy(ctx, tt.tenant, tt.person); !errors.Is(err, tt.want) {
				t.Errorf("Destroy: %v, want %v", err, tt.want)
			}
			body := &alpv1.SealedBody{Tenant: tt.tenant, PersonId: tt.person, KeyVersion: 1, Nonce: make([]byte, 12), Ciphertext: make([]byte, 16)}
			if _, err := s.Open(ctx, body, nil); !errors.Is(err, tt.want) {
				t.Errorf("Open: %v, want %v", err, tt.want)
			}
		})
	}
	keys, err := e.kv.ListKeys(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for k := range keys.Keys() {
		t.Errorf("bad input left key %q in the bucket", k)
	}
	// Edge of the valid range.
	for _, p := range []string{"a", strings.Repeat("Z", 128), "0190a5e4-7b1c-7d2e-9f00-1234567890ab", "ab_CD-09"} {
		b := mustSeal(t, s, tn, p, []byte("x"), nil)
		mustOpen(t, s, b, nil, []byte("x"))
	}
}

func TestPersonsHaveOwnKeys(t *testing.T) {
	e := newRig(t)
	s := New(e.kv, e.ks)
	mustSeal(t, s, tn, "p1", []byte("x"), nil)
	mustSeal(t, s, tn, "p2", []byte("x"), nil)
	mustSeal(t, s, "other.example", "p1", []byte("x"), nil)
	w1, k1 := e.storedKey(t, tn, "p1")
	w2, k2 := e.storedKey(t, tn, "p2")
	w3, k3 := e.storedKey(t, "other.example", "p1")
	if len(k1) != 32 || bytes.Equal(k1, k2) || bytes.Equal(k1, k3) || bytes.Equal(k2, k3) {
		t.Fatal("persons share a data key")
	}
	if bytes.Equal(w1, w2) || bytes.Equal(w1, w3) {
		t.Fatal("wrapped keys repeat")
	}
	// The wrapped key is bound to its person: swapping values does not unwrap.
	if _, err := e.ks.Unwrap(context.Background(), tn, dataP, w1, wrapAAD(tn, "p2", 1)); !errors.Is(err, keystore.ErrInvalidWrapped) {
		t.Fatalf("p1's wrapped key unwrapped as p2's: %v", err)
	}
	// The stored value holds no raw key.
	ent, _ := e.kv.Get(context.Background(), kvKey(tn, "p1"))
	if containsAny(ent.Value(), k1) || strings.Contains(string(ent.Value()), fmt.Sprintf("%x", k1)) {
		t.Fatal("bucket holds the raw data key")
	}
}

// containsAny reports whether b holds one of needles, raw or in base64 (the
// stored JSON value holds the wrapped key in base64).
func containsAny(b []byte, needles ...[]byte) bool {
	for _, n := range needles {
		if bytes.Contains(b, n) || bytes.Contains(b, []byte(base64.StdEncoding.EncodeToString(n))) {
			return true
		}
	}
	return false
}

// streamHolds reports whether any message of the bucket's stream contains
// one of needles.
func streamHolds(t *testing.T, e *rig, needles ...[]byte) bool {
	t.Helper()
	ctx := context.Background()
	st, err := e.js.Stream(ctx, "KV_"+bucket)
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for seq := info.State.FirstSeq; seq <= info.State.LastSeq && seq > 0; seq++ {
		m, err := st.GetMsg(ctx, seq)
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		if containsAny(m.Data, needles...) {
			return true
		}
	}
	return false
}

func TestDestroy(t *testing.T) {
	e := newRig(t)
	ctx := context.Background()
	var events []*alpv1.DataKeyDestroyed
	s := New(e.kv, e.ks, WithDestroyObserver(func(_ context.Context, ev *alpv1.DataKeyDestroyed) error {
		events = append(events, ev)
		return nil
	}))
	aad := []byte("env-1")
	b1 := mustSeal(t, s, tn, "p1", []byte("first"), aad)
	b2 := mustSeal(t, s, tn, "p1", []byte("second"), aad)
	other := mustSeal(t, s, tn, "p2", []byte("keep me"), aad)
	wrapped, raw := e.storedKey(t, tn, "p1")
	if !streamHolds(t, e, wrapped) {
		t.Fatal("test is blind: wrapped key not found in the stream before Destroy")
	}
	if err := s.Destroy(ctx, tn, "p1"); err != nil {
		t.Fatal(err)
	}
	if len(events) != 1 || events[0].GetTenant() != tn || events[0].GetPersonId() != "p1" {
		t.Fatalf("observer events %v", events)
	}
	fresh := e.replica(t)
	for name, sl := range map[string]*Sealer{"same": s, "fresh": fresh} {
		for _, b := range []*alpv1.SealedBody{b1, b2} {
			if _, err := sl.Open(ctx, b, aad); !errors.Is(err, ErrKeyDestroyed) {
				t.Fatalf("%s sealer: Open after Destroy: %v", name, err)
			}
		}
		if _, err := sl.Seal(ctx, tn, "p1", []byte("new"), aad); !errors.Is(err, ErrKeyDestroyed) {
			t.Fatalf("%s sealer: Seal after Destroy: %v", name, err)
		}
		mustOpen(t, sl, other, aad, []byte("keep me"))
	}

	// The bucket keeps only the tombstone: no key material in value,
	// history or any message of the stream.
	ent, err := e.kv.Get(ctx, kvKey(tn, "p1"))
	if err != nil {
		t.Fatal(err)
	}
	var tomb map[string]any
	if err := json.Unmarshal(ent.Value(), &tomb); err != nil || tomb["destroyed"] != true || tomb["wrapped"] != nil {
		t.Fatalf("tombstone %s: %v", ent.Value(), err)
	}
	hist, err := e.kv.History(ctx, kvKey(tn, "p1"))
	if err != nil {
		t.Fatal(err)
	}
	if len(hist) != 1 || !bytes.Equal(hist[0].Value(), ent.Value()) {
		t.Fatalf("history holds %d entries", len(hist))
	}
	if streamHolds(t, e, wrapped, raw) {
		t.Fatal("the bucket's stream still holds the wrapped data key")
	}

	// Idempotent, and the observer hears it again (for retries).
	if err := s.Destroy(ctx, tn, "p1"); err != nil {
		t.Fatal(err)
	}
	if h, _ := e.kv.History(ctx, kvKey(tn, "p1")); len(h) != 1 {
		t.Fatalf("second Destroy left %d history entries", len(h))
	}
	if len(events) != 2 {
		t.Fatalf("observer called %d times", len(events))
	}
	// Destroying a person without a key forbids sealing for them.
	if err := fresh.Destroy(ctx, tn, "p3"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Seal(ctx, tn, "p3", []byte("x"), nil); !errors.Is(err, ErrKeyDestroyed) {
		t.Fatalf("Seal for a person destroyed before their first seal: %v", err)
	}
}

func TestDestroyObserverFailure(t *testing.T) {
	e := newRig(t)
	ctx := context.Background()
	boom := errors.New("bus down")
	fail := true
	s := New(e.kv, e.ks, WithDestroyObserver(func(context.Context, *alpv1.DataKeyDestroyed) error {
		if fail {
			return boom
		}
		return nil
	}))
	b := mustSeal(t, s, tn, "p1", []byte("x"), nil)
	if err := s.Destroy(ctx, tn, "p1"); !errors.Is(err, boom) {
		t.Fatalf("Destroy = %v, want the observer's error", err)
	}
	if _, err := e.replica(t).Open(ctx, b, nil); !errors.Is(err, ErrKeyDestroyed) {
		t.Fatalf("key not destroyed after observer failure: %v", err)
	}
	fail = false
	if err := s.Destroy(ctx, tn, "p1"); err != nil {
		t.Fatalf("retry: %v", err)
	}
}

func TestConcurrentCreate(t *testing.T) {
	e := newRig(t)
	a, b := e.replica(t), e.replica(t)
	const n = 16
	bodies := make([]*alpv1.SealedBody, 2*n)
	errs := make([]error, 2*n)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range 2 * n {
		s := a
		if i%2 == 1 {
			s = b
		}
		wg.Go(func() {
			<-start
			bodies[i], errs[i] = s.Seal(context.Background(), tn, "newcomer", fmt.Appendf(nil, "msg %d", i), []byte("env"))
		})
	}
	close(start)
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("seal %d: %v", i, err)
		}
	}
	fresh := e.replica(t)
	for i, body := range bodies {
		for _, s := range []*Sealer{a, b, fresh} {
			mustOpen(t, s, body, []byte("env"), fmt.Appendf(nil, "msg %d", i))
		}
	}
	ent, err := e.kv.Get(context.Background(), kvKey(tn, "newcomer"))
	if err != nil {
		t.Fatal(err)
	}
	if ent.Revision() == 0 {
		t.Fatal("no revision")
	}
	hist, _ := e.kv.History(context.Background(), kvKey(tn, "newcomer"))
	if len(hist) != 1 {
		t.Fatalf("%d history entries", len(hist))
	}
}

func TestConcurrentSealAndDestroy(t *testing.T) {
	e := newRig(t)
	ctx := context.Background()
	a, b := e.replica(t, WithCacheTTL(0)), e.replica(t, WithCacheTTL(0))
	var wg sync.WaitGroup
	var mu sync.Mutex
	var sealed []*alpv1.SealedBody
	for i := range 8 {
		wg.Go(func() {
			for range 10 {
				body, err := a.Seal(ctx, tn, fmt.Sprintf("p%d", i%2), []byte("x"), nil)
				if err != nil {
					if !errors.Is(err, ErrKeyDestroyed) {
						t.Error(err)
					}
					continue
				}
				mu.Lock()
				sealed = append(sealed, body)
				mu.Unlock()
			}
		})
	}
	wg.Go(func() {
		if err := b.Destroy(ctx, tn, "p0"); err != nil {
			t.Error(err)
		}
	})
	wg.Wait()
	// Once Destroy has returned, nothing of p0 opens, whenever it was sealed.
	fresh := e.replica(t)
	for _, body := range sealed {
		_, err := fresh.Open(ctx, body, nil)
		if body.GetPersonId() == "p0" && !errors.Is(err, ErrKeyDestroyed) {
			t.Fatalf("p0 body after Destroy: %v", err)
		}
		if body.GetPersonId() == "p1" && err != nil {
			t.Fatalf("p1 body: %v", err)
		}
	}
	if _, err := a.Seal(ctx, tn, "p0", []byte("x"), nil); !errors.Is(err, ErrKeyDestroyed) {
		t.Fatalf("Seal after Destroy: %v", err)
	}
}

type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time      { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) add(d time.Duration) { c.mu.Lock(); defer c.mu.Unlock(); c.t = c.t.Add(d) }

func TestCacheTTLBoundsRemoteDestroy(t *testing.T) {
	e := newRig(t)
	ctx := context.Background()
	clk := &clock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	cachedSealer := e.replica(t, WithClock(clk.now), WithCacheTTL(30*time.Second))
	uncached := e.replica(t, WithCacheTTL(0))
	other := e.replica(t)
	b := mustSeal(t, cachedSealer, tn, "p1", []byte("x"), nil)
	mustOpen(t, uncached, b, nil, []byte("x"))
	if err := other.Destroy(ctx, tn, "p1"); err != nil {
		t.Fatal(err)
	}
	if _, err := uncached.Open(ctx, b, nil); !errors.Is(err, ErrKeyDestroyed) {
		t.Fatalf("uncached Sealer after remote Destroy: %v", err)
	}
	// Within the TTL the cached key still works (the documented bound) ...
	clk.add(29 * time.Second)
	mustOpen(t, cachedSealer, b, nil, []byte("x"))
	// ... and not after it.
	clk.add(2 * time.Second)
	if _, err := cachedSealer.Open(ctx, b, nil); !errors.Is(err, ErrKeyDestroyed) {
		t.Fatalf("cached Sealer after TTL: %v", err)
	}
	if _, err := cachedSealer.Seal(ctx, tn, "p1", []byte("x"), nil); !errors.Is(err, ErrKeyDestroyed) {
		t.Fatalf("cached Sealer Seal after TTL: %v", err)
	}
}

func TestCacheBounded(t *testing.T) {
	e := newRig(t)
	s := New(e.kv, e.ks, WithCacheSize(3))
	var bodies []*alpv1.SealedBody
	for i := range 10 {
		bodies = append(bodies, mustSeal(t, s, tn, fmt.Sprintf("p%d", i), []byte("x"), nil))
	}
	if n := s.keys.CacheLen(); n != 3 {
		t.Fatalf("cache holds %d entries, want 3", n)
	}
	for _, b := range bodies { // evicted keys are read again from the bucket
		mustOpen(t, s, b, nil, []byte("x"))
	}
}

func TestTenantDataKey(t *testing.T) {
	e := newRig(t)
	ctx := context.Background()
	s := New(e.kv, e.ks, WithCacheTTL(0))
	// No DATA key for the tenant: a clear error and nothing stored.
	if _, err := s.Seal(ctx, "nokey.example", "p1", []byte("x"), nil); !errors.Is(err, keystore.ErrNoActiveKey) {
		t.Fatalf("Seal without tenant DATA key: %v", err)
	}
	if _, err := e.kv.Get(ctx, kvKey("nokey.example", "p1")); !errors.Is(err, jetstream.ErrKeyNotFound) {
		t.Fatalf("failed Seal stored something: %v", err)
	}
	// Rotating the tenant's DATA key keeps old persons readable.
	old := mustSeal(t, s, tn, "p1", []byte("old"), nil)
	oldKEK, _ := e.ks.Active(ctx, tn, dataP)
	if _, err := e.ks.Rotate(ctx, tn, dataP); err != nil {
		t.Fatal(err)
	}
	mustOpen(t, s, old, nil, []byte("old"))
	fresh := mustSeal(t, s, tn, "p2", []byte("new"), nil)
	mustOpen(t, s, fresh, nil, []byte("new"))
	// Revoking the old DATA key makes what it wrapped unusable.
	if err := e.ks.Revoke(ctx, tn, dataP, oldKEK.KeyID, time.Time{}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Open(ctx, old, nil); !errors.Is(err, keystore.ErrKeyRevoked) {
		t.Fatalf("Open with a revoked tenant key: %v", err)
	}
	mustOpen(t, s, fresh, nil, []byte("new"))
}

func TestCorruptStoredValue(t *testing.T) {
	e := newRig(t)
	ctx := context.Background()
	s := New(e.kv, e.ks, WithCacheTTL(0))
	if _, err := e.kv.Put(ctx, kvKey(tn, "p1"), []byte("not json")); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Seal(ctx, tn, "p1", []byte("x"), nil); err == nil || !strings.Contains(err.Error(), "malformed") {
		t.Fatalf("Seal over a corrupt value: %v", err)
	}
	if err := s.Destroy(ctx, tn, "p1"); err != nil { // erasure still works
		t.Fatal(err)
	}
	if _, err := s.Seal(ctx, tn, "p1", []byte("x"), nil); !errors.Is(err, ErrKeyDestroyed) {
		t.Fatalf("Seal after Destroy: %v", err)
	}
}

func TestDigest(t *testing.T) {
	e := newRig(t)
	ctx := context.Background()
	s := New(e.kv, e.ks)
	d := func(sl *Sealer, person, domain string, parts ...string) []byte {
		t.Helper()
		bs := make([][]byte, len(parts))
		for i, p := range parts {
			bs[i] = []byte(p)
		}
		out, err := sl.Digest(ctx, tn, person, domain, bs...)
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	first := d(s, "p1", "test/v1", "agent-1", "k-42")
	if len(first) != 32 || !bytes.Equal(first, d(s, "p1", "test/v1", "agent-1", "k-42")) {
		t.Fatalf("digest %x is not a stable 32-byte value", first)
	}
	// Another replica reads the same key and gets the same digest.
	if !bytes.Equal(first, d(e.replica(t), "p1", "test/v1", "agent-1", "k-42")) {
		t.Error("a replica computes another digest")
	}
	for name, other := range map[string][]byte{
		"another person": d(s, "p2", "test/v1", "agent-1", "k-42"),
		"another domain": d(s, "p1", "test/v2", "agent-1", "k-42"),
		"other parts":    d(s, "p1", "test/v1", "agent-1k", "-42"),
	} {
		if bytes.Equal(first, other) {
			t.Errorf("%s gives the same digest", name)
		}
	}
	if err := s.Destroy(ctx, tn, "p1"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Digest(ctx, tn, "p1", "test/v1", []byte("agent-1")); !errors.Is(err, ErrKeyDestroyed) {
		t.Fatalf("Digest after Destroy: %v", err)
	}
	if _, err := s.Digest(ctx, tn, "bad id", "test/v1"); !errors.Is(err, alp.ErrInvalidPersonID) {
		t.Fatalf("Digest for an invalid person: %v", err)
	}
}
