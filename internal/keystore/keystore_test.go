package keystore

import (
	"bytes"
	"context"
	"crypto"
	"crypto/ed25519"
	"encoding/base64"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	alpv1 "github.com/alpd-project/alpd/gen/alp/v1"
	"github.com/alpd-project/alpd/internal/alp"
)

const (
	fed    = alpv1.KeyPurpose_KEY_PURPOSE_FEDERATION
	ledger = alpv1.KeyPurpose_KEY_PURPOSE_LEDGER
	token  = alpv1.KeyPurpose_KEY_PURPOSE_TOKEN
	cookie = alpv1.KeyPurpose_KEY_PURPOSE_COOKIE
	data   = alpv1.KeyPurpose_KEY_PURPOSE_DATA

	active  = alpv1.KeyState_KEY_STATE_ACTIVE
	retired = alpv1.KeyState_KEY_STATE_RETIRED
	revoked = alpv1.KeyState_KEY_STATE_REVOKED
)

// backends runs a test against every KeyStore implementation of the package.
var backends = []struct {
	name string
	open func(t *testing.T, opts ...Option) KeyStore
}{
	{"memory", func(t *testing.T, opts ...Option) KeyStore { return NewMemory(opts...) }},
	{"file", func(t *testing.T, opts ...Option) KeyStore {
		s, err := OpenFile(filepath.Join(t.TempDir(), "keys"), GenerateKEK(), opts...)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}},
}

func forEachBackend(t *testing.T, fn func(t *testing.T, open func(t *testing.T, opts ...Option) KeyStore)) {
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) { fn(t, b.open) })
	}
}

// privateOf is the test-only accessor to a key's secret bytes.
func privateOf(t *testing.T, ks KeyStore, tenant string, purpose alpv1.KeyPurpose, id string) []byte {
	t.Helper()
	var c *core
	switch s := ks.(type) {
	case *MemoryStore:
		c = s.core
	case *FileStore:
		c = s.core
	default:
		t.Fatalf("unknown store %T", ks)
	}
	keys := c.cur.Load().keys[slot{tenant, purpose}]
	i := findID(keys, id)
	if i < 0 {
		t.Fatalf("no key %s", id)
	}
	return keys[i].secret
}

func mustGenerate(t *testing.T, ks KeyStore, tenant string, p alpv1.KeyPurpose) KeyInfo {
	t.Helper()
	k, err := ks.Generate(context.Background(), tenant, p)
	if err != nil {
		t.Fatalf("Generate(%s, %v): %v", tenant, p, err)
	}
	return k
}

func states(t *testing.T, ks KeyStore, tenant string, p alpv1.KeyPurpose) map[string]alpv1.KeyState {
	t.Helper()
	keys, err := ks.Keys(context.Background(), tenant, p)
	if err != nil {
		t.Fatal(err)
	}
	m := map[string]alpv1.KeyState{}
	for _, k := range keys {
		m[k.KeyID] = k.State
	}
	return m
}

func TestParseKEK(t *testing.T) {
	k := GenerateKEK()
	if len(k) != 32 || bytes.Equal(k, GenerateKEK()) {
		t.Fatal("GenerateKEK not 32 random bytes")
	}
	tests := []struct {
		name, in string
		ok       bool
	}{
		{"std", base64.StdEncoding.EncodeToString(k), true},
		{"raw std", base64.RawStdEncoding.EncodeToString(k), true},
		{"url", base64.URLEncoding.EncodeToString(k), true},
		{"raw url", base64.RawURLEncoding.EncodeToString(k), true},
		{"newline", EncodeKEK(k) + "\n", true},
		{"empty", "", false},
		{"spaces", "   ", false},
		{"not base64", "this is not base64 at all!", false},
		{"16 bytes", base64.StdEncoding.EncodeToString(k[:16]), false},
		{"33 bytes", base64.StdEncoding.EncodeToString(append(k, 1)), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseKEK(tt.in)
			if !tt.ok {
				if !errors.Is(err, ErrBadKEK) {
					t.Fatalf("ParseKEK = %v, want ErrBadKEK", err)
				}
				if len(tt.in) > 8 && strings.Contains(err.Error(), strings.TrimSpace(tt.in)) {
					t.Errorf("error echoes the KEK: %v", err)
				}
				return
			}
			if err != nil || !bytes.Equal(got, k) {
				t.Fatalf("ParseKEK = %x, %v", got, err)
			}
		})
	}
}

