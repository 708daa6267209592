package personmap

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	alpv1 "github.com/alpd-project/alpd/gen/alp/v1"
	"github.com/alpd-project/alpd/internal/keystore"
	"github.com/alpd-project/alpd/internal/natstest"
)

const tenant = "example.org"

type rig struct {
	js   jetstream.JetStream
	maps []*Map
}

func newRig(t *testing.T, replicas int) rig {
	t.Helper()
	js, err := jetstream.New(natstest.Connect(t, natstest.RunJetStream(t)))
	if err != nil {
		t.Fatal(err)
	}
	ks := keystore.NewMemory()
	if _, err := ks.Generate(context.Background(), tenant, alpv1.KeyPurpose_KEY_PURPOSE_DATA); err != nil {
		t.Fatal(err)
	}
	r := rig{js: js}
	for range replicas {
		m, err := Open(context.Background(), js, "T_PERSONMAP", 1, ks, Options{})
		if err != nil {
			t.Fatal(err)
		}
		r.maps = append(r.maps, m)
	}
	return r
}

// bucketBytes is every stored message of the bucket's stream.
func (r rig) bucketBytes(t *testing.T) []byte {
	t.Helper()
	ctx := context.Background()
	s, err := r.js.Stream(ctx, "KV_T_PERSONMAP")
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var all bytes.Buffer
	for seq := info.State.FirstSeq; seq <= info.State.LastSeq && info.State.Msgs > 0; seq++ {
		m, err := s.GetMsg(ctx, seq)
		if err != nil {
			continue
		}
		all.WriteString(m.Subject)
		all.Write(m.Data)
	}
	return all.Bytes()
}

// Finding 10: replicas racing to bind one address to different IdP
// accounts (the test IdP's issuer changed) leave exactly one owner; the
// others are refused with ErrAddressTaken and hold nothing.
func TestOneOwnerPerAddressAcrossReplicas(t *testing.T) {
	r := newRig(t, 4)
	ctx := context.Background()
	var wg sync.WaitGroup
	errs := make([]error, len(r.maps))
	for i, m := range r.maps {
		wg.Go(func() {
			errs[i] = m.Claim(ctx, tenant, fmt.Sprintf("p_%d", i), Entry{
				Address: "ana@example.org", Issuer: fmt.Sprintf("http://127.0.0.1:%d", 9000+i), Subject: "test-ana"})
		})
	}
	wg.Wait()
	winners := 0
	for i, err := range errs {
		switch {
		case err == nil:
			winners++
		case errors.Is(err, ErrAddressTaken):
			// The loser's account claim was undone: that account is free.
			if _, err := r.maps[0].AccountOwner(ctx, tenant, fmt.Sprintf("http://127.0.0.1:%d", 9000+i), "test-ana"); !errors.Is(err, ErrNotFound) {
				t.Errorf("loser %d still owns its account: %v", i, err)
			}
		default:
			t.Fatalf("replica %d: %v", i, err)
		}
	}
	if winners != 1 {
		t.Fatalf("%d persons own ana@example.org, want 1 (%v)", winners, errs)
	}
	// The case of the address does not make another one.
	err := r.maps[1].Claim(ctx, tenant, "p_other", Entry{Address: "Ana@Example.org", Issuer: "https://idp.example", Subject: "x"})
	if !errors.Is(err, ErrAddressTaken) {
		t.Fatalf("Ana@Example.org for another person: %v", err)
	}
}

// A person moves to another account (re-binding) and another address: the
// old ones are released, and the record says the new ones.
func TestClaimMovesAndReleases(t *testing.T) {
	r := newRig(t, 2)
	ctx := context.Background()
	a, b := r.maps[0], r.maps[1]
	if err := a.Claim(ctx, tenant, "p_1", Entry{Address: "ana@example.org", Issuer: "http://127.0.0.1:1", Subject: "s"}); err != nil {
		t.Fatal(err)
	}
	if err := a.Claim(ctx, tenant, "p_1", Entry{Address: "ana@example.org", Issuer: "http://127.0.0.1:1", Subject: "s"}); err != nil {
		t.Fatalf("claim again: %v", err)
	}
	if err := b.Claim(ctx, tenant, "p_2", Entry{Address: "bob@example.org", Issuer: "http://127.0.0.1:1", Subject: "s"}); !errors.Is(err, ErrAccountTaken) {
		t.Fatalf("p_1's account for p_2: %v", err)
	}
	if _, err := b.AddressOwner(ctx, tenant, "bob@example.org"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("a refused claim kept the address: %v", err)
	}
	moved := Entry{Address: "ana.b@example.org", Issuer: "http://127.0.0.1:2", Subject: "s2"}
	if err := b.Claim(ctx, tenant, "p_1", moved); err != nil {
		t.Fatal(err)
	}
	if got, err := b.Get(ctx, tenant, "p_1"); err != nil || got != moved {
		t.Fatalf("record %+v, %v", got, err)
	}
	if _, err := b.AccountOwner(ctx, tenant, "http://127.0.0.1:1", "s"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("old account still bound: %v", err)
	}
	if _, err := b.AddressOwner(ctx, tenant, "ana@example.org"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("old address still owned: %v", err)
	}
	if id, err := a.AccountOwner(ctx, tenant, "http://127.0.0.1:2", "s2"); err != nil || id != "p_1" {
		t.Fatalf("new account owner %q, %v", id, err)
	}
}

