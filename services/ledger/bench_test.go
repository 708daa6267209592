package ledger_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/proto"

	alpv1 "github.com/alpd-project/alpd/gen/alp/v1"
	"github.com/alpd-project/alpd/internal/bus"
	"github.com/alpd-project/alpd/internal/ledgerlog"
	"github.com/alpd-project/alpd/internal/streams"
	"github.com/alpd-project/alpd/internal/testkit"
	"github.com/alpd-project/alpd/services/ledger"
	"github.com/alpd-project/alpd/services/ledger/storage/jsstore"
)

func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

// BenchmarkColdStart measures how long a ledger service takes to be ready
// on a NATS that already holds many persons' logs (it must not read them),
// and how long the first use of an old person's log takes: an append to
// a person with a tree snapshot (the normal case), and a read of one
// without (the tree rebuilt from leaves scattered over the stream). The
// fixture (ALPD_LEDGER_BENCH_PERSONS × ALPD_LEDGER_BENCH_ENTRIES leaves,
// default 100000 × 100 = 10^7 messages, several GB and minutes to build)
// is built once; then ALPD_LEDGER_BENCH_STARTS (default 3) cold starts
// are measured on it. Run it with -benchtime 1x (each benchmark round
// builds its own fixture). Skipped with -short.
//
//	go test -run '^$' -bench ColdStart -benchtime 1x -timeout 60m ./services/ledger/
//	ALPD_LEDGER_BENCH_PERSONS=10000 go test -run '^$' -bench ColdStart -benchtime 1x ./services/ledger/
func BenchmarkColdStart(b *testing.B) {
	if testing.Short() {
		b.Skip("builds a fixture of persons × entries leaves; run without -short")
	}
	persons := envInt("ALPD_LEDGER_BENCH_PERSONS", 100_000)
	entries := envInt("ALPD_LEDGER_BENCH_ENTRIES", 100)
	e := newRig(b, 0)
	// The ledger stream as the service makes it.
	first := e.startLedger(ledger.Options{})
	first.stop()

	start := time.Now()
	buildLogs(b, e, persons, entries)
	b.Logf("fixture: %d persons × %d leaves in %v", persons, entries, time.Since(start).Round(time.Millisecond))

	starts := envInt("ALPD_LEDGER_BENCH_STARTS", 3) * b.N
	b.ResetTimer()
	var ready, firstAppend, firstRead time.Duration
	for i := range starts {
		t0 := time.Now()
		in := e.startLedger(ledger.Options{})
		testkit.Eventually(b, time.Minute, in.svc.Ready)
		ready += time.Since(t0)
		if n := in.counter("alpd_ledger_tree_loads_total"); n != 0 {
			b.Fatalf("%v trees loaded at start", n)
		}
		defer func() {
			b.Logf("start %d: tree loads %v, leaves replayed %v", i, in.counter("alpd_ledger_tree_loads_total"), in.counter("alpd_ledger_leaves_replayed_total"))
		}()
		old := personID(i * 7918 % persons) // even: has a snapshot
		t1 := time.Now()
		e.send(old, `{"cold":"start"}`)
		testkit.Eventually(b, time.Minute, func() error {
			h, err := in.svc.Storage().Head(context.Background(), tenant, old)
			if err != nil {
				return err
			}
			if h.Size < uint64(entries+1) {
				return fmt.Errorf("size %d", h.Size)
			}
			return nil
		})
		firstAppend += time.Since(t1)
		// Reading an untouched old person without a snapshot: the tree is
		// rebuilt from leaves scattered over the whole stream.
		t2 := time.Now()
		if _, err := in.svc.Storage().Head(context.Background(), tenant, personID((i*7918+1)%persons)); err != nil {
			b.Fatal(err)
		}
		firstRead += time.Since(t2)
		in.stop()
	}
	b.StopTimer()
	b.ReportMetric(float64(ready.Microseconds())/1000/float64(starts), "ms-to-ready")
	b.ReportMetric(float64(firstAppend.Microseconds())/1000/float64(starts), "ms-first-append-old-person-snapshot")
	b.ReportMetric(float64(firstRead.Microseconds())/1000/float64(starts), "ms-first-read-old-person-no-snapshot")
	b.ReportMetric(float64(persons*entries), "leaves")
}

