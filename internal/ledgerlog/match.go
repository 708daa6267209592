package ledgerlog

import (
	"bytes"
	"errors"
	"fmt"
	"sort"
)

// Match statuses of an envelope.
const (
	MatchOK       = "matched"
	MatchMismatch = "mismatch"
	MatchOnlyA    = "only in A"
	MatchOnlyB    = "only in B"
)

// MatchRow is the outcome for one envelope.
type MatchRow struct {
	EnvelopeID string
	// AIndex and BIndex are the envelope's entries (not its receipts) in
	// each ledger, -1 when absent.
	AIndex, BIndex int64
	Status         string
	Problems       []string
}

// MatchReport is the outcome of matching two ledgers.
type MatchReport struct {
	A, B *Report
	Rows []MatchRow
	// Matched and Mismatched count rows; Unrelated counts envelopes that
	// appear in one ledger only and do not involve the other ledger (an
	// exchange with a third party).
	Matched, Mismatched, Unrelated int
}

// OK reports whether both ledgers verified and every envelope matched.
func (m *MatchReport) OK() bool { return m.A.OK() && m.B.OK() && m.Mismatched == 0 }

// Verdict is a one-line summary.
func (m *MatchReport) Verdict() string {
	if m.OK() {
		noun := "envelopes"
		if m.Matched == 1 {
			noun = "envelope"
		}
		return fmt.Sprintf("both ledgers verified, and all %d %s matched across them", m.Matched, noun)
	}
	var why []string
	if !m.A.OK() {
		why = append(why, "ledger A does not verify")
	}
	if !m.B.OK() {
		why = append(why, "ledger B does not verify")
	}
	if m.Mismatched > 0 {
		why = append(why, fmt.Sprintf("%d of %d envelopes do not match", m.Mismatched, m.Matched+m.Mismatched))
	}
	return "MISMATCH: " + joinComma(why)
}

func joinComma(s []string) string {
	var b bytes.Buffer
	for i, x := range s {
		if i > 0 {
			b.WriteString("; ")
		}
		b.WriteString(x)
	}
	return b.String()
}

// side is one ledger's view of one envelope.
type side struct {
	index int64 // the envelope entry, -1 if none
	// kind and commitment are the envelope entry's.
	kind, commitment string
	digest           []byte
	refs             bool  // some entry names the other ledger
	receipts         []int // receipt.received entries issued by the other ledger
}

// Match verifies two ledgers and checks them against each other, envelope
// by envelope (joined on envelope id): both record it; the digests agree
// where both openings are present; each side holds the other's receipt,
// which verifies with the other's keys, proves a leaf of the other's
// ledger that is this envelope with that commitment, and whose checkpoint
// is a prefix of the other export's checkpoint. Envelopes of one ledger
// that do not involve the other are counted as Unrelated.
//
// A recipient on the sender's own broker holds no receipt from the sender:
// its envelope.received carries the sender's own commitment instead (see
// KindReceived), which names the sender's leaf as exactly as a receipt's
// commitment does. Such a side (an envelope.received whose commitment is
// the other side's envelope entry's, which independent salts never make
// equal by chance) is not asked for the other's receipt; the sender must
// still hold the recipient's.
func Match(a, b *Export) *MatchReport {
	va := verify(a, nil, WithCounterpartyExport(b))
	vb := verify(b, nil, WithCounterpartyExport(a))
	m := &MatchReport{A: va.report, B: vb.report}

	sa, sb := collect(va, b.Log), collect(vb, a.Log)
	ids := make([]string, 0, len(sa)+len(sb))
	for id := range sa {
		ids = append(ids, id)
	}
	for id := range sb {
		if _, ok := sa[id]; !ok {
			ids = append(ids, id)
		}
	}
	sort.Strings(ids)
	for _, id := range ids {
		ea, inA := sa[id]
		eb, inB := sb[id]
		if !inA {
			ea = &side{index: -1}
		}
		if !inB {
			eb = &side{index: -1}
		}
		if !(ea.index >= 0 && eb.index >= 0) && !ea.refs && !eb.refs {
			m.Unrelated++
			continue
		}
		row := MatchRow{EnvelopeID: id, AIndex: ea.index, BIndex: eb.index}
		add := func(format string, args ...any) { row.Problems = append(row.Problems, fmt.Sprintf(format, args...)) }
		switch {
		case ea.index < 0 && eb.index < 0:
			add("neither ledger records the envelope itself, only receipts or references")
		case ea.index < 0:
			row.Status = MatchOnlyB
			add("ledger A has no entry for the envelope, though ledger B's entries involve A")
		case eb.index < 0:
			row.Status = MatchOnlyA
			add("ledger B has no entry for the envelope, though ledger A's entries involve B")
		}
		if ea.digest != nil && eb.digest != nil && !bytes.Equal(ea.digest, eb.digest) {
			add("the envelope digests differ: A recorded %x…, B recorded %x…", ea.digest[:6], eb.digest[:6])
		}
		checkReceipts(va, vb, ea, "A", "B", add, carriesCommitmentOf(ea, eb))
		checkReceipts(vb, va, eb, "B", "A", add, carriesCommitmentOf(eb, ea))
		if len(row.Problems) == 0 {
			row.Status = MatchOK
			m.Matched++
		} else {
			if row.Status == "" {
				row.Status = MatchMismatch
			}
			m.Mismatched++
		}
		m.Rows = append(m.Rows, row)
	}
	return m
}