func TestLifecycle(t *testing.T) {
	forEachBackend(t, func(t *testing.T, open func(t *testing.T, opts ...Option) KeyStore) {
		ctx := context.Background()
		ks := open(t)
		const tn = "example.org"
		for _, p := range []alpv1.KeyPurpose{fed, ledger, token, cookie, data} {
			if _, err := ks.Active(ctx, tn, p); !errors.Is(err, ErrNoActiveKey) {
				t.Fatalf("Active before Generate: %v", err)
			}
			if keys, err := ks.Keys(ctx, tn, p); err != nil || len(keys) != 0 {
				t.Fatalf("Keys before Generate = %v, %v", keys, err)
			}
			k1 := mustGenerate(t, ks, tn, p)
			prefix := purposeName(p) + "-"
			if !strings.HasPrefix(k1.KeyID, prefix) || len(k1.KeyID) != len(prefix)+13 {
				t.Errorf("key id %q", k1.KeyID)
			}
			if k1.State != active || k1.Tenant != tn || k1.Purpose != p || k1.Created.IsZero() {
				t.Errorf("generated %+v", k1)
			}
			if IsAsymmetric(p) {
				if k1.Algorithm != AlgEd25519 || len(k1.PublicKey) != ed25519.PublicKeySize {
					t.Errorf("asymmetric key %+v", k1)
				}
			} else if k1.Algorithm != AlgAES256GCM || k1.PublicKey != nil {
				t.Errorf("symmetric key %+v", k1)
			}
			if _, err := ks.Generate(ctx, tn, p); !errors.Is(err, ErrActiveKeyExists) {
				t.Fatalf("second Generate: %v", err)
			}
			k2, err := ks.Rotate(ctx, tn, p)
			if err != nil {
				t.Fatal(err)
			}
			if k2.KeyID == k1.KeyID {
				t.Fatal("rotate reused the key id")
			}
			if a, err := ks.Active(ctx, tn, p); err != nil || a.KeyID != k2.KeyID {
				t.Fatalf("Active after Rotate = %v, %v", a.KeyID, err)
			}
			want := map[string]alpv1.KeyState{k1.KeyID: retired, k2.KeyID: active}
			if got := states(t, ks, tn, p); !equalStates(got, want) {
				t.Fatalf("after rotate %v, want %v", got, want)
			}
			// Retire the active key: no active key, Generate allowed again.
			if err := ks.Retire(ctx, tn, p, k2.KeyID); err != nil {
				t.Fatal(err)
			}
			if err := ks.Retire(ctx, tn, p, k2.KeyID); err != nil {
				t.Fatalf("Retire twice: %v", err)
			}
			if _, err := ks.Active(ctx, tn, p); !errors.Is(err, ErrNoActiveKey) {
				t.Fatalf("Active after Retire: %v", err)
			}
			k3 := mustGenerate(t, ks, tn, p)
			// Revoke a retired key; then it can't be retired again.
			if err := ks.Revoke(ctx, tn, p, k1.KeyID, time.Now().Add(-time.Hour)); err != nil {
				t.Fatal(err)
			}
			if err := ks.Retire(ctx, tn, p, k1.KeyID); !errors.Is(err, ErrKeyRevoked) {
				t.Fatalf("Retire revoked: %v", err)
			}
			// Revoke the active key: rotate then makes a fresh one.
			if err := ks.Revoke(ctx, tn, p, k3.KeyID, time.Time{}); err != nil {
				t.Fatal(err)
			}
			k4, err := ks.Rotate(ctx, tn, p)
			if err != nil {
				t.Fatalf("Rotate after revoke: %v", err)
			}
			want = map[string]alpv1.KeyState{k1.KeyID: revoked, k2.KeyID: retired, k3.KeyID: revoked, k4.KeyID: active}
			if got := states(t, ks, tn, p); !equalStates(got, want) {
				t.Fatalf("final %v, want %v", got, want)
			}
			keys, _ := ks.Keys(ctx, tn, p)
			for _, k := range keys {
				switch k.KeyID {
				case k3.KeyID:
					if !k.CompromisedAt.Equal(k3.Created) {
						t.Errorf("zero compromise time should mean since creation: %v vs %v", k.CompromisedAt, k3.Created)
					}
				case k1.KeyID:
					if k.CompromisedAt.IsZero() {
						t.Error("no compromise time")
					}
				}
			}
		}
	})
}

