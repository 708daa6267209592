package api_test

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"golang.org/x/mod/sumdb/note"
	"golang.org/x/mod/sumdb/tlog"
	grpcmd "google.golang.org/grpc/metadata"

	"github.com/alpd-project/alpd/broker"
	ledgerv1 "github.com/alpd-project/alpd/gen/alp/ledger/v1"
	nmpv1 "github.com/alpd-project/alpd/gen/alp/nmp/v1"
	alpv1 "github.com/alpd-project/alpd/gen/alp/v1"
	"github.com/alpd-project/alpd/internal/brokertest"
	"github.com/alpd-project/alpd/internal/identitystore"
	"github.com/alpd-project/alpd/internal/ledgerlog"
	"github.com/alpd-project/alpd/internal/testkit"
	"github.com/alpd-project/alpd/services/ingress"
)

// brokerRig is a whole broker (all six services, embedded NATS) behind its
// HTTP handler, with two people who each authorized an agent.
type brokerRig struct {
	b        *broker.Broker
	srv      *httptest.Server
	ana, bo  identitystore.Person
	anaToken string
	boToken  string
}

func newBrokerRig(t *testing.T) *brokerRig {
	t.Helper()
	br := brokertest.Start(t, broker.Config{Tenants: []string{tenant}})
	ana := br.Agent(t, tenant, "sub-ana", "ana@example.org", "agent-sub-ana", "alp.send", "alp.read")
	bo := br.Agent(t, tenant, "sub-bo", "bo@example.org", "agent-sub-bo", "alp.send", "alp.read")
	return &brokerRig{b: br.B, srv: br.Srv, ana: ana.Person, bo: bo.Person, anaToken: ana.Token, boToken: bo.Token}
}

// send has Ana's agent send n messages through ingress.
func (r *brokerRig) send(t *testing.T, n int, from int) {
	t.Helper()
	for i := range n {
		_, err := r.b.Ingress().Submit(t.Context(), ingress.Submission{
			Sender: ingress.Sender{Tenant: tenant, PersonID: r.ana.ID, Address: r.ana.Address, AgentID: "agent-sub-ana",
				Trust: nmpv1.TrustLevel_TRUST_LEVEL_TRUSTED, TrustReason: "test"},
			Envelope:       &alpv1.Envelope{To: "carla@other.example", Type: "note/v1", Body: fmt.Appendf(nil, `{"n":%d}`, from+i)},
			IdempotencyKey: fmt.Sprintf("k-%d", from+i),
		})
		if err != nil {
			t.Fatal(err)
		}
	}
}

func (r *brokerRig) get(t *testing.T, path, token string) (*http.Response, []byte) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, r.srv.URL+path, nil)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := r.srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, data
}

// signedHead waits until Ana's log has want entries, all under a signed
// checkpoint, and returns the head and the checkpoint opened with the
// keys the head lists.
func (r *brokerRig) signedHead(t *testing.T, want uint64) (headView, ledgerlog.Checkpoint) {
	t.Helper()
	var h headView
	testkit.Eventually(t, 20*time.Second, func() error {
		resp, data := r.get(t, "/v1/ledger", r.anaToken)
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("%d %s", resp.StatusCode, data)
		}
		h = ok[headView](t, resp, data)
		if h.Size != want || h.Checkpoint.Size != want {
			return fmt.Errorf("size %d, checkpoint %d", h.Size, h.Checkpoint.Size)
		}
		return nil
	}, fmt.Sprintf("a checkpoint of %d entries", want))
	var vkeys []string
	for _, k := range h.PublicKeys {
		vkeys = append(vkeys, k.VerifierKey)
	}
	v, err := ledgerlog.Verifiers(vkeys...)
	if err != nil {
		t.Fatal(err)
	}
	cp, err := ledgerlog.OpenCheckpoint([]byte(h.Checkpoint.Note), ledgerlog.Origin(tenant, r.ana.ID), v)
	if err != nil {
		t.Fatal(err)
	}
	return h, cp
}

