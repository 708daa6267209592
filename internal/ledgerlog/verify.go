package ledgerlog

import (
	"encoding/json"
	"fmt"
	"runtime"
	"sort"
	"sync"

	"golang.org/x/mod/sumdb/note"
	"golang.org/x/mod/sumdb/tlog"
)

// Report is the outcome of verifying one exported ledger.
type Report struct {
	Log string
	// Checkpoint is the export's checkpoint; CheckpointOK says whether its
	// signature and form verified under the export's keys.
	Checkpoint   Checkpoint
	CheckpointOK bool
	// Entries is the number of entries in the export; Unsigned of them lie
	// beyond the checkpoint, so nothing signed vouches for them yet.
	Entries  uint64
	Unsigned uint64
	// RootOK: the leaves reproduce the checkpoint's root.
	RootOK bool
	// Openings counts entries whose commitment opening was present and
	// checked; Erased counts entries with a commitment but no opening.
	Openings, Erased uint64
	// Since is the earlier checkpoint consistency was demanded from, and
	// Consistent whether it held.
	Since      *Checkpoint
	Consistent bool
	Receipts   []ReceiptCheck
	// Cosignatures are the checkpoint.cosigned entries, each checked.
	Cosignatures []CosignatureCheck
	Problems     []Problem
}

// ReceiptCheck is the outcome of checking one embedded receipt.
type ReceiptCheck struct {
	Index      uint64
	EnvelopeID string
	Kind       string
	// Issuer is the log that signed the receipt.
	Issuer string
	// Status is "verified", "unverified: no key for <origin>" or "invalid".
	Status string
}

// Receipt statuses.
const (
	ReceiptVerified = "verified"
	ReceiptInvalid  = "invalid"
)

// OK reports whether the ledger verified: no problems, a signed checkpoint
// whose root the leaves reproduce.
func (r *Report) OK() bool { return len(r.Problems) == 0 && r.CheckpointOK && r.RootOK }

// Err returns a *VerifyError when the ledger did not verify, else nil.
func (r *Report) Err() error {
	if r.OK() {
		return nil
	}
	ps := r.Problems
	if len(ps) == 0 {
		ps = []Problem{{Index: -1, Msg: "no verified checkpoint"}}
	}
	return &VerifyError{Log: r.Log, Problems: ps}
}

func (r *Report) ledgerProblem(format string, args ...any) {
	r.Problems = append(r.Problems, Problem{Index: -1, Msg: fmt.Sprintf(format, args...)})
}

// entryInfo is what later checks (receipts, Match) need of a parsed leaf.
type entryInfo struct {
	ok           bool // parsed, canonical, valid
	opened       bool // its opening was present and opens its commitment
	kind         string
	envelopeID   string
	commitment   string
	counterparty string
	receipt      *Receipt
	// checkpoint and cosignature are a checkpoint.cosigned entry's.
	checkpoint, cosignature string
	computed                tlog.Hash // LeafHash of the bytes in the export
}

// verified is a ledger after Verify, with what Match needs.
type verified struct {
	x       *Export
	report  *Report
	keys    note.Verifiers
	entries []entryInfo
	// tree holds the leaves the checkpoint vouches for (the computed
	// hashes, or the export's if only those reproduce the root); nil if
	// neither does.
	tree *MemoryTree
}

// Verify checks an exported ledger on its own:
//
//   - every leaf parses as a canonical, valid entry; its "i" is its
//     position and its "log" the export's origin;
//   - every opening present opens its entry's commitment;
//   - the checkpoint is signed by one of the export's keys for that origin,
//     and the tree rebuilt from the leaves has its root at its size;
//   - if since is given (a checkpoint the reader held earlier), the
//     export's checkpoint is not smaller and a consistency proof computed
//     from the leaves joins the two;
//   - every embedded receipt verifies (a received one only if its issuer's
//     keys were supplied with WithCounterpartyKeys);
//   - every recorded cosignature is of a checkpoint this log signed, a
//     prefix of the export's, and verifies if its cosigner's key was
//     supplied (WithCosignerKeys, or derived from WithCounterpartyKeys).
//
// The report lists every problem, each naming its entry; the error is the
// report's Err.
func Verify(x *Export, since *Checkpoint, opts ...VerifyOption) (*Report, error) {
	v := verify(x, since, opts...)
	return v.report, v.report.Err()
}