func equalStates(a, b map[string]alpv1.KeyState) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

func TestErrors(t *testing.T) {
	forEachBackend(t, func(t *testing.T, open func(t *testing.T, opts ...Option) KeyStore) {
		ctx := context.Background()
		ks := open(t)
		const tn = "example.org"
		fk := mustGenerate(t, ks, tn, fed)
		dk := mustGenerate(t, ks, tn, data)
		cancelled, cancel := context.WithCancel(ctx)
		cancel()
		tests := []struct {
			name string
			call func() error
			want error
		}{
			{"generate bad tenant", func() error { _, err := ks.Generate(ctx, "Example.ORG", fed); return err }, alp.ErrInvalidTenant},
			{"keys bad tenant", func() error { _, err := ks.Keys(ctx, "", fed); return err }, alp.ErrInvalidTenant},
			{"generate unspecified purpose", func() error { _, err := ks.Generate(ctx, tn, alpv1.KeyPurpose_KEY_PURPOSE_UNSPECIFIED); return err }, ErrWrongPurpose},
			{"generate unknown purpose", func() error { _, err := ks.Generate(ctx, tn, alpv1.KeyPurpose(99)); return err }, ErrWrongPurpose},
			{"retire unknown", func() error { return ks.Retire(ctx, tn, fed, "federation-nope") }, ErrNotFound},
			{"retire other purpose", func() error { return ks.Retire(ctx, tn, ledger, fk.KeyID) }, ErrNotFound},
			{"revoke unknown", func() error { return ks.Revoke(ctx, tn, fed, "x", time.Time{}) }, ErrNotFound},
			{"signer unknown", func() error { _, err := ks.Signer(ctx, tn, fed, "x"); return err }, ErrNotFound},
			{"signer symmetric", func() error { _, err := ks.Signer(ctx, tn, data, dk.KeyID); return err }, ErrWrongPurpose},
			{"wrap asymmetric", func() error { _, err := ks.Wrap(ctx, tn, fed, []byte("x"), nil); return err }, ErrWrongPurpose},
			{"unwrap asymmetric", func() error { _, err := ks.Unwrap(ctx, tn, token, []byte("x"), nil); return err }, ErrWrongPurpose},
			{"wrap no active", func() error { _, err := ks.Wrap(ctx, tn, cookie, []byte("x"), nil); return err }, ErrNoActiveKey},
			{"unwrap garbage", func() error { _, err := ks.Unwrap(ctx, tn, data, []byte("garbage"), nil); return err }, ErrInvalidWrapped},
			{"unwrap empty", func() error { _, err := ks.Unwrap(ctx, tn, data, nil, nil); return err }, ErrInvalidWrapped},
			{"cancelled", func() error { _, err := ks.Active(cancelled, tn, fed); return err }, context.Canceled},
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				err := tt.call()
				if !errors.Is(err, tt.want) {
					t.Fatalf("err = %v, want %v", err, tt.want)
				}
				if !strings.HasPrefix(err.Error(), "keystore: ") {
					t.Errorf("error without context: %v", err)
				}
			})
		}
		if err := ks.Revoke(ctx, tn, fed, fk.KeyID, time.Now().Add(time.Hour)); err == nil {
			t.Error("Revoke with a future compromise time succeeded")
		}
	})
}