// Finding 11: after Erase the bucket holds nothing of the person: no
// address, issuer or subject, no record, no owner key; the address can be
// bound again, and the erased person cannot come back.
func TestEraseLeavesNothing(t *testing.T) {
	r := newRig(t, 2)
	ctx := context.Background()
	a, b := r.maps[0], r.maps[1]
	e := Entry{Address: "ana@example.org", Issuer: "http://127.0.0.1:41234", Subject: "subject-of-ana-7f3a"}
	if err := a.Claim(ctx, tenant, "p_1", e); err != nil {
		t.Fatal(err)
	}
	if err := b.Claim(ctx, tenant, "p_2", Entry{Address: "bob@example.org", Issuer: e.Issuer, Subject: "bob-sub"}); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Get(ctx, tenant, "p_1"); err != nil { // cached in b
		t.Fatal(err)
	}
	before := r.bucketBytes(t)
	if !bytes.Contains(before, []byte("rec_p_1")) {
		t.Fatal("positive control: the record key is not in the scan")
	}
	if err := a.Erase(ctx, tenant, "p_1"); err != nil {
		t.Fatal(err)
	}
	if err := a.Erase(ctx, tenant, "p_1"); err != nil {
		t.Fatalf("erase again: %v", err)
	}
	after := r.bucketBytes(t)
	for _, needle := range []string{e.Address, e.Subject, "ana"} {
		if bytes.Contains(after, []byte(needle)) {
			t.Errorf("%q still in the bucket", needle)
		}
	}
	for _, k := range []func() (string, error){
		func() (string, error) { return a.addressKey(ctx, tenant, e.Address, false) },
		func() (string, error) { return a.accountKey(ctx, tenant, e.Issuer, e.Subject, false) },
	} {
		key, err := k()
		if err != nil {
			t.Fatal(err)
		}
		if bytes.Contains(after, []byte(key)) {
			t.Errorf("owner key %s still in the bucket", key)
		}
	}
	if _, err := a.Get(ctx, tenant, "p_1"); !errors.Is(err, ErrErased) {
		t.Fatalf("get after erase: %v", err)
	}
	// b had the record cached; Forget (what the projection does when it
	// sees the erasure event) drops it.
	b.Forget(tenant, "p_1")
	if _, err := b.Get(ctx, tenant, "p_1"); !errors.Is(err, ErrErased) {
		t.Fatalf("other replica after erase: %v", err)
	}
	if err := b.Claim(ctx, tenant, "p_1", e); !errors.Is(err, ErrErased) {
		t.Fatalf("erased person claimed again: %v", err)
	}
	if err := b.Claim(ctx, tenant, "p_3", e); err != nil {
		t.Fatalf("the address and account are free again: %v", err)
	}
	if got, err := a.Get(ctx, tenant, "p_2"); err != nil || got.Address != "bob@example.org" {
		t.Fatalf("another person was touched: %+v, %v", got, err)
	}
}

// Leftovers of an interrupted erasure (an owner key of an erased person)
// do not block the address forever.
func TestErasedOwnerIsTakenOver(t *testing.T) {
	r := newRig(t, 1)
	ctx := context.Background()
	m := r.maps[0]
	if err := m.Claim(ctx, tenant, "p_1", Entry{Address: "ana@example.org", Issuer: "https://i", Subject: "s"}); err != nil {
		t.Fatal(err)
	}
	// Erase only the record, as if interrupted before the owner keys.
	key := recKey(tenant, "p_1")
	if err := m.kv.Purge(ctx, key); err != nil {
		t.Fatal(err)
	}
	if _, err := m.kv.Create(ctx, key, []byte(`{"format":1,"erased":true}`)); err != nil {
		t.Fatal(err)
	}
	m.Forget(tenant, "p_1")
	if err := m.Claim(ctx, tenant, "p_2", Entry{Address: "ana@example.org", Issuer: "https://i", Subject: "s"}); err != nil {
		t.Fatalf("claim over an erased person's keys: %v", err)
	}
}

// The record is wrapped: the bucket never holds the address in clear, even
// before erasure.
func TestRecordIsWrapped(t *testing.T) {
	r := newRig(t, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := r.maps[0].Claim(ctx, tenant, "p_1", Entry{Address: "ana@example.org", Issuer: "https://idp.example", Subject: "ana-subject"}); err != nil {
		t.Fatal(err)
	}
	all := r.bucketBytes(t)
	for _, needle := range []string{"ana@example.org", "https://idp.example", "ana-subject"} {
		if bytes.Contains(all, []byte(needle)) {
			t.Errorf("%q in clear in the bucket", needle)
		}
	}
}