func verify(x *Export, since *Checkpoint, opts ...VerifyOption) *verified {
	var cfg verifyConfig
	for _, o := range opts {
		o(&cfg)
	}
	r := &Report{Log: x.Log, Entries: uint64(len(x.Entries)), Since: since}
	v := &verified{x: x, report: r}
	if cfg.keyError != nil {
		r.ledgerProblem("%v", cfg.keyError)
	}

	keys, err := x.Verifiers()
	if err != nil {
		r.ledgerProblem("keys: %v", err)
	} else {
		v.keys = keys
		cp, err := OpenCheckpoint(x.Checkpoint, x.Log, keys)
		if err != nil {
			r.ledgerProblem("checkpoint: %v", err)
		} else {
			r.Checkpoint, r.CheckpointOK = cp, true
		}
	}

	entryProblems := v.checkEntries()
	entryProblems = append(entryProblems, v.checkTree()...)
	if since != nil {
		v.checkSince(*since)
	}
	entryProblems = append(entryProblems, v.checkReceipts(cfg)...)
	entryProblems = append(entryProblems, v.checkCosignatures(cfg)...)
	sort.SliceStable(entryProblems, func(i, j int) bool { return entryProblems[i].Index < entryProblems[j].Index })
	r.Problems = append(r.Problems, entryProblems...)
	return v
}

// checkEntries parses and checks every leaf, in parallel: this is where a
// large ledger spends its time.
func (v *verified) checkEntries() []Problem {
	n := len(v.x.Entries)
	v.entries = make([]entryInfo, n)
	workers := runtime.GOMAXPROCS(0)
	if workers > n/1024+1 {
		workers = n/1024 + 1
	}
	var (
		mu       sync.Mutex
		problems []Problem
		openings uint64
		erased   uint64
		wg       sync.WaitGroup
	)
	chunk := (n + workers - 1) / max(workers, 1)
	for w := 0; w < workers; w++ {
		lo, hi := w*chunk, min((w+1)*chunk, n)
		if lo >= hi {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			var ps []Problem
			var op, er uint64
			for i := lo; i < hi; i++ {
				info, p, opened := v.checkEntry(uint64(i))
				info.opened = opened
				v.entries[i] = info
				ps = append(ps, p...)
				switch {
				case opened:
					op++
				case info.commitment != "" && !v.x.Entries[i].HasOpening():
					er++
				}
			}
			mu.Lock()
			problems = append(problems, ps...)
			openings += op
			erased += er
			mu.Unlock()
		}()
	}
	wg.Wait()
	v.report.Openings, v.report.Erased = openings, erased
	return problems
}

func (v *verified) checkEntry(i uint64) (entryInfo, []Problem, bool) {
	xe := v.x.Entries[i]
	info := entryInfo{computed: LeafHash(xe.Leaf)}
	e, err := ParseEntry(xe.Leaf)
	if err != nil {
		return info, []Problem{{Index: int64(i), EnvelopeID: guessEnvelopeID(xe.Leaf), Msg: err.Error()}}, false
	}
	info.kind, info.envelopeID, info.commitment = e.Kind, e.EnvelopeID, e.Commitment
	info.counterparty, info.receipt = e.Counterparty, e.Receipt
	info.checkpoint, info.cosignature = e.Checkpoint, e.Cosignature
	var ps []Problem
	bad := func(format string, args ...any) {
		ps = append(ps, Problem{Index: int64(i), EnvelopeID: e.EnvelopeID, Msg: fmt.Sprintf(format, args...)})
	}
	if e.Index != i {
		bad("the leaf says it is entry %d but stands at position %d: entries were removed, inserted or reordered", e.Index, i)
	}
	if e.Log != v.x.Log {
		bad("the leaf belongs to log %s, not %s", e.Log, v.x.Log)
	}
	opened := false
	if xe.HasOpening() {
		switch {
		case len(xe.Salt) != SaltSize || len(xe.Digest) != 32:
			bad("the opening needs a %d-byte salt and a 32-byte digest", SaltSize)
		case e.Commitment == "":
			bad("an opening is exported for an entry without a commitment")
		default:
			if err := CheckOpening(e.Commitment, xe.Salt, [32]byte(xe.Digest)); err != nil {
				bad("commitment %s: %v", short(e.Commitment), err)
			} else {
				opened = true
			}
		}
	}
	info.ok = len(ps) == 0
	return info, ps, opened
}

// guessEnvelopeID reads envelope_id from a leaf that failed to parse
// strictly, only to name it in the problem.
func guessEnvelopeID(leaf []byte) string {
	var g struct {
		EnvelopeID string `json:"envelope_id"`
	}
	if json.Unmarshal(leaf, &g) != nil || checkText("envelope_id", g.EnvelopeID, true) != nil {
		return ""
	}
	return g.EnvelopeID
}