// collect indexes one verified ledger by envelope id.
func collect(v *verified, other string) map[string]*side {
	out := map[string]*side{}
	for i, e := range v.entries {
		if e.envelopeID == "" || !e.ok {
			continue
		}
		s := out[e.envelopeID]
		if s == nil {
			s = &side{index: -1}
			out[e.envelopeID] = s
		}
		if e.counterparty == other {
			s.refs = true
		}
		switch {
		case IsEnvelopeKind(e.kind):
			if s.index < 0 {
				s.index, s.kind, s.commitment = int64(i), e.kind, e.commitment
				if xe := v.x.Entries[i]; e.opened {
					s.digest = xe.Digest
				}
			}
		case e.kind == KindReceiptReceived && e.receipt.Log == other:
			s.refs = true
			s.receipts = append(s.receipts, i)
		}
	}
	return out
}

// carriesCommitmentOf reports whether s records the envelope as received
// with the other side's own commitment (a recipient on the sender's
// broker).
func carriesCommitmentOf(s, other *side) bool {
	return s.kind == KindReceived && s.commitment != "" && other.index >= 0 && s.commitment == other.commitment
}

// checkReceipts checks that holder (ledger `hn`) holds a valid receipt
// from issuer (ledger `in`) for the envelope, pointing at the issuer's
// entry for it — unless optional (the holder's entry carries the issuer's
// commitment), when only the receipts it does hold are checked.
func checkReceipts(holder, issuer *verified, s *side, hn, in string, add func(string, ...any), optional bool) {
	if s.index < 0 {
		return
	}
	if len(s.receipts) == 0 {
		if !optional {
			add("ledger %s holds no receipt from %s", hn, in)
		}
		return
	}
	for _, i := range s.receipts {
		rc := holder.entries[i].receipt
		if err := checkReceiptAgainst(rc, issuer); err != nil {
			add("%s's receipt from %s (entry %d): %v", hn, in, i, err)
		}
	}
}

// checkReceiptAgainst checks a receipt against the issuer's whole export.
func checkReceiptAgainst(rc *Receipt, issuer *verified) error {
	if issuer.keys == nil {
		return fmt.Errorf("the issuer's export has no valid keys")
	}
	cp, err := VerifyReceipt(rc, issuer.keys)
	if err != nil {
		var nokey *NoKeyError
		if errors.As(err, &nokey) {
			return fmt.Errorf("signed by a key the issuer's export does not list")
		}
		return trimPrefix(err)
	}
	if rc.Index >= uint64(len(issuer.x.Entries)) {
		return fmt.Errorf("it points at entry %d, beyond the issuer's export of %d entries", rc.Index, len(issuer.x.Entries))
	}
	if err := CheckReceiptLeaf(rc, issuer.x.Entries[rc.Index].Leaf); err != nil {
		return trimPrefix(err)
	}
	return issuer.prefixOf(cp)
}