func TestSigner(t *testing.T) {
	forEachBackend(t, func(t *testing.T, open func(t *testing.T, opts ...Option) KeyStore) {
		ctx := context.Background()
		ks := open(t)
		const tn = "example.org"
		for _, p := range []alpv1.KeyPurpose{fed, ledger, token} {
			k1 := mustGenerate(t, ks, tn, p)
			s1, err := ks.Signer(ctx, tn, p, k1.KeyID)
			if err != nil {
				t.Fatal(err)
			}
			if pub, ok := s1.Public().(ed25519.PublicKey); !ok || !bytes.Equal(pub, k1.PublicKey) {
				t.Fatalf("Public() = %v", s1.Public())
			}
			msg := []byte("alp-test/v1\x00hello")
			sig, err := s1.Sign(nil, msg, crypto.Hash(0))
			if err != nil {
				t.Fatal(err)
			}
			if !ed25519.Verify(k1.PublicKey, msg, sig) {
				t.Fatal("signature does not verify with the listed public key")
			}
			if ed25519.Verify(k1.PublicKey, []byte("other"), sig) {
				t.Fatal("signature verifies another message")
			}
			// Rotate: the old signer refuses, the old key is still listed.
			k2, err := ks.Rotate(ctx, tn, p)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := s1.Sign(nil, msg, crypto.Hash(0)); !errors.Is(err, ErrKeyNotUsable) {
				t.Fatalf("sign with retired key (old signer): %v", err)
			}
			if _, err := ks.Signer(ctx, tn, p, k1.KeyID); !errors.Is(err, ErrKeyNotUsable) {
				t.Fatalf("Signer for retired key: %v", err)
			}
			keys, _ := ks.Keys(ctx, tn, p)
			var listed bool
			for _, k := range keys {
				if k.KeyID == k1.KeyID && k.State == retired && bytes.Equal(k.PublicKey, k1.PublicKey) {
					listed = true
				}
			}
			if !listed {
				t.Fatal("retired key's public key not listed")
			}
			// The new key signs; revoking it stops its signer.
			s2, err := ks.Signer(ctx, tn, p, k2.KeyID)
			if err != nil {
				t.Fatal(err)
			}
			if sig, err := s2.Sign(nil, msg, crypto.Hash(0)); err != nil || !ed25519.Verify(k2.PublicKey, msg, sig) {
				t.Fatalf("new key: %v", err)
			}
			if err := ks.Revoke(ctx, tn, p, k2.KeyID, time.Now()); err != nil {
				t.Fatal(err)
			}
			if _, err := s2.Sign(nil, msg, crypto.Hash(0)); !errors.Is(err, ErrKeyRevoked) {
				t.Fatalf("sign with revoked key: %v", err)
			}
			if _, err := ks.Signer(ctx, tn, p, k2.KeyID); !errors.Is(err, ErrKeyRevoked) {
				t.Fatalf("Signer for revoked key: %v", err)
			}
		}
	})
}

