package ledgerlog

import (
	"fmt"
	"strings"
)

// Problem is one thing wrong with a ledger. Index is the entry concerned,
// or -1 when the problem is the ledger's as a whole (its checkpoint, its
// keys, its consistency with an earlier checkpoint). Naming the entry is
// the point: "the ledger is broken" helps nobody decide what to dispute.
type Problem struct {
	Index      int64
	EnvelopeID string
	Msg        string
}

func (p Problem) Error() string {
	if p.Index < 0 {
		return "ledger: " + p.Msg
	}
	if p.EnvelopeID == "" {
		return fmt.Sprintf("entry %d: %s", p.Index, p.Msg)
	}
	return fmt.Sprintf("entry %d (envelope %s): %s", p.Index, p.EnvelopeID, p.Msg)
}

// VerifyError is returned by Verify when a ledger fails; Problems holds
// every problem found, in order (ledger-wide first, then by entry).
type VerifyError struct {
	Log      string
	Problems []Problem
}

func (e *VerifyError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "ledger %s does not verify: %s", e.Log, e.Problems[0].Error())
	if n := len(e.Problems) - 1; n > 0 {
		fmt.Fprintf(&b, " (and %d more problem", n)
		if n > 1 {
			b.WriteString("s")
		}
		b.WriteString(")")
	}
	return b.String()
}
