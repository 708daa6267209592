package api

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"
	"time"

	"golang.org/x/mod/sumdb/tlog"

	"github.com/alpd-project/alpd/internal/httpjson"
	"github.com/alpd-project/alpd/internal/ledgerlog"
)

// exportBatch is how many entries an export reads at a time: large enough
// to keep round trips few, small enough to keep memory flat.
const exportBatch = 512

// export writes the reader's whole log as an alp-ledger-export/v1
// document (ledgerlog's writer, so alpctl ledger verify reads exactly
// this). It holds every entry up to the Head's size; entries beyond the
// checkpoint are in it too, and Verify reports them as unsigned.
//
// begin is called once the export can start (head read, keys known,
// concurrency slot taken) and returns where to write; a transport sets
// its headers there. An *httpjson.Error returned before begin is a clean refusal;
// after it (started true) the output is incomplete and the transport must
// make that visible (abort the response, fail the stream).
func (a *API) export(ctx context.Context, rd reader, begin func(*head) io.Writer) (started bool, _ *httpjson.Error) {
	release, e := a.exports.acquire(rd.Tenant + "\x00" + rd.PersonID)
	if e != nil {
		return false, e
	}
	defer release()
	h, e := a.readHead(ctx, rd)
	if e != nil {
		return false, e
	}
	keys, e := h.keys(ctx)
	if e != nil {
		return false, e
	}
	xkeys, err := exportKeys(rd.Tenant, keys)
	if err != nil {
		return false, internal(fmt.Errorf("export of %s: %w", h.Origin, err), "your ledger's keys cannot be listed")
	}
	hr, err := h.st.HashReader(ctx, rd.Tenant, rd.PersonID)
	if err != nil {
		return false, storageError(err, "reading your ledger's tree")
	}
	w := begin(h)
	if err := h.writeExport(ctx, w, hr, xkeys); err != nil {
		return true, internal(err, "the export broke off")
	}
	return true, nil
}

func (h *head) writeExport(ctx context.Context, w io.Writer, hr tlog.HashReader, keys []ledgerlog.ExportKey) error {
	ew, err := ledgerlog.NewExportWriter(w, h.Origin, keys, h.Checkpoint.Note, h.Size)
	if err != nil {
		return err
	}
	for from := uint64(0); from < h.Size; {
		if err := ctx.Err(); err != nil {
			return err
		}
		n := min(exportBatch, h.Size-from)
		es, err := h.st.Entries(ctx, h.rd.Tenant, h.rd.PersonID, from, int(n))
		if err != nil {
			return fmt.Errorf("export of %s: entries from %d: %w", h.Origin, from, err)
		}
		if len(es) == 0 {
			return fmt.Errorf("export of %s: no entries from %d of %d", h.Origin, from, h.Size)
		}
		es = es[:min(uint64(len(es)), n)]
		idx := make([]int64, len(es))
		for i, e := range es {
			if e.Index != from+uint64(i) {
				return fmt.Errorf("export of %s: entry %d has index %d", h.Origin, from+uint64(i), e.Index)
			}
			idx[i] = tlog.StoredHashIndex(0, int64(e.Index))
		}
		// The tree's leaf hashes, not ones computed from the leaves: a leaf
		// damaged after it was hashed is then named by Verify.
		lhs, err := hr.ReadHashes(idx)
		if err != nil || len(lhs) != len(es) {
			return fmt.Errorf("export of %s: leaf hashes from %d: %v", h.Origin, from, err)
		}
		for i, e := range es {
			x := ledgerlog.ExportEntry{Leaf: e.Leaf, LeafHash: lhs[i]}
			if e.Opening != nil {
				x.Salt, x.Digest = e.Opening.Salt, e.Opening.Digest
			}
			if err := ew.Write(x); err != nil {
				return err
			}
		}
		from += uint64(len(es))
	}
	return ew.Close()
}

// exportSlots bounds the exports running at once: max in all, perPerson
// for one person (tenant and person id). The per-person bound is what
// keeps the share fair: the slots one person can hold are never all of
// them, so a person whose connections stall (or who opens many) leaves
// room for everyone else, and the write deadline gives stalled slots back.
type exportSlots struct {
	max, perPerson int

	mu       sync.Mutex
	total    int
	byPerson map[string]int
}