func TestWrapUnwrap(t *testing.T) {
	forEachBackend(t, func(t *testing.T, open func(t *testing.T, opts ...Option) KeyStore) {
		ctx := context.Background()
		ks := open(t)
		const tn = "example.org"
		for _, p := range []alpv1.KeyPurpose{cookie, data} {
			k1 := mustGenerate(t, ks, tn, p)
			secret := []byte("a 32-byte data key for a person!")
			aad := []byte("person-1")
			w1, err := ks.Wrap(ctx, tn, p, secret, aad)
			if err != nil {
				t.Fatal(err)
			}
			if id, err := WrappedKeyID(w1); err != nil || id != k1.KeyID {
				t.Fatalf("WrappedKeyID = %q, %v", id, err)
			}
			if bytes.Contains(w1, secret) {
				t.Fatal("wrapped value holds the plaintext")
			}
			w1b, _ := ks.Wrap(ctx, tn, p, secret, aad)
			if bytes.Equal(w1, w1b) {
				t.Fatal("two wraps are identical (nonce reuse?)")
			}
			got, err := ks.Unwrap(ctx, tn, p, w1, aad)
			if err != nil || !bytes.Equal(got, secret) {
				t.Fatalf("Unwrap = %q, %v", got, err)
			}
			tampered := bytes.Clone(w1)
			tampered[len(tampered)-1] ^= 1
			bad := []struct {
				name    string
				tenant  string
				purpose alpv1.KeyPurpose
				wrapped []byte
				aad     []byte
				want    error
			}{
				{"wrong aad", tn, p, w1, []byte("person-2"), ErrInvalidWrapped},
				{"no aad", tn, p, w1, nil, ErrInvalidWrapped},
				{"tampered", tn, p, tampered, aad, ErrInvalidWrapped},
				{"truncated", tn, p, w1[:len(w1)-20], aad, ErrInvalidWrapped},
				{"other tenant", "other.example", p, w1, aad, ErrNotFound},
			}
			for _, b := range bad {
				if _, err := ks.Unwrap(ctx, b.tenant, b.purpose, b.wrapped, b.aad); !errors.Is(err, b.want) {
					t.Errorf("%v %s: %v, want %v", p, b.name, err, b.want)
				}
			}
			// After rotation: new wraps use the new key, old ones still unwrap.
			k2, err := ks.Rotate(ctx, tn, p)
			if err != nil {
				t.Fatal(err)
			}
			w2, _ := ks.Wrap(ctx, tn, p, secret, aad)
			if id, _ := WrappedKeyID(w2); id != k2.KeyID {
				t.Fatalf("wrap after rotate used %q", id)
			}
			if got, err := ks.Unwrap(ctx, tn, p, w1, aad); err != nil || !bytes.Equal(got, secret) {
				t.Fatalf("unwrap with retired key: %v", err)
			}
			// Revoked: refuses unwrap.
			if err := ks.Revoke(ctx, tn, p, k1.KeyID, time.Time{}); err != nil {
				t.Fatal(err)
			}
			if _, err := ks.Unwrap(ctx, tn, p, w1, aad); !errors.Is(err, ErrKeyRevoked) {
				t.Fatalf("unwrap with revoked key: %v", err)
			}
			if got, err := ks.Unwrap(ctx, tn, p, w2, aad); err != nil || !bytes.Equal(got, secret) {
				t.Fatalf("unwrap with active key: %v", err)
			}
		}
		// A cookie-wrapped value does not open as data, even with the same tenant.
		w, _ := ks.Wrap(ctx, tn, cookie, []byte("x"), nil)
		if _, err := ks.Unwrap(ctx, tn, data, w, nil); !errors.Is(err, ErrNotFound) {
			t.Fatalf("cross-purpose unwrap: %v", err)
		}
	})
}

func TestTenantIsolation(t *testing.T) {
	forEachBackend(t, func(t *testing.T, open func(t *testing.T, opts ...Option) KeyStore) {
		ctx := context.Background()
		ks := open(t)
		a, b := "a.example", "b.example"
		ka := mustGenerate(t, ks, a, fed)
		da := mustGenerate(t, ks, a, data)
		if keys, err := ks.Keys(ctx, b, fed); err != nil || len(keys) != 0 {
			t.Fatalf("tenant B sees %v, %v", keys, err)
		}
		if _, err := ks.Active(ctx, b, fed); !errors.Is(err, ErrNoActiveKey) {
			t.Fatalf("tenant B Active: %v", err)
		}
		if _, err := ks.Signer(ctx, b, fed, ka.KeyID); !errors.Is(err, ErrNotFound) {
			t.Fatalf("tenant B Signer of A's key: %v", err)
		}
		if err := ks.Retire(ctx, b, fed, ka.KeyID); !errors.Is(err, ErrNotFound) {
			t.Fatalf("tenant B Retire of A's key: %v", err)
		}
		if err := ks.Revoke(ctx, b, data, da.KeyID, time.Time{}); !errors.Is(err, ErrNotFound) {
			t.Fatalf("tenant B Revoke of A's key: %v", err)
		}
		w, err := ks.Wrap(ctx, a, data, []byte("secret"), nil)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := ks.Wrap(ctx, b, data, []byte("secret"), nil); !errors.Is(err, ErrNoActiveKey) {
			t.Fatalf("tenant B Wrap: %v", err)
		}
		mustGenerate(t, ks, b, data)
		if _, err := ks.Unwrap(ctx, b, data, w, nil); !errors.Is(err, ErrNotFound) {
			t.Fatalf("tenant B unwraps A's value: %v", err)
		}
		// Generating for B does not disturb A.
		if k, err := ks.Active(ctx, a, fed); err != nil || k.KeyID != ka.KeyID {
			t.Fatalf("tenant A active changed: %v %v", k.KeyID, err)
		}
	})
}