// TestReadAndProveOnBroker: messages sent through ingress become entries
// of the sender's ledger, which the sender's agent reads over HTTP with its
// token, proves inclusion and consistency of against checkpoints it
// verified itself, and exports for `alpctl ledger verify`; another
// person's token sees only that person's (empty) ledger.
func TestReadAndProveOnBroker(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a broker")
	}
	r := newBrokerRig(t)

	// Bo has sent nothing: his ledger, empty, not Ana's.
	resp, data := r.get(t, "/v1/ledger", r.boToken)
	refused(t, resp, data, http.StatusNotFound, "no_log")

	// Each message is two entries: the envelope, then policy's decision.
	r.send(t, 4, 0)
	h, first := r.signedHead(t, 8)
	held := h.Checkpoint.Note // what Ana's client keeps

	// Entries: Ana's envelopes, in her log.
	es := okBroker[entriesView](t, r, "/v1/ledger/entries?limit=10", r.anaToken)
	if len(es.Entries) != 8 || es.Next != nil {
		t.Fatalf("entries: %+v", es)
	}
	sent := map[string]bool{}
	for i, e := range es.Entries {
		en, err := ledgerlog.ParseEntry([]byte(e.Leaf))
		if err != nil {
			t.Fatal(err)
		}
		if en.Log != ledgerlog.Origin(tenant, r.ana.ID) || en.Index != uint64(i) {
			t.Fatalf("entry %d: %+v", i, en)
		}
		switch {
		case en.Kind == ledgerlog.KindSendRequested && e.Opening != nil:
			sent[en.EnvelopeID] = true
		case en.Kind == ledgerlog.KindDecided && e.Opening == nil && sent[en.EnvelopeID]:
		default:
			t.Fatalf("entry %d: %+v (opening %v); want each envelope's entry, then its decision", i, en, e.Opening != nil)
		}
		// Inclusion of each in the checkpoint Ana verified.
		p := okBroker[inclusionView](t, r, fmt.Sprintf("/v1/ledger/proof/inclusion?index=%d", i), r.anaToken)
		leaf := tlog.RecordHash([]byte(e.Leaf))
		if err := tlog.CheckRecord(decodeHashes(t, p.Proof), int64(first.Size), first.Root, int64(i), leaf); err != nil {
			t.Fatalf("inclusion of %d: %v", i, err)
		}
	}

	// More messages; consistency from the checkpoint Ana kept.
	r.send(t, 3, 4)
	_, latest := r.signedHead(t, 14)
	c := okBroker[consistencyView](t, r, fmt.Sprintf("/v1/ledger/proof/consistency?from=%d", first.Size), r.anaToken)
	if err := tlog.CheckTree(decodeHashes(t, c.Proof), int64(latest.Size), latest.Root, int64(first.Size), first.Root); err != nil {
		t.Fatalf("consistency %d→%d: %v", first.Size, latest.Size, err)
	}
	req, _ := http.NewRequest(http.MethodPost, r.srv.URL+"/v1/ledger/proof/consistency", bytes.NewReader([]byte(held)))
	req.Header.Set("Authorization", "Bearer "+r.anaToken)
	presp, err := r.srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	pdata, _ := io.ReadAll(presp.Body)
	presp.Body.Close()
	c = ok[consistencyView](t, presp, pdata)
	if err := ledgerlog.VerifyConsistency(decodeHashes(t, c.Proof), first, latest); err != nil {
		t.Fatalf("consistency from the held checkpoint: %v", err)
	}

	// The export verifies on its own and against the held checkpoint.
	resp, data = r.get(t, "/v1/ledger/export", r.anaToken)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("export: %d %s", resp.StatusCode, data)
	}
	x, err := ledgerlog.ReadExport(bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	rep, err := ledgerlog.Verify(x, &first)
	if err != nil || rep.Entries != 14 || !rep.Consistent || rep.Openings != 7 {
		t.Fatalf("export: %+v, %v", rep, err)
	}

	// Bo still sees only his own, empty ledger.
	for _, p := range []string{"/v1/ledger", "/v1/ledger/entries", "/v1/ledger/proof/inclusion?index=0", "/v1/ledger/export"} {
		resp, data := r.get(t, p, r.boToken)
		refused(t, resp, data, http.StatusNotFound, "no_log")
	}

	// The same over the broker's gRPC (in-process in all-in-one mode).
	conn, err := r.b.Client(alpv1.Role_ROLE_LEDGER)
	if err != nil {
		t.Fatal(err)
	}
	gc := ledgerv1.NewLedgerServiceClient(conn)
	gh, err := gc.GetHead(grpcmd.AppendToOutgoingContext(t.Context(), "authorization", "Bearer "+r.anaToken), &ledgerv1.GetHeadRequest{})
	if err != nil || gh.GetSize() != 14 || gh.GetOrigin() != ledgerlog.Origin(tenant, r.ana.ID) {
		t.Fatalf("gRPC head: %v, %v", gh, err)
	}
	vs, _ := ledgerlog.Verifiers(gh.GetPublicKeys()[0].GetVerifierKey())
	if _, err := note.Open(gh.GetCheckpoint().GetNote(), vs); err != nil {
		t.Fatal(err)
	}
	if _, err := gc.GetHead(t.Context(), &ledgerv1.GetHeadRequest{}); err == nil {
		t.Fatal("gRPC head without a token")
	}
}

// okBroker is ok of a GET on the broker.
func okBroker[T any](t *testing.T, r *brokerRig, path, token string) T {
	t.Helper()
	resp, data := r.get(t, path, token)
	return ok[T](t, resp, data)
}
