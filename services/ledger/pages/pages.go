// Package pages is the ledger service's page for people: their own
// ledger's newest entries, its latest signed checkpoint, what the page
// verified of it, and the link to the export `alpctl ledger verify` reads.
//
// # What the page verifies
//
// Against the log's storage (storage.Reader, as services/ledger/api), on
// every view:
//
//  1. the latest checkpoint is signed by a key of the person's tenant that
//     is not revoked (ledgerlog.OpenCheckpoint), for this person's log;
//  2. each entry shown that the checkpoint covers is in it: its inclusion
//     proof joins the leaf hash to the signed root (ledgerlog.VerifyInclusion),
//     and the leaf names this log and its own index;
//  3. when the page is opened from its own "check again" link, which
//     carries the tree head the page showed before (size and root), the
//     ledger only grew since: a consistency proof from that head to the
//     signed checkpoint (ledgerlog.VerifyConsistency). A smaller size is a
//     rollback and fails.
//
// The page is served by the broker whose ledger it checks, so this shows
// that the ledger's storage agrees with its signatures; independent
// assurance is the export, checked offline with `alpctl ledger verify`
// against a checkpoint the person kept.
package pages

import (
	"context"
	"embed"
	"encoding/base64"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net/http"
	"net/url"
	"strconv"

	"golang.org/x/mod/sumdb/tlog"

	alpv1 "github.com/alpd-project/alpd/gen/alp/v1"
	"github.com/alpd-project/alpd/internal/httpjson"
	"github.com/alpd-project/alpd/internal/httproute"
	"github.com/alpd-project/alpd/internal/ledgerlog"
	"github.com/alpd-project/alpd/internal/signin"
	"github.com/alpd-project/alpd/internal/webui"
	"github.com/alpd-project/alpd/services/ledger/api"
	"github.com/alpd-project/alpd/services/ledger/storage"
)

// PathLedger is the page, in the ledger service's space (/ledger/).
const PathLedger = webui.PathLedger

// ShownEntries is how many of the newest entries the page shows (and
// proves); the rest are in the export.
const ShownEntries = 50

// Error codes of the page.
const (
	CodeUnavailable = "ledger_unavailable"
	CodeBadHead     = "invalid_tree_head"
)

//go:embed templates
var templates embed.FS

var ledgerPage = func() *webui.Template {
	sub, err := fs.Sub(templates, "templates")
	if err != nil {
		panic(err)
	}
	return webui.Parse(sub, "ledger.html")
}()

// Options build the page.
type Options struct {
	// Backend is the ledger service, as services/ledger/api takes it.
	// Required.
	Backend api.Backend
	// UI is the shared web UI. Required.
	UI     *webui.UI
	Logger *slog.Logger
}

// Pages serves the ledger page. Safe for concurrent use.
type Pages struct {
	backend api.Backend
	ui      *webui.UI
	log     *slog.Logger
}