func TestObserver(t *testing.T) {
	forEachBackend(t, func(t *testing.T, open func(t *testing.T, opts ...Option) KeyStore) {
		ctx := context.Background()
		var mu sync.Mutex
		var events []*alpv1.KeyLifecycle
		var ks KeyStore
		ks = open(t, WithObserver(func(ctx context.Context, ev *alpv1.KeyLifecycle) error {
			// The change is visible (saved) by the time the observer runs,
			// and the observer may read the store.
			keys, err := ks.Keys(ctx, ev.GetTenant(), ev.GetPurpose())
			if err != nil {
				return err
			}
			found := false
			for _, k := range keys {
				found = found || (k.KeyID == ev.GetKeyId() && k.State == ev.GetState())
			}
			if !found {
				t.Errorf("observer called before the change is visible: %v", ev)
			}
			mu.Lock()
			defer mu.Unlock()
			events = append(events, ev)
			return nil
		}))
		const tn = "example.org"
		var secrets [][]byte
		for _, p := range []alpv1.KeyPurpose{fed, data} {
			k1 := mustGenerate(t, ks, tn, p)
			k2, err := ks.Rotate(ctx, tn, p)
			if err != nil {
				t.Fatal(err)
			}
			if err := ks.Revoke(ctx, tn, p, k1.KeyID, time.Time{}); err != nil {
				t.Fatal(err)
			}
			if err := ks.Retire(ctx, tn, p, k2.KeyID); err != nil {
				t.Fatal(err)
			}
			if err := ks.Retire(ctx, tn, p, k2.KeyID); err != nil { // no change, no event
				t.Fatal(err)
			}
			secrets = append(secrets, privateOf(t, ks, tn, p, k1.KeyID), privateOf(t, ks, tn, p, k2.KeyID))
			if IsAsymmetric(p) {
				secrets = append(secrets, ed25519.NewKeyFromSeed(privateOf(t, ks, tn, p, k1.KeyID)))
			}
			want := []struct {
				id    string
				state alpv1.KeyState
			}{{k1.KeyID, active}, {k2.KeyID, active}, {k1.KeyID, retired}, {k1.KeyID, revoked}, {k2.KeyID, retired}}
			mu.Lock()
			got := events
			events = nil
			mu.Unlock()
			if len(got) != len(want) {
				t.Fatalf("%v: %d events, want %d: %v", p, len(got), len(want), got)
			}
			for i, w := range want {
				ev := got[i]
				if ev.GetKeyId() != w.id || ev.GetState() != w.state || ev.GetTenant() != tn || ev.GetPurpose() != p {
					t.Errorf("%v event %d = %v, want %s %v", p, i, ev, w.id, w.state)
				}
				if IsAsymmetric(p) != (len(ev.GetPublicKey()) == ed25519.PublicKeySize) {
					t.Errorf("event %d public key %x", i, ev.GetPublicKey())
				}
				if ev.GetCreated() == nil || (w.state == revoked) != (ev.GetCompromisedAt() != nil) {
					t.Errorf("event %d times %v", i, ev)
				}
				bin, err := proto.Marshal(ev)
				if err != nil {
					t.Fatal(err)
				}
				js, err := protojson.Marshal(ev)
				if err != nil {
					t.Fatal(err)
				}
				for _, s := range secrets {
					b64 := base64.StdEncoding.EncodeToString(s)
					if bytes.Contains(bin, s) || bytes.Contains(js, []byte(b64)) || bytes.Contains(js, []byte(base64.RawURLEncoding.EncodeToString(s))) {
						t.Fatalf("event %d carries private key material: %v", i, ev)
					}
				}
			}
		}
	})
}

