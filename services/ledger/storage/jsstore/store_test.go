package jsstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"

	alpv1 "github.com/alpd-project/alpd/gen/alp/v1"
	"github.com/alpd-project/alpd/internal/bus"
	"github.com/alpd-project/alpd/internal/keystore"
	"github.com/alpd-project/alpd/internal/ledgerlog"
	"github.com/alpd-project/alpd/internal/natstest"
	"github.com/alpd-project/alpd/internal/streams"
)

const tenant = "example.org"

type rig struct {
	b  *bus.Bus
	ks keystore.KeyStore
}

func newRig(t testing.TB) *rig {
	t.Helper()
	return rigOn(t, natstest.Connect(t, natstest.RunJetStream(t)))
}

func rigOn(t testing.TB, nc *nats.Conn) *rig {
	t.Helper()
	b, err := bus.New(nc, bus.Options{Namespace: "t"})
	if err != nil {
		t.Fatal(err)
	}
	ks := keystore.NewMemory()
	if _, err := ks.Generate(context.Background(), tenant, alpv1.KeyPurpose_KEY_PURPOSE_LEDGER); err != nil {
		t.Fatal(err)
	}
	return &rig{b: b, ks: ks}
}

func (f *rig) store(t testing.TB, o Options) *Store {
	t.Helper()
	o.Tenants = []string{tenant}
	o.Registerer = prometheus.NewRegistry()
	s, err := New(f.b, f.ks, nil, o)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Ensure(context.Background(), streams.Limits{}); err != nil {
		t.Fatal(err)
	}
	return s
}

func request(person, source string) Request {
	return Request{Tenant: tenant, Person: person, SourceID: source,
		Build: func(index uint64) ([]byte, []byte, error) {
			leaf, err := ledgerlog.Entry{V: ledgerlog.EntryVersion, Log: ledgerlog.Origin(tenant, person), Index: index,
				Kind: ledgerlog.KindSendRequested, SourceEvent: source, EnvelopeID: "env-" + source,
				Time: ledgerlog.FormatTime(time.Unix(0, 0))}.Canonical()
			return leaf, nil, err
		}}
}

