package broker_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	alpv1 "github.com/alpd-project/alpd/gen/alp/v1"
	"github.com/alpd-project/alpd/internal/identitystore"
	"github.com/alpd-project/alpd/internal/keystore"
	"github.com/alpd-project/alpd/internal/natsauth"
	"github.com/alpd-project/alpd/internal/natstest"
)

// recorder hands out crypto/rand bytes and remembers every chunk of key
// size, so the test knows all private key material the store generated.
type recorder struct {
	mu     sync.Mutex
	chunks [][]byte
}

func (r *recorder) Read(p []byte) (int, error) {
	n, err := rand.Read(p)
	if n >= 32 {
		r.mu.Lock()
		r.chunks = append(r.chunks, bytes.Clone(p[:n]))
		r.mu.Unlock()
	}
	return n, err
}

// encodings are the forms a key could leak in.
func encodings(b []byte) [][]byte {
	return [][]byte{
		b,
		[]byte(base64.StdEncoding.EncodeToString(b)),
		[]byte(base64.RawStdEncoding.EncodeToString(b)),
		[]byte(base64.RawURLEncoding.EncodeToString(b)),
		[]byte(hex.EncodeToString(b)),
	}
}

// allStreamBytes reads every message (data and headers) of every stream on
// the server, KV buckets and dead letters included.
func allStreamBytes(t *testing.T, js jetstream.JetStream) []byte {
	t.Helper()
	ctx := context.Background()
	var all bytes.Buffer
	names := js.StreamNames(ctx)
	for name := range names.Name() {
		s, err := js.Stream(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		info, err := s.Info(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for seq := info.State.FirstSeq; seq <= info.State.LastSeq && info.State.Msgs > 0; seq++ {
			m, err := s.GetMsg(ctx, seq)
			if err != nil {
				continue // deleted (purged) message
			}
			all.Write(m.Data)
			for k, vs := range m.Header {
				all.WriteString(k)
				for _, v := range vs {
					all.WriteString(v)
				}
			}
		}
	}
	if err := names.Err(); err != nil {
		t.Fatal(err)
	}
	return all.Bytes()
}

// TestNoPrivateKeyBytesOnAnyStream runs a broker whose key store draws its
// randomness through a recorder, exercises key provisioning, rotation,
// sealing and erasure, and scans every stream for any recorded secret.
func TestNoPrivateKeyBytesOnAnyStream(t *testing.T) {
	s := natstest.RunJetStream(t)
	nc := natstest.Connect(t, s)
	rec := &recorder{}
	ks := keystore.NewMemory(keystore.WithRandom(rec))
	r := startWith(t, nc, prometheus.NewRegistry(), ks, "alpd", "example.org")
	ctx := context.Background()

	// Rotate a signing key through identity so both the retired and the new
	// key are published.
	info, err := ks.Rotate(ctx, "example.org", alpv1.KeyPurpose_KEY_PURPOSE_FEDERATION)
	if err != nil {
		t.Fatal(err)
	}
	keys, _ := ks.Keys(ctx, "example.org", alpv1.KeyPurpose_KEY_PURPOSE_FEDERATION)
	for _, k := range keys {
		if err := r.b.Identity().PublishKey(ctx, k.Lifecycle()); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := r.b.Ingress().Submit(ctx, submission("example.org", "p1", "")); err != nil {
		t.Fatal(err)
	}
	if _, err := r.b.Ingress().Submit(ctx, submission("example.org", "p2", "")); err != nil {
		t.Fatal(err)
	}
	if err := r.b.Identity().Erase(ctx, "example.org", "p2", "op"); err != nil {
		t.Fatal(err)
	}

	streamBytes := allStreamBytes(t, r.b.Bus().JetStream())
	// Positive control: public keys are on the bus, so the scan can see keys.
	if !bytes.Contains(streamBytes, info.PublicKey) {
		t.Fatal("public key of the rotated key not found on any stream: the scan is blind")
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	// Five purposes plus one rotation: at least six secrets were generated.
	if len(rec.chunks) < 6 {
		t.Fatalf("only %d secrets recorded; the recorder is not in the key path", len(rec.chunks))
	}
	for i, secret := range rec.chunks {
		for _, enc := range encodings(secret) {
			if bytes.Contains(streamBytes, enc) {
				t.Fatalf("secret #%d (%d bytes) found on a stream", i, len(secret))
			}
		}
	}
}

// TestErasureLeavesNoAddressOnAnyStream (finding 11): a person bound and
// active (a PAT, a send), then erased through identity: no stream and no KV
// bucket holds their address, IdP issuer or subject any more. Before, the
// binding was plaintext on the identity stream, kept forever.
func TestErasureLeavesNoAddressOnAnyStream(t *testing.T) {
	s := natstest.RunJetStream(t)
	nc := natstest.Connect(t, s)
	r := startWith(t, nc, prometheus.NewRegistry(), keystore.NewMemory(), "alpd", "example.org")
	ctx := context.Background()
	const issuer, subject, address = "http://127.0.0.1:39517", "subject-of-erin-5e1b", "erin.erased@example.org"
	store := r.b.Identity().Store()
	erin, err := store.BindPerson(ctx, "example.org", issuer, subject, address, []string{"staff"})
	if err != nil {
		t.Fatal(err)
	}
	other, err := store.BindPerson(ctx, "example.org", issuer, "subject-of-bo", "bo@example.org", nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := store.IssuePAT(ctx, identitystore.PATSpec{Tenant: "example.org", PersonID: erin.ID, Name: "cli",
		TokenSHA256: identitystore.HashSecret("pat"), Expires: time.Now().Add(time.Hour)}); err != nil {
		t.Fatal(err)
	}
	if _, err := r.b.Ingress().Submit(ctx, submission("example.org", erin.ID, "")); err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(allStreamBytes(t, r.b.Bus().JetStream()), []byte(erin.ID)) {
		t.Fatal("positive control: the person id is on no stream: the scan is blind")
	}
	if err := r.b.Identity().Erase(ctx, "example.org", erin.ID, "op"); err != nil {
		t.Fatal(err)
	}
	all := allStreamBytes(t, r.b.Bus().JetStream())
	for _, needle := range []string{address, issuer, subject, "erin"} {
		if bytes.Contains(all, []byte(needle)) {
			t.Errorf("%q is still on a stream or in a bucket after erasure", needle)
		}
	}
	if _, err := store.Person(ctx, "example.org", erin.ID); !errors.Is(err, identitystore.ErrErased) {
		t.Errorf("erased person still resolves: %v", err)
	}
	// The person's record in the map is a tombstone, not just unreadable.
	bucket := r.b.Bus().StreamName(natsauth.PersonMapBucket)
	st, err := r.b.Bus().JetStream().Stream(ctx, "KV_"+bucket)
	if err != nil {
		t.Fatal(err)
	}
	rec, err := st.GetLastMsgForSubject(ctx, "$KV."+bucket+".example.org.rec_"+erin.ID)
	if err != nil || !bytes.Contains(rec.Data, []byte(`"erased":true`)) || bytes.Contains(rec.Data, []byte("wrapped")) {
		t.Errorf("the person's record after erasure: %v, %s", err, rec.Data)
	}
	// The map's keyed lookups are gone too.
	if _, err := store.PersonByAddress(ctx, "example.org", address); !errors.Is(err, identitystore.ErrNotFound) {
		t.Errorf("the address still leads to someone: %v", err)
	}
	if _, err := store.PersonBySubject(ctx, "example.org", issuer, subject); !errors.Is(err, identitystore.ErrNotFound) {
		t.Errorf("the IdP account still leads to someone: %v", err)
	}
	if p, err := store.Person(ctx, "example.org", other.ID); err != nil || p.Address != "bo@example.org" {
		t.Errorf("another person: %+v, %v", p, err)
	}
}
