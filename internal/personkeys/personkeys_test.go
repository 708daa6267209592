package personkeys

import (
	"bytes"
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	alpv1 "github.com/alpd-project/alpd/gen/alp/v1"
	"github.com/alpd-project/alpd/internal/keystore"
	"github.com/alpd-project/alpd/internal/natstest"
)

var (
	errErased = errors.New("erased")
	errNone   = errors.New("none")
)

func stores(t *testing.T, n int) []*Store[[]byte] {
	t.Helper()
	js, err := jetstream.New(natstest.Connect(t, natstest.RunJetStream(t)))
	if err != nil {
		t.Fatal(err)
	}
	kv, err := js.CreateOrUpdateKeyValue(context.Background(), BucketConfig("test_secrets", "test"))
	if err != nil {
		t.Fatal(err)
	}
	ks := keystore.NewMemory()
	if _, err := ks.Generate(context.Background(), "example.org", alpv1.KeyPurpose_KEY_PURPOSE_DATA); err != nil {
		t.Fatal(err)
	}
	var out []*Store[[]byte]
	for range n {
		out = append(out, New(kv, ks, Options[[]byte]{
			Domain: "test/v1", Derive: func(_, _ string, raw []byte) []byte { return bytes.Clone(raw) },
			Erased: errErased, None: errNone, CacheTTL: time.Minute, CacheSize: 16,
		}))
	}
	return out
}

// Replicas racing to create a person's secret converge on one.
func TestReplicasConverge(t *testing.T) {
	ss := stores(t, 4)
	ctx := context.Background()
	if _, err := ss[0].Get(ctx, "example.org", "p1", false); !errors.Is(err, errNone) {
		t.Fatalf("no secret yet: %v", err)
	}
	got := make([][]byte, len(ss))
	var wg sync.WaitGroup
	for i, s := range ss {
		wg.Go(func() {
			k, err := s.Get(ctx, "example.org", "p1", true)
			if err != nil {
				t.Error(err)
				return
			}
			got[i] = k.Value
		})
	}
	wg.Wait()
	for i := range got {
		if len(got[i]) != SecretSize || !bytes.Equal(got[i], got[0]) {
			t.Fatalf("replica %d has another secret", i)
		}
	}
}

// Erasure is final: no replica reads or recreates the secret afterwards
// (a replica with the secret cached sees it once its cache entry expires).
func TestEraseIsFinal(t *testing.T) {
	ss := stores(t, 2)
	ctx := context.Background()
	if _, err := ss[0].Get(ctx, "example.org", "p1", true); err != nil {
		t.Fatal(err)
	}
	if err := ss[0].Erase(ctx, "example.org", "p1"); err != nil {
		t.Fatal(err)
	}
	if err := ss[0].Erase(ctx, "example.org", "p1"); err != nil {
		t.Fatalf("erase again: %v", err)
	}
	for i, s := range ss {
		if _, err := s.Get(ctx, "example.org", "p1", true); !errors.Is(err, errErased) {
			t.Fatalf("replica %d after erasure: %v", i, err)
		}
	}
	// A person who never had a secret can be erased too, forbidding one.
	if err := ss[1].Erase(ctx, "example.org", "p2"); err != nil {
		t.Fatal(err)
	}
	if _, err := ss[0].Get(ctx, "example.org", "p2", true); !errors.Is(err, errErased) {
		t.Fatalf("created after erasure: %v", err)
	}
}