func TestObserverFailure(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	path := filepath.Join(dir, "keys")
	kek := GenerateKEK()
	boom := errors.New("bus down")
	calls := 0
	ks, err := OpenFile(path, kek, WithObserver(func(context.Context, *alpv1.KeyLifecycle) error {
		calls++
		return boom
	}))
	if err != nil {
		t.Fatal(err)
	}
	k, err := ks.Generate(ctx, "example.org", fed)
	var oe *ObserverError
	if !errors.As(err, &oe) || !errors.Is(err, boom) || len(oe.Pending) != 1 || oe.Pending[0].GetKeyId() != k.KeyID {
		t.Fatalf("Generate = %+v, %v", k, err)
	}
	if k.KeyID == "" {
		t.Fatal("no key info returned with the observer error")
	}
	k2, err := ks.Rotate(ctx, "example.org", fed)
	if !errors.As(err, &oe) || len(oe.Pending) != 2 || oe.Pending[0].GetKeyId() != k2.KeyID ||
		oe.Pending[1].GetKeyId() != k.KeyID || oe.Pending[1].GetState() != retired {
		t.Fatalf("Rotate error %v pending %v", err, oe)
	}
	if calls != 2 {
		t.Fatalf("observer called %d times, want 2 (stop at the first failure)", calls)
	}
	// The changes were saved nonetheless.
	re, err := OpenFile(path, kek)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]alpv1.KeyState{k.KeyID: retired, k2.KeyID: active}
	if got := states(t, re, "example.org", fed); !equalStates(got, want) {
		t.Fatalf("after reopen %v, want %v", got, want)
	}
}

func TestConcurrent(t *testing.T) {
	forEachBackend(t, func(t *testing.T, open func(t *testing.T, opts ...Option) KeyStore) {
		ctx := context.Background()
		ks := open(t)
		const tn = "example.org"
		mustGenerate(t, ks, tn, data)
		mustGenerate(t, ks, tn, fed)
		var wg sync.WaitGroup
		errs := make(chan error, 100)
		for i := range 8 {
			wg.Go(func() {
				for range 10 {
					if i%4 == 0 {
						if _, err := ks.Rotate(ctx, tn, data); err != nil {
							errs <- err
						}
						continue
					}
					w, err := ks.Wrap(ctx, tn, data, []byte("k"), nil)
					if err != nil {
						errs <- err
						continue
					}
					if _, err := ks.Unwrap(ctx, tn, data, w, nil); err != nil {
						errs <- err
					}
					if a, err := ks.Active(ctx, tn, fed); err == nil {
						if s, err := ks.Signer(ctx, tn, fed, a.KeyID); err == nil {
							s.Sign(nil, []byte("m"), crypto.Hash(0))
						}
					}
				}
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Error(err)
		}
		keys, _ := ks.Keys(ctx, tn, data)
		n := 0
		for _, k := range keys {
			if k.State == active {
				n++
			}
		}
		if len(keys) != 21 || n != 1 {
			t.Fatalf("%d keys, %d active; want 21 and 1", len(keys), n)
		}
	})
}

func TestFileModeOnDisk(t *testing.T) {
	path := filepath.Join(t.TempDir(), "keys")
	if _, err := OpenFile(path, GenerateKEK()); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Fatalf("mode %04o, want 0600", fi.Mode().Perm())
	}
	// The key file and its lock file, nothing else.
	entries, _ := os.ReadDir(filepath.Dir(path))
	if len(entries) != 2 || entries[0].Name() != "keys" || entries[1].Name() != "keys.lock" {
		t.Fatalf("want keys and keys.lock, found %v", entries)
	}
	if fi, err := os.Stat(path + ".lock"); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("lock file: %v, %v", fi, err)
	}
}