// TestManyLeavesAcrossTiles appends enough leaves to span several hash and
// sequence tiles, concurrently (so group commits batch them), and checks
// roots and proofs before and after a restart from the snapshot.
func TestManyLeavesAcrossTiles(t *testing.T) {
	f := newRig(t)
	s := f.store(t, Options{MaxBatch: 64})
	ctx := context.Background()
	const n = 1100
	var wg sync.WaitGroup
	sem := make(chan struct{}, 64)
	errs := make(chan error, n)
	for i := range n {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			_, err := s.Append(ctx, request("p1", fmt.Sprintf("src-%d", i)))
			errs <- err
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	s.Flush(ctx)
	check := func(s *Store, size int) {
		t.Helper()
		h, err := s.Head(ctx, tenant, "p1")
		if err != nil || h.Size != uint64(size) || h.CheckpointSize != uint64(size) {
			t.Fatalf("head %+v %v", h, err)
		}
		es, err := s.Entries(ctx, tenant, "p1", 0, size)
		if err != nil || len(es) != size {
			t.Fatalf("%d entries, %v", len(es), err)
		}
		mt := ledgerlog.NewMemoryTree(size)
		for i, e := range es {
			en, err := ledgerlog.ParseEntry(e.Leaf)
			if err != nil || en.Index != uint64(i) || e.Index != uint64(i) {
				t.Fatalf("entry %d: %v %+v", i, err, en)
			}
			mt.Append(e.Leaf)
		}
		root, _ := mt.Root(uint64(size))
		if root != h.Root {
			t.Fatal("root differs from the leaves'")
		}
		cp := ledgerlog.Checkpoint{Origin: h.Origin, Size: h.Size, Root: h.Root}
		for _, i := range []uint64{0, 1, 255, 256, 511, 512, 700, uint64(size - 1)} {
			p, err := s.InclusionProof(ctx, tenant, "p1", i, h.Size)
			if err != nil {
				t.Fatal(err)
			}
			if err := ledgerlog.VerifyInclusion(p, cp, i, ledgerlog.LeafHash(es[i].Leaf)); err != nil {
				t.Fatal(err)
			}
		}
		for _, old := range []uint64{1, 129, 512, 1000} {
			p, err := s.ConsistencyProof(ctx, tenant, "p1", old, h.Size)
			if err != nil {
				t.Fatal(err)
			}
			oldRoot, _ := mt.Root(old)
			if err := ledgerlog.VerifyConsistency(p, ledgerlog.Checkpoint{Origin: h.Origin, Size: old, Root: oldRoot}, cp); err != nil {
				t.Fatal(err)
			}
		}
	}
	check(s, n)
	var batches float64
	mfs, _ := s.opts.Registerer.(*prometheus.Registry).Gather()
	for _, mf := range mfs {
		if mf.GetName() == "alpd_ledger_append_batch_size" {
			batches = float64(mf.GetMetric()[0].GetHistogram().GetSampleCount())
		}
	}
	t.Logf("%d leaves in %v batches", n, batches)
	if batches >= n {
		t.Error("concurrent appends were not grouped")
	}

	// A new store (a restarted process) loads the snapshot lazily.
	s2 := f.store(t, Options{})
	if _, err := s2.Append(ctx, request("p1", "after-restart")); err != nil {
		t.Fatal(err)
	}
	s2.Flush(ctx)
	check(s2, n+1)
	if r := counterValue(s2, "alpd_ledger_leaves_replayed_total"); r != 0 {
		t.Errorf("%v leaves replayed after a snapshot", r)
	}
	// The first store's tree is stale now: its next append conflicts, then
	// catches up.
	if res, err := s.Append(ctx, request("p1", "stale-writer")); err != nil || res.Index != n+1 {
		t.Fatalf("stale writer: %+v %v", res, err)
	}
	if c := counterValue(s, "alpd_ledger_append_conflicts_total"); c != 1 {
		t.Errorf("%v conflicts", c)
	}
	// Appending a source again is recognised (dedupe window, then catch-up).
	if res, err := s2.Append(ctx, request("p1", "stale-writer")); err != nil || !res.Duplicate || res.Index != n+1 {
		t.Fatalf("repeated source: %+v %v", res, err)
	}
}

func counterValue(s *Store, name string) float64 {
	mfs, _ := s.opts.Registerer.(*prometheus.Registry).Gather()
	for _, mf := range mfs {
		if mf.GetName() == name {
			var v float64
			for _, m := range mf.GetMetric() {
				v += m.GetCounter().GetValue()
			}
			return v
		}
	}
	return 0
}

// TestCheckpointNeverInconsistent: a stored checkpoint the log disagrees
// with (a forged or rewritten history) is never signed over, and a
// smaller checkpoint never replaces a larger one.
func TestCheckpointNeverInconsistent(t *testing.T) {
	f := newRig(t)
	s := f.store(t, Options{})
	ctx := context.Background()
	for i := range 3 {
		if _, err := s.Append(ctx, request("p1", fmt.Sprintf("a-%d", i))); err != nil {
			t.Fatal(err)
		}
	}
	s.Flush(ctx)
	h, _ := s.Head(ctx, tenant, "p1")
	if h.CheckpointSize != 3 {
		t.Fatalf("checkpoint of %d", h.CheckpointSize)
	}
	// Someone puts a checkpoint of 2 leaves with another root in place.
	forged, _ := json.Marshal(storedCheckpoint{Size: 2, Root: make([]byte, 32), Note: []byte("forged")})
	if _, err := s.cps.Put(ctx, "example_org.p1", forged); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Append(ctx, request("p1", "a-3")); err != nil {
		t.Fatal(err)
	}
	s.Flush(ctx)
	if n := counterValue(s, "alpd_ledger_checkpoints_refused_total"); n != 1 {
		t.Fatalf("%v refusals", n)
	}
	if cp, _, _ := s.checkpoint(ctx, "example_org.p1"); string(cp.Note) != "forged" {
		t.Fatal("signed over an inconsistent checkpoint")
	}
	if _, _, err := s.CheckpointNow(ctx, tenant, "p1"); !errors.Is(err, ErrInconsistent) {
		t.Fatalf("CheckpointNow: %v", err)
	}
	// A larger checkpoint stays when a stale replica (size 4 < 10) comes.
	big, _ := json.Marshal(storedCheckpoint{Size: 10, Root: make([]byte, 32), Note: []byte("larger")})
	if _, err := s.cps.Put(ctx, "example_org.p1", big); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.CheckpointNow(ctx, tenant, "p1"); err != nil {
		t.Fatal(err)
	}
	if cp, _, _ := s.checkpoint(ctx, "example_org.p1"); cp.Size != 10 {
		t.Fatalf("checkpoint shrank to %d", cp.Size)
	}
	// Head never offers a checkpoint larger than the log.
	if h, _ := s.Head(ctx, tenant, "p1"); h.SignedCheckpoint != nil {
		t.Fatal("head offers a checkpoint beyond its size")
	}
}