// buildLogs publishes persons × entries valid leaves straight to the ledger
// stream (async), person after person interleaved, as years of traffic
// would leave them; then the tree snapshots of the even persons, as a
// running ledger leaves them (the odd ones have none: their first use
// rebuilds the tree from their leaves, scattered over the stream).
func buildLogs(b *testing.B, e *rig, persons, entries int) {
	js, err := jetstream.New(e.nc, jetstream.WithPublishAsyncMaxPending(8192), jetstream.WithDefaultTimeout(time.Minute))
	if err != nil {
		b.Fatal(err)
	}
	publish := func(m *nats.Msg) {
		for {
			_, err := js.PublishMsgAsync(m)
			if err == nil {
				return
			}
			if !errors.Is(err, jetstream.ErrTooManyStalledMsgs) {
				b.Fatal(err)
			}
			select { // let the server catch up
			case <-js.PublishAsyncComplete():
			case <-time.After(time.Second):
			}
		}
	}
	wait := func() {
		select {
		case <-js.PublishAsyncComplete():
		case <-time.After(30 * time.Minute):
			b.Fatal("fixture publishes not acknowledged")
		}
	}
	st, err := js.Stream(context.Background(), e.b.StreamName(streams.Ledger))
	if err != nil {
		b.Fatal(err)
	}
	base := st.CachedInfo().State.LastSeq
	for j := range entries {
		for p := range persons {
			person := personID(p)
			leaf := fixtureLeaf(p, j)
			if p == 0 && j == 0 {
				if _, err := ledgerlog.ParseEntry(leaf); err != nil {
					b.Fatal(err)
				}
			}
			ev := &alpv1.Event{Header: &alpv1.EventHeader{Type: jsstore.Kind, EventId: fmt.Sprintf("l-%d-%d", p, j), Tenant: tenant,
				CausationId: fmt.Sprintf("s-%d-%d", p, j), ProducerRole: alpv1.Role_ROLE_LEDGER},
				Body: &alpv1.Event_LedgerEntryAppended{LedgerEntryAppended: &alpv1.LedgerEntryAppended{Leaf: leaf, Index: uint64(j), PersonId: person}}}
			data, _ := proto.Marshal(ev)
			subject, _ := bus.Subject(streams.Ledger, tenant, person)
			m := nats.NewMsg(subject)
			m.Data = data
			m.Header.Set(jetstream.MsgIDHeader, jsstore.MsgID(ev.Header.CausationId))
			publish(m)
		}
	}
	wait()
	// One publisher, in order, nothing else writing: leaf j of person p is
	// at base + j*persons + p + 1.
	st, _ = js.Stream(context.Background(), e.b.StreamName(streams.Ledger))
	if got := st.CachedInfo().State.LastSeq; got != base+uint64(persons*entries) {
		b.Fatalf("ledger stream ends at %d, want %d", got, base+uint64(persons*entries))
	}
	bucket := e.b.StreamName(jsstore.TreesBucket)
	for p := 0; p < persons; p += 2 {
		leaves := make([][]byte, entries)
		seqs := make([]uint64, entries)
		for j := range entries {
			leaves[j], seqs[j] = fixtureLeaf(p, j), base+uint64(j*persons+p+1)
		}
		kv, err := jsstore.Snapshot(tenant, personID(p), leaves, seqs)
		if err != nil {
			b.Fatal(err)
		}
		for k, v := range kv {
			m := nats.NewMsg("$KV." + bucket + "." + k)
			m.Data = v
			publish(m)
		}
	}
	wait()
}

// fixtureLeaf is the RFC 8785 form of entry j of person p, written out
// (keys sorted) to keep a 10^7-leaf fixture quick; checked once.
func fixtureLeaf(p, j int) []byte {
	return fmt.Appendf(nil, `{"envelope_id":"e-%d-%d","i":%d,"kind":"envelope.send_requested","log":"%s","source_event":"s-%d-%d","ts":"2026-01-01T00:00:00.000Z","v":1}`,
		p, j, j, ledgerlog.Origin(tenant, personID(p)), p, j)
}

// BenchmarkDeliveries measures the ledger's throughput for same-broker
// deliveries: b.N envelopes between 16 pairs of people, in rounds of 16
// per pair: the round's SendRequested are recorded first (not timed), then
// policy's Decided and the recipient's Deliverable of each, published in
// that order to a running ledger, until its queue is drained. (Rounds keep
// each envelope's entry among the last leaves a decision looks at.) The floor, measured in the
// same run on other people, is b.N SendRequested alone (one leaf each).
// "ratio" is deliveries/s over sends/s (1 = recording a delivery costs the
// ledger what one sent envelope does). The events are built (bodies
// sealed) before the clock starts. (With the SendRequested published in
// the same stream of events, a decision may reach the ledger before its
// envelope and wait for it, which stalls its partition and hides what the
// appends cost.)
//
//	go test -run '^$' -bench Deliveries -benchtime 2000x ./services/ledger/
func BenchmarkDeliveries(b *testing.B) {
	e := newRig(b, 0)
	e.startLedger(ledger.Options{})
	const pairs = 16
	type published struct {
		subject string
		ev      *alpv1.Event
	}
	run := func(events []published) time.Duration {
		start := time.Now()
		for _, p := range events {
			e.publish(p.subject, p.ev)
		}
		e.waitDrained()
		return time.Since(start)
	}
	sendOf := func(s sent) published {
		subject, _ := streams.SendSubject(tenant, s.person, s.ev.GetSendRequested().GetEnvelope().GetId())
		return published{subject, s.ev}
	}
	var floor, envelopes, decisions []published
	for i := range b.N {
		floor = append(floor, sendOf(e.newSend(personID(1000+i%pairs), fmt.Sprintf(`{"floor":%d}`, i))))
		from, to := personID(2*(i%pairs)+1), personID(2*(i%pairs)+2)
		s := e.newSend(from, fmt.Sprintf(`{"subject":"d%d"}`, i))
		envelopes = append(envelopes, sendOf(s))
		dec, dl := decision(s, to), deliverable(s, to)
		decSubject, _ := streams.DecidedSubject(tenant, from, s.ev.GetSendRequested().GetEnvelope().GetId())
		dlSubject, _ := streams.DeliverSubject(tenant, to, s.ev.GetSendRequested().GetEnvelope().GetId())
		decisions = append(decisions, published{decSubject, dec}, published{dlSubject, dl})
	}
	b.ResetTimer()
	sends := run(floor)
	var deliveries time.Duration
	const round = 16 * pairs
	for i := 0; i < b.N; i += round {
		b.StopTimer()
		run(envelopes[i:min(i+round, b.N)])
		b.StartTimer()
		deliveries += run(decisions[2*i : 2*min(i+round, b.N)])
	}
	b.StopTimer()
	b.ReportMetric(float64(b.N)/sends.Seconds(), "sends/s")
	b.ReportMetric(float64(b.N)/deliveries.Seconds(), "deliveries/s")
	b.ReportMetric(sends.Seconds()/deliveries.Seconds(), "ratio")
}
