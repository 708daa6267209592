package api_test

import (
	"bytes"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	alpv1 "github.com/alpd-project/alpd/gen/alp/v1"
	"github.com/alpd-project/alpd/internal/ledgerlog"
	"github.com/alpd-project/alpd/services/ledger/api"
)

func TestExport(t *testing.T) {
	r := newRig(t, api.Limits{})
	r.store.add(ana, 1100) // more than one batch
	held := r.store.sign(ana)
	r.store.add(ana, 5)
	r.store.sign(ana)
	r.store.add(ana, 3) // 1108 entries, checkpoint at 1105

	resp, data := r.get(t, "/v1/ledger/export", anaRead)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("export: %d %s", resp.StatusCode, data)
	}
	if ct := resp.Header.Get("Content-Type"); ct != "application/x-ndjson" {
		t.Errorf("Content-Type %q", ct)
	}
	if cd := resp.Header.Get("Content-Disposition"); cd != `attachment; filename="alp-ledger-example.org-ana0001-1108.jsonl"` {
		t.Errorf("Content-Disposition %q", cd)
	}
	if resp.Header.Get(api.CheckpointHeader) == "" {
		t.Error("no checkpoint header")
	}
	x, err := ledgerlog.ReadExport(bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	since, err := ledgerlog.CheckpointText(held)
	if err != nil {
		t.Fatal(err)
	}
	rep, err := ledgerlog.Verify(x, &since)
	if err != nil {
		t.Fatalf("the export does not verify: %v", err)
	}
	if rep.Entries != 1108 || rep.Unsigned != 3 || rep.Checkpoint.Size != 1105 || !rep.Consistent || rep.Erased == 0 || rep.Openings == 0 {
		t.Errorf("report %+v", rep)
	}
	if x.Log != ledgerlog.Origin(tenant, ana) || string(x.Checkpoint) != string(r.store.logs[ana].checkpoint) {
		t.Errorf("export of %s with checkpoint %q", x.Log, x.Checkpoint)
	}

	// The session may download its own ledger too.
	resp, data = r.do(t, request{path: "/v1/ledger/export", cookie: anaSession})
	if resp.StatusCode != http.StatusOK || !bytes.HasPrefix(data, []byte(`{"type":"alp-ledger-export/v1"`)) {
		t.Errorf("session export: %d %.80s", resp.StatusCode, data)
	}

	// Keys revoked as compromised are left out of an export.
	ctx := t.Context()
	old, _ := r.store.ks.Active(ctx, tenant, alpv1.KeyPurpose_KEY_PURPOSE_LEDGER)
	if _, err := r.store.ks.Rotate(ctx, tenant, alpv1.KeyPurpose_KEY_PURPOSE_LEDGER); err != nil {
		t.Fatal(err)
	}
	r.store.sign(ana)
	_, data = r.get(t, "/v1/ledger/export", anaRead)
	if x, err = ledgerlog.ReadExport(bytes.NewReader(data)); err != nil || len(x.Keys) != 2 {
		t.Fatalf("export after rotation: %v, %v", x, err)
	}
	if err := r.store.ks.Revoke(ctx, tenant, alpv1.KeyPurpose_KEY_PURPOSE_LEDGER, old.KeyID, time.Time{}); err != nil {
		t.Fatal(err)
	}
	_, data = r.get(t, "/v1/ledger/export", anaRead)
	if x, err = ledgerlog.ReadExport(bytes.NewReader(data)); err != nil || len(x.Keys) != 1 {
		t.Fatalf("export after revocation: %v, %v", x, err)
	}
	if _, err := ledgerlog.Verify(x, nil); err != nil {
		t.Fatal(err)
	}

	// Bo has none.
	resp, data = r.get(t, "/v1/ledger/export", boRead)
	refused(t, resp, data, http.StatusNotFound, api.CodeNoLog)
	resp, data = r.get(t, "/v1/ledger/export?format=csv", anaRead)
	refused(t, resp, data, http.StatusBadRequest, api.CodeInvalidParameter)
}

// TestExportBreaksOff: a storage failure in the middle of an export must
// not look like a complete, short file.
func TestExportBreaksOff(t *testing.T) {
	r := newRig(t, api.Limits{})
	r.store.add(ana, 1200)
	r.store.sign(ana)
	r.store.entriesFailFrom = 1000

	req, _ := http.NewRequest(http.MethodGet, r.srv.URL+"/v1/ledger/export", nil)
	req.Header.Set("Authorization", "Bearer "+anaRead)
	resp, err := r.srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d", resp.StatusCode)
	}
	data, err := io.ReadAll(resp.Body)
	if err == nil {
		t.Fatalf("a broken export read as complete (%d bytes)", len(data))
	}
	if _, err := ledgerlog.ReadExport(bytes.NewReader(data)); err == nil {
		t.Fatal("the truncated export parses")
	}
}

func TestExportLimit(t *testing.T) {
	r := newRig(t, api.Limits{MaxExports: 1})
	r.store.add(ana, 3)
	r.store.sign(ana)
	r.store.add(bo, 3)
	r.store.sign(bo)
	gate := make(chan struct{})
	r.store.entriesGate, r.store.entriesEntered = gate, make(chan struct{}, 1)

	var wg sync.WaitGroup
	wg.Add(1)
	var first []byte
	go func() {
		defer wg.Done()
		_, first = r.get(t, "/v1/ledger/export", anaRead)
	}()
	<-r.store.entriesEntered // the first export holds the slot
	resp, data := r.get(t, "/v1/ledger/export", boRead)
	if e := refused(t, resp, data, http.StatusTooManyRequests, api.CodeTooManyExports); e.RetryAfter == 0 || resp.Header.Get("Retry-After") == "" {
		t.Errorf("no Retry-After: %+v", e)
	}
	close(gate)
	wg.Wait()
	if !strings.HasPrefix(string(first), `{"type":"alp-ledger-export/v1"`) {
		t.Errorf("first export: %.100s", first)
	}
	// The slot is free again.
	r.store.entriesGate = nil
	resp, _ = r.get(t, "/v1/ledger/export", boRead)
	if resp.StatusCode != http.StatusOK {
		t.Errorf("after the first export: %d", resp.StatusCode)
	}
}
