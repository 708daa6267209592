package secrets

import (
	"bytes"
	"context"
	"errors"
	"testing"

	alpv1 "github.com/alpd-project/alpd/gen/alp/v1"
	"github.com/alpd-project/alpd/internal/keystore"
	"github.com/alpd-project/alpd/internal/natstest"
	"github.com/nats-io/nats.go/jetstream"
)

func TestSecrets(t *testing.T) {
	s := natstest.RunJetStream(t)
	js, _ := jetstream.New(natstest.Connect(t, s))
	ctx := context.Background()
	kv, err := js.CreateOrUpdateKeyValue(ctx, BucketConfig("T_LEDGERSECRETS"))
	if err != nil {
		t.Fatal(err)
	}
	ks := keystore.NewMemory()
	if _, err := ks.Generate(ctx, "example.org", alpv1.KeyPurpose_KEY_PURPOSE_DATA); err != nil {
		t.Fatal(err)
	}
	one := New(kv, ks, Options{})
	two := New(kv, ks, Options{CacheTTL: -1}) // another replica, no cache
	if _, err := one.Get(ctx, "example.org", "p1", false); !errors.Is(err, ErrNoSecret) {
		t.Fatalf("before creation: %v", err)
	}
	a, err := one.Get(ctx, "example.org", "p1", true)
	if err != nil {
		t.Fatal(err)
	}
	b, err := two.Get(ctx, "example.org", "p1", true)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(a.Salt("e1", 3), b.Salt("e1", 3)) {
		t.Fatal("replicas derive different salts")
	}
	if bytes.Equal(a.Salt("e1", 3), a.Salt("e1", 4)) || bytes.Equal(a.Salt("e1", 3), a.Salt("e2", 3)) || len(a.Salt("e", 0)) != 32 {
		t.Fatal("salts do not depend on envelope and index")
	}
	other, _ := one.Get(ctx, "example.org", "p2", true)
	if bytes.Equal(a.Salt("e1", 3), other.Salt("e1", 3)) {
		t.Fatal("two persons share salts")
	}
	sealed := a.SealOpening("e1", 3, []byte("digest"))
	if d, err := b.OpenOpening("e1", 3, sealed); err != nil || string(d) != "digest" {
		t.Fatalf("open: %q %v", d, err)
	}
	if _, err := b.OpenOpening("e1", 4, sealed); !errors.Is(err, ErrOpening) {
		t.Fatal("an opening moved to another index opens")
	}
	if _, err := other.OpenOpening("e1", 3, sealed); !errors.Is(err, ErrOpening) {
		t.Fatal("another person's secret opens it")
	}
	if err := one.Erase(ctx, "example.org", "p1"); err != nil {
		t.Fatal(err)
	}
	if err := one.Erase(ctx, "example.org", "p1"); err != nil {
		t.Fatalf("erase is not idempotent: %v", err)
	}
	for _, st := range []*Store{one, two} {
		if _, err := st.Get(ctx, "example.org", "p1", true); !errors.Is(err, ErrErased) {
			t.Fatalf("after erasure: %v", err)
		}
	}
	if _, err := two.Get(ctx, "example.org", "p2", false); err != nil {
		t.Fatalf("the other person: %v", err)
	}
	if _, err := one.Get(ctx, "example.org", "a.b", true); err == nil {
		t.Fatal("bad person id accepted")
	}
}