// New builds the page; it panics without Backend or UI.
func New(o Options) *Pages {
	if o.Backend == nil || o.UI == nil {
		panic("ledger/pages: Options.Backend and Options.UI are required")
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	return &Pages{backend: o.Backend, ui: o.UI, log: o.Logger}
}

// Routes: GET /ledger/ (?since=<size>&root=<base64 root>: the tree head
// to prove consistency from), and a 404 page for every other path under
// /ledger/. The export is services/ledger/api's GET /v1/ledger/export,
// which takes the same session cookie.
func (p *Pages) Routes() []httproute.Route {
	return []httproute.Route{
		{Method: http.MethodGet, Pattern: PathLedger + "{$}", Handler: p.ui.Page(http.HandlerFunc(p.serve)), Caller: httproute.Person, BodyLimit: httproute.NoBody},
		{Pattern: PathLedger, Handler: p.ui.NotFound(), Caller: httproute.Person, BodyLimit: httproute.NoBody},
	}
}

// check is one line of the verification.
type check struct {
	Name, Text  string
	OK, Skipped bool
}

type entryView struct {
	Index                    uint64
	Kind, Time               string
	Counterparty, Commitment string
	Erased                   bool
}

type ledgerData struct {
	Empty                 bool
	Origin                string
	Size                  uint64
	Unsigned              uint64
	Checkpoint            ledgerlog.Checkpoint
	Root                  string
	Signed                bool
	Signer                string
	Verified              bool
	Checks                []check
	Entries               []entryView
	Older                 uint64
	AgainHref, ExportHref string
}

func (p *Pages) serve(w http.ResponseWriter, r *http.Request) {
	s := signin.SessionFromContext(r.Context())
	since, err := parseSince(r.URL.Query())
	if err != nil {
		p.ui.Error(w, r, httpjson.Errorf(http.StatusBadRequest, CodeBadHead, "%v", err))
		return
	}
	st, e := p.store()
	if e != nil {
		p.ui.Error(w, r, e)
		return
	}
	d, err := p.build(r.Context(), st, s.Tenant, s.PersonID, since)
	if err != nil {
		p.log.ErrorContext(r.Context(), "ledger page: read failed", "tenant", s.Tenant, "person_id", s.PersonID, "err", err)
		p.ui.Error(w, r, &httpjson.Error{Status: http.StatusServiceUnavailable, Code: CodeUnavailable,
			Message: "your ledger cannot be read right now; try again shortly", RetryAfter: 1, Cause: err})
		return
	}
	d.ExportHref = api.PathExport
	p.ui.Render(w, r, http.StatusOK, ledgerPage, webui.Page{Title: "Your ledger", Nav: webui.NavLedger, Data: d})
}

// heldHead is the tree head a previous view showed.
type heldHead struct {
	Size uint64
	Root tlog.Hash
}

func parseSince(q url.Values) (*heldHead, error) {
	sz, root := q.Get("since"), q.Get("root")
	if sz == "" && root == "" {
		return nil, nil
	}
	n, err := strconv.ParseUint(sz, 10, 64)
	if err != nil || n == 0 || n > ledgerlog.MaxIndex {
		return nil, errors.New("since must be the size (1 or more) of a tree head this page showed")
	}
	b, err := base64.StdEncoding.DecodeString(root)
	if err != nil || len(b) != len(tlog.Hash{}) {
		return nil, errors.New("root must be the base64 root hash this page showed")
	}
	h := &heldHead{Size: n}
	copy(h.Root[:], b)
	return h, nil
}

func (p *Pages) store() (storage.Reader, *httpjson.Error) {
	if err := p.backend.Ready(); err != nil {
		return nil, &httpjson.Error{Status: http.StatusServiceUnavailable, Code: CodeUnavailable, Message: "the ledger is not ready yet; try again shortly", RetryAfter: 1, Cause: err}
	}
	st := p.backend.Storage()
	if st == nil {
		return nil, httpjson.Errorf(http.StatusServiceUnavailable, CodeUnavailable, "the ledger is not available")
	}
	return st, nil
}

// build reads the head, the newest entries and the proofs. A storage
// failure is an error; a proof or signature that fails is a failed check,
// shown as such.
func (p *Pages) build(ctx context.Context, st storage.Reader, tenant, person string, since *heldHead) (*ledgerData, error) {
	origin := ledgerlog.Origin(tenant, person)
	d := &ledgerData{Origin: origin}
	h, err := st.Head(ctx, tenant, person)
	if errors.Is(err, storage.ErrNoLog) {
		d.Empty = true
		return d, nil
	}
	if err != nil {
		return nil, fmt.Errorf("head: %w", err)
	}
	if h.Origin != origin {
		return nil, fmt.Errorf("head of %s names origin %q", origin, h.Origin)
	}
	d.Size = h.Size
	ok := true
	add := func(c check) {
		d.Checks = append(d.Checks, c)
		ok = ok && (c.OK || c.Skipped)
	}

	// 1. The checkpoint's signature.
	var cp ledgerlog.Checkpoint
	keys, err := st.PublicKeys(ctx, tenant)
	if err != nil {
		return nil, fmt.Errorf("keys: %w", err)
	}
	var vkeys []string
	for _, k := range keys {
		if k.State != alpv1.KeyState_KEY_STATE_REVOKED {
			vkeys = append(vkeys, k.VerifierKey)
		}
	}
	switch {
	case len(h.SignedCheckpoint) == 0:
		add(check{Name: "signature", Text: "No checkpoint is signed yet; your newest entries are being signed. Reload in a moment."})
	case len(vkeys) == 0:
		add(check{Name: "signature", Text: "Your organization has no ledger key that is not revoked: the checkpoint cannot be verified."})
	default:
		verifiers, verr := ledgerlog.Verifiers(vkeys...)
		if verr == nil {
			cp, verr = ledgerlog.OpenCheckpoint(h.SignedCheckpoint, origin, verifiers)
		}
		if verr != nil {
			add(check{Name: "signature", Text: "The checkpoint's signature does not verify: " + verr.Error()})
		} else {
			d.Signed, d.Signer = true, ledgerlog.KeyName(tenant)
			add(check{Name: "signature", OK: true, Text: fmt.Sprintf("The checkpoint of %d entries is signed by your organization's ledger key.", cp.Size), Skipped: false})
		}
	}
	if d.Signed && (cp.Size != h.CheckpointSize || cp.Size > h.Size) {
		add(check{Name: "head", Text: fmt.Sprintf("The signed checkpoint (%d entries) disagrees with the ledger's head (%d entries).", cp.Size, h.Size)})
	}
	d.Checkpoint = cp
	d.Root = base64.StdEncoding.EncodeToString(cp.Root[:])
	if d.Signed && h.Size > cp.Size {
		d.Unsigned = h.Size - cp.Size
	}

	// 2. The newest entries and their inclusion in the signed tree.
	from := uint64(0)
	if h.Size > ShownEntries {
		from = h.Size - ShownEntries
	}
	d.Older = from
	es, err := st.Entries(ctx, tenant, person, from, int(h.Size-from))
	if err != nil {
		return nil, fmt.Errorf("entries from %d: %w", from, err)
	}
	proved, failed := 0, 0
	var firstFail string
	for i := len(es) - 1; i >= 0; i-- {
		x := es[i]
		v := entryView{Index: x.Index, Erased: x.Erased}
		e, perr := ledgerlog.ParseEntry(x.Leaf)
		if perr == nil {
			v.Kind, v.Time, v.Commitment, v.Counterparty = e.Kind, e.Time, e.Commitment, domainOf(e.Counterparty)
		} else {
			v.Kind = "(unreadable)"
		}
		d.Entries = append(d.Entries, v)
		if !d.Signed || x.Index >= cp.Size {
			continue
		}
		why := ""
		switch {
		case perr != nil:
			why = fmt.Sprintf("entry %d does not parse: %v", x.Index, perr)
		case e.Log != origin || e.Index != x.Index:
			why = fmt.Sprintf("entry %d names log %q index %d", x.Index, e.Log, e.Index)
		default:
			proof, err := st.InclusionProof(ctx, tenant, person, x.Index, cp.Size)
			if err != nil {
				return nil, fmt.Errorf("inclusion of %d in %d: %w", x.Index, cp.Size, err)
			}
			if err := ledgerlog.VerifyInclusion(proof, cp, x.Index, ledgerlog.LeafHash(x.Leaf)); err != nil {
				why = err.Error()
			}
		}
		if why != "" {
			failed++
			if firstFail == "" {
				firstFail = why
			}
			continue
		}
		proved++
	}
	switch {
	case !d.Signed:
		add(check{Name: "inclusion", Skipped: true, Text: "The entries shown could not be proved without a verified checkpoint."})
	case failed > 0:
		add(check{Name: "inclusion", Text: fmt.Sprintf("%d of the entries shown are not in the signed checkpoint: %s", failed, firstFail)})
	default:
		add(check{Name: "inclusion", OK: true, Text: fmt.Sprintf("Each of the %d entries shown that the checkpoint covers is proved to be in it.", proved)})
	}

	// 3. Consistency with the tree head shown before.
	switch {
	case since == nil:
		add(check{Name: "consistency", Skipped: true, Text: "No earlier tree head to compare with: use \"check again\" below on your next visit."})
	case !d.Signed:
		add(check{Name: "consistency", Skipped: true, Text: "Consistency cannot be proved without a verified checkpoint."})
	case since.Size > cp.Size:
		add(check{Name: "consistency", Text: fmt.Sprintf("The ledger shrank: it showed %d entries before and signs %d now (a rollback).", since.Size, cp.Size)})
	default:
		older := ledgerlog.Checkpoint{Origin: origin, Size: since.Size, Root: since.Root}
		proof, err := st.ConsistencyProof(ctx, tenant, person, since.Size, cp.Size)
		if err != nil {
			return nil, fmt.Errorf("consistency from %d to %d: %w", since.Size, cp.Size, err)
		}
		if err := ledgerlog.VerifyConsistency(proof, older, cp); err != nil {
			add(check{Name: "consistency", Text: "The ledger is not consistent with the tree head shown before: " + err.Error()})
		} else {
			add(check{Name: "consistency", OK: true, Text: fmt.Sprintf("The ledger only grew since the tree head of %d entries shown before.", since.Size)})
		}
	}
	d.Verified = ok && d.Signed
	if d.Signed {
		d.AgainHref = PathLedger + "?" + url.Values{"since": {strconv.FormatUint(cp.Size, 10)}, "root": {d.Root}}.Encode()
	} else {
		d.AgainHref = PathLedger
	}
	return d, nil
}

// domainOf is the counterparty's domain: an entry names the other side's
// log origin when known, else its domain.
func domainOf(counterparty string) string {
	if t, _, err := ledgerlog.ParseOrigin(counterparty); err == nil {
		return t
	}
	return counterparty
}
