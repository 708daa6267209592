package ledger

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/alpd-project/alpd/internal/ledgerlog"
	"github.com/alpd-project/alpd/services/ledger/receipts"
	"github.com/alpd-project/alpd/services/ledger/storage"
)

// LeafRef names the leaf a receipt is for: an envelope's entry in the
// person's log (the latest one with a commitment), or a leaf index.
type LeafRef struct {
	EnvelopeID string
	Index      uint64
	ByIndex    bool
}

// ByEnvelope refers to the latest entry of the envelope in the log.
func ByEnvelope(id string) LeafRef { return LeafRef{EnvelopeID: id} }

// ByIndex refers to leaf i.
func ByIndex(i uint64) LeafRef { return LeafRef{Index: i, ByIndex: true} }

// ErrNotStarted: the service has not started yet.
var ErrNotStarted = errors.New("ledger: not started")

// IssueLeafReceipt signs a receipt for a leaf of the person's log, to give to
// counterparty (their ledger origin): the latest checkpoint covering the
// leaf (signed at once if the batched rounds have not covered it yet), the
// inclusion proof, the whole signed with the tenant's ledger key. It then
// records a receipt.issued entry holding the receipt in the same log.
//
// The entry is appended here, by the calling replica, through the same
// fork-free append as the partition writers (package receipts), and the
// caller gets its answer without a round trip through the work queue. A
// retry of the same issuance (same leaf and counterparty) within the
// stream's dedupe window records nothing twice and returns the receipt
// recorded first.
func (s *Service) IssueLeafReceipt(ctx context.Context, tenant, personID string, ref LeafRef, counterparty string) (*ledgerlog.Receipt, error) {
	if s.store == nil {
		return nil, ErrNotStarted
	}
	index, leaf, err := s.findLeaf(ctx, tenant, personID, ref)
	if err != nil {
		return nil, err
	}
	r, _, err := s.receipts.Issue(ctx, tenant, personID, index, leaf, counterparty, time.Time{})
	return r, err
}

// RecordReceipt appends a counterparty's receipt for one of the person's
// envelopes to the person's log (a receipt.received entry), and returns the
// leaf's index. The caller (federation) verifies the receipt with the
// counterparty's keys first (ledgerlog.VerifyReceipt): the ledger checks
// its form, not whose signature it is, as it holds no remote keys.
func (s *Service) RecordReceipt(ctx context.Context, tenant, personID string, r *ledgerlog.Receipt) (uint64, error) {
	if s.store == nil {
		return 0, ErrNotStarted
	}
	if r == nil {
		return 0, fmt.Errorf("%w: no receipt", storage.ErrInvalid)
	}
	source := receipts.CommandID(ledgerlog.KindReceiptReceived, tenant, personID, r.Log, r.LeafHash, r.Signature)
	return s.receipts.Record(ctx, tenant, personID, r, source, time.Time{})
}

func (s *Service) findLeaf(ctx context.Context, tenant, personID string, ref LeafRef) (uint64, []byte, error) {
	if ref.ByIndex {
		leaf, err := s.store.Leaf(ctx, tenant, personID, ref.Index)
		return ref.Index, leaf, err
	}
	if ref.EnvelopeID == "" {
		return 0, nil, fmt.Errorf("%w: no envelope id or index", storage.ErrInvalid)
	}
	return s.store.FindEnvelope(ctx, tenant, personID, ref.EnvelopeID, time.Time{}, func(e ledgerlog.Entry) bool {
		return ledgerlog.IsEnvelopeKind(e.Kind) && e.Commitment != ""
	})
}