func newExportSlots(max, perPerson int) *exportSlots {
	return &exportSlots{max: max, perPerson: perPerson, byPerson: map[string]int{}}
}

// acquire takes a slot for person, or says why not (429 with Retry-After).
// release gives it back; call it exactly once.
func (s *exportSlots) acquire(person string) (release func(), _ *httpjson.Error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.byPerson[person] >= s.perPerson:
		e := httpjson.Errorf(http.StatusTooManyRequests, CodeExportInProgress,
			"you already have %d export(s) of your ledger running (at most %d at once); let it finish and try again", s.byPerson[person], s.perPerson)
		e.RetryAfter = 10
		return nil, e
	case s.total >= s.max:
		e := httpjson.Errorf(http.StatusTooManyRequests, CodeTooManyExports, "too many ledgers are being exported right now; try again shortly")
		e.RetryAfter = 5
		return nil, e
	}
	s.total++
	s.byPerson[person]++
	var once sync.Once
	return func() {
		once.Do(func() {
			s.mu.Lock()
			defer s.mu.Unlock()
			s.total--
			if s.byPerson[person]--; s.byPerson[person] <= 0 {
				delete(s.byPerson, person)
			}
		})
	}, nil
}

// deadlineWriter gives every write to the client its own deadline, so a
// reader that stops reading makes the write fail after timeout instead of
// holding its export slot (and goroutine) for as long as it likes. Writes
// come in ExportWriter's 64 KiB chunks, so the deadline is per chunk and a
// slow but steady reader is never cut off. It also replaces whatever
// absolute write deadline the server set for the whole response: an
// export is as long as the ledger.
type deadlineWriter struct {
	w       io.Writer
	rc      *http.ResponseController
	timeout time.Duration
}

func (d *deadlineWriter) Write(p []byte) (int, error) {
	if err := d.rc.SetWriteDeadline(time.Now().Add(d.timeout)); err != nil {
		return 0, fmt.Errorf("export: setting the write deadline: %w", err)
	}
	n, err := d.w.Write(p)
	if err != nil {
		return n, fmt.Errorf("%w (at most %v per chunk): %w", errClientWrite, d.timeout, err)
	}
	return n, nil
}

// errClientWrite: the client did not take the export (it stopped reading
// or went away); the client's doing, not a failure of the broker.
var errClientWrite = errors.New("export: writing to the client failed")

// serveExport streams the export as JSON Lines, a download.
func (a *API) serveExport(w http.ResponseWriter, r *http.Request) {
	rd, e := a.authenticate(r)
	if e == nil {
		_, e = params(r)
	}
	if e != nil {
		a.fail(w, r, e)
		return
	}
	started, e := a.export(r.Context(), rd, func(h *head) io.Writer {
		hd := w.Header()
		hd.Set(CheckpointHeader, b64(h.Checkpoint.Note))
		hd.Set("Content-Type", "application/x-ndjson")
		hd.Set("Content-Disposition", fmt.Sprintf(`attachment; filename="alp-ledger-%s-%s-%d.jsonl"`, rd.Tenant, rd.PersonID, h.Size))
		httpjson.NoStore(hd)
		hd.Add("Vary", "Authorization, Cookie")
		w.WriteHeader(http.StatusOK)
		return &deadlineWriter{w: w, rc: http.NewResponseController(w), timeout: a.limits.ExportWriteTimeout}
	})
	switch {
	case e == nil:
	case !started:
		a.fail(w, r, e)
	default:
		// The status is sent: break the response off so the client sees a
		// failed download, not a short file.
		if errors.Is(e.Cause, errClientWrite) {
			a.log.Info("ledger api: export cut off: the client stopped reading", "tenant", rd.Tenant, "err", e.Cause)
		} else {
			a.log.Error("ledger api: export broke off", "tenant", rd.Tenant, "err", e.Cause)
		}
		panic(http.ErrAbortHandler)
	}
}
