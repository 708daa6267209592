package api_test

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
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

// smallBufferServer serves h on loopback with small socket send buffers,
// so that a client that does not read makes the handler's writes block
// after a few tens of KiB instead of after the megabytes loopback buffers
// grow to. closed, if set, is told of every connection the server closes.
func smallBufferServer(t *testing.T, h http.Handler, closed func(net.Conn)) *httptest.Server {
	t.Helper()
	srv := httptest.NewUnstartedServer(h)
	srv.Listener = smallBufferListener{srv.Listener}
	if closed != nil {
		srv.Config.ConnState = func(c net.Conn, s http.ConnState) {
			if s == http.StateClosed || s == http.StateHijacked {
				closed(c)
			}
		}
	}
	srv.Start()
	t.Cleanup(srv.Close)
	return srv
}

type smallBufferListener struct{ net.Listener }

func (l smallBufferListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetWriteBuffer(8 << 10)
	}
	return c, err
}

// stalledExport asks srv for token's export on a connection of its own and
// reads only the response's head: the body (if any) is never read, as by a
// client that stopped reading.
func stalledExport(t *testing.T, srv *httptest.Server, token string) (*http.Response, net.Conn) {
	t.Helper()
	c, err := net.Dial("tcp", srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	_ = c.(*net.TCPConn).SetReadBuffer(8 << 10)
	if _, err := fmt.Fprintf(c, "GET /v1/ledger/export HTTP/1.1\r\nHost: ledger.test\r\nAuthorization: Bearer %s\r\n\r\n", token); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	return resp, c
}

// TestExportStalledReadersDoNotStarveOthers: one person opening as many
// exports as the process has slots, on connections that never read, must
// not keep another person from exporting (issue 10, finding 5). Each
// person holds at most their share of the slots; beyond it they get 429
// export_in_progress with Retry-After.
func TestExportStalledReadersDoNotStarveOthers(t *testing.T) {
	r := newRig(t, api.Limits{}) // the defaults: 4 slots, 1 per person
	r.store.add(ana, 4000)       // well over a megabyte: never fits the socket buffers
	r.store.sign(ana)
	r.store.add(bo, 3)
	r.store.sign(bo)
	srv := smallBufferServer(t, r.api, nil)

	var statuses []int
	for range 4 {
		resp, _ := stalledExport(t, srv, anaRead)
		statuses = append(statuses, resp.StatusCode)
		if resp.StatusCode == http.StatusTooManyRequests {
			data, err := io.ReadAll(resp.Body)
			if err != nil {
				t.Fatal(err)
			}
			if e := refused(t, resp, data, http.StatusTooManyRequests, api.CodeExportInProgress); e.RetryAfter == 0 || resp.Header.Get("Retry-After") == "" {
				t.Errorf("no Retry-After: %+v", e)
			}
		}
	}

	// Bo still gets his whole export.
	req, _ := http.NewRequest(http.MethodGet, srv.URL+"/v1/ledger/export", nil)
	req.Header.Set("Authorization", "Bearer "+boRead)
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	data, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("bo's export while ana's readers stall: %d %v %.200s", resp.StatusCode, err, data)
	}
	if x, err := ledgerlog.ReadExport(bytes.NewReader(data)); err != nil || len(x.Entries) != 3 {
		t.Fatalf("bo's export: %v", err)
	}
	if want := []int{200, 429, 429, 429}; fmt.Sprint(statuses) != fmt.Sprint(want) {
		t.Errorf("ana's stalled exports answered %v, want %v (one slot per person)", statuses, want)
	}
}

// TestExportWriteDeadline: a reader that stops reading is cut off once a
// write has waited ExportWriteTimeout, and its slot is free again (issue
// 10, finding 5).
func TestExportWriteDeadline(t *testing.T) {
	r := newRig(t, api.Limits{ExportWriteTimeout: 200 * time.Millisecond})
	r.store.add(ana, 4000)
	r.store.sign(ana)
	closed := make(chan net.Conn, 8)
	srv := smallBufferServer(t, r.api, func(c net.Conn) { closed <- c })

	resp, _ := stalledExport(t, srv, anaRead)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("export: %d", resp.StatusCode)
	}
	// The bound is generous; the deadline is a fifth of a second.
	select {
	case <-closed:
	case <-time.After(20 * time.Second):
		t.Fatal("a reader that stopped reading still holds its export: no write deadline cut it off")
	}
	// What the stalled reader does get is visibly incomplete.
	if data, err := io.ReadAll(resp.Body); err == nil {
		t.Fatalf("the cut-off export read as complete (%d bytes)", len(data))
	}
	// Ana's slot is hers again.
	_, data := r.do(t, request{path: "/v1/ledger/export", token: anaRead})
	if x, err := ledgerlog.ReadExport(bytes.NewReader(data)); err != nil || len(x.Entries) != 4000 {
		t.Fatalf("export after the cut-off one: %v %.200s", err, data)
	}
}
