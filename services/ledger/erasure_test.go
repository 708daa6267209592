package ledger_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/gowebpki/jcs"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/proto"

	"github.com/alpd-project/alpd/internal/bus"
	"github.com/alpd-project/alpd/internal/ledgerlog"
	"github.com/alpd-project/alpd/internal/natsauth"
	"github.com/alpd-project/alpd/internal/streams"
	"github.com/alpd-project/alpd/internal/testkit"
	"github.com/alpd-project/alpd/services/ledger"
	"github.com/alpd-project/alpd/services/ledger/secrets"
	"github.com/alpd-project/alpd/services/ledger/storage/jsstore"
)

// TestRedeliveryAfterDedupeWindow: the same source event published again
// after the stream's dedupe window (a fresh Nats-Msg-Id, the same event id)
// appends nothing.
func TestRedeliveryAfterDedupeWindow(t *testing.T) {
	e := newRig(t, 200*time.Millisecond)
	in := e.startLedger(ledger.Options{})
	a := personID(1)
	s := e.send(a, `{"once":true}`)
	e.checkLog(in.svc.Storage(), a, 1)
	time.Sleep(300 * time.Millisecond) // past the dedupe window
	data, err := proto.Marshal(s.ev)
	if err != nil {
		t.Fatal(err)
	}
	subject, _ := streams.SendSubject(tenant, a, s.ev.GetSendRequested().GetEnvelope().GetId())
	m := nats.NewMsg(subject)
	m.Data = data
	m.Header.Set(jetstream.MsgIDHeader, "a-fresh-message-id")
	m.Header.Set(bus.HeaderEventType, "send_requested")
	ack, err := e.b.JetStream().PublishMsg(context.Background(), m)
	if err != nil || ack.Duplicate {
		t.Fatalf("republish: %v %v", ack, err)
	}
	e.published.Add(1)
	e.waitDrained()
	e.send(a, `{"after":true}`) // and the log goes on at index 1
	e.checkLog(in.svc.Storage(), a, 2)
}

// TestErasure: after the person's data key and ledger secret are destroyed
// the log still verifies (root, checkpoint), openings are unreadable, an
// event whose body key was destroyed first is recorded without a
// commitment, and no byte derived from a body is on the ledger stream or
// in the ledger's buckets except salted commitments.
func TestErasure(t *testing.T) {
	e := newRig(t, 0)
	in := e.startLedger(ledger.Options{})
	a, b := personID(1), personID(2)
	var all []sent
	for i := range 3 {
		all = append(all, e.send(a, fmt.Sprintf(`{"secret":"the plaintext body %d"}`, i)))
	}
	e.send(b, `{"other":"person"}`)
	r := in.svc.Storage()
	e.checkLog(r, a, 3)
	ctx := context.Background()
	es, err := r.Entries(ctx, tenant, a, 0, 10)
	if err != nil || len(es) != 3 || es[0].Opening == nil {
		t.Fatalf("before erasure: %v %v", es, err)
	}
	// One more event, handled only after the erasure (the ledger is down).
	in.stop()
	late := e.send(a, `{"secret":"sent just before the erasure"}`)
	all = append(all, late)
	e.erase(a)
	in = e.startLedger(ledger.Options{})
	r = in.svc.Storage()
	entries := e.checkLog(r, a, 4)
	e.waitDrained()
	if entries[3].Commitment != "" {
		t.Fatalf("entry of a body whose key was destroyed has a commitment: %+v", entries[3])
	}
	if _, err := in.svc.Secrets().Get(ctx, tenant, a, false); !errors.Is(err, secrets.ErrErased) {
		t.Fatalf("ledger secret after erasure: %v", err)
	}
	es, err = r.Entries(ctx, tenant, a, 0, 10)
	if err != nil || len(es) != 4 {
		t.Fatal(es, err)
	}
	for i, se := range es[:3] {
		if se.Opening != nil || !se.Erased {
			t.Fatalf("entry %d after erasure: opening %v erased %v", i, se.Opening, se.Erased)
		}
	}
	if es[3].Opening != nil || es[3].Erased {
		t.Fatalf("uncommitted entry: %+v", es[3])
	}
	if n := in.counter("alpd_ledger_entries_without_commitment_total"); n != 1 {
		t.Errorf("%v entries without commitment", n)
	}
	// The other person is untouched.
	if es, _ := r.Entries(ctx, tenant, b, 0, 1); len(es) != 1 || es[0].Opening == nil {
		t.Fatalf("b's opening: %+v", es)
	}
	e.checkLog(r, a, 4)

	// Nothing body-derived anywhere the ledger writes.
	var needles [][]byte
	for _, s := range all {
		env := s.ev.GetSendRequested().GetEnvelope()
		canon, _ := jcs.Transform(s.body)
		d, _ := ledgerlog.EnvelopeDigest(ledgerlog.EnvelopeFields{ID: env.GetId(), From: env.GetFrom(), To: env.GetTo(),
			Type: env.GetType(), Body: canon, Created: env.GetCreated().AsTime()})
		needles = append(needles, s.body, canon, []byte("plaintext body"), d[:], []byte(hex.EncodeToString(d[:])),
			[]byte(base64.StdEncoding.EncodeToString(d[:])), []byte(env.GetTo()))
	}
	js := e.b.JetStream()
	for _, name := range []string{streams.Ledger, "KV_" + e.b.StreamName(jsstore.TreesBucket), "KV_" + e.b.StreamName(jsstore.CheckpointsBucket),
		"KV_" + e.b.StreamName(natsauth.LedgerSecretsBucket)} {
		if name == streams.Ledger {
			name = e.b.StreamName(name)
		}
		st, err := js.Stream(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		info, _ := st.Info(ctx)
		for seq := info.State.FirstSeq; seq <= info.State.LastSeq && seq > 0; seq++ {
			m, err := st.GetMsg(ctx, seq)
			if err != nil {
				continue // purged
			}
			raw := append([]byte(m.Subject), m.Data...)
			for k, v := range m.Header {
				raw = append(raw, k...)
				raw = append(raw, fmt.Sprint(v)...)
			}
			for _, n := range needles {
				if bytes.Contains(raw, n) {
					t.Fatalf("%s message %d contains %q", name, seq, n)
				}
			}
		}
	}
}

// TestLazyLoad: a restarted ledger with many persons is ready without
// reading their logs, continues an old person's log at the right index
// from its snapshot, keeps at most MaxTrees trees, and rebuilds a log
// whose snapshot was damaged from the stream.
func TestLazyLoad(t *testing.T) {
	e := newRig(t, 0)
	in := e.startLedger(ledger.Options{Workers: 4})
	const persons = 40
	for i := range persons {
		for j := range 2 {
			e.send(personID(i), fmt.Sprintf(`{"j":%d}`, j))
		}
	}
	e.waitDrained()
	for i := range persons {
		e.checkLog(in.svc.Storage(), personID(i), 2)
	}
	in.stop()

	second := e.startLedger(ledger.Options{MaxTrees: 8})
	testkit.Eventually(t, 10*time.Second, second.svc.Ready)
	if n := second.counter("alpd_ledger_tree_loads_total"); n != 0 || second.svc.Store().Loaded() != 0 {
		t.Fatalf("%v trees loaded at start (%d in memory)", n, second.svc.Store().Loaded())
	}
	e.send(personID(5), `{"j":2}`)
	entries := e.checkLog(second.svc.Storage(), personID(5), 3)
	if entries[2].Index != 2 {
		t.Fatalf("old person continued at %d", entries[2].Index)
	}
	if n := second.counter("alpd_ledger_leaves_replayed_total"); n != 0 {
		t.Errorf("%v leaves replayed; the snapshot should have sufficed", n)
	}
	// Damage a snapshot: the log is rebuilt from the stream.
	kv, err := e.b.JetStream().KeyValue(context.Background(), e.b.StreamName(jsstore.TreesBucket))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(context.Background(), "example_org."+personID(7)+".h.0", []byte("garbage, not hashes, 32 bytes!!!")); err != nil {
		t.Fatal(err)
	}
	for i := range persons {
		e.checkLog(second.svc.Storage(), personID(i), map[bool]int{true: 3, false: 2}[i == 5])
	}
	if n := second.svc.Store().Loaded(); n > 8 {
		t.Errorf("%d trees in memory, MaxTrees 8", n)
	}
	t.Logf("loads: %v, replayed %v", second.counter("alpd_ledger_tree_loads_total"), second.counter("alpd_ledger_leaves_replayed_total"))
}
