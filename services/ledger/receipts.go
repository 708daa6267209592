package ledger

import (
	"context"
	"errors"
	"fmt"
	"time"

	alpv1 "github.com/alpd-project/alpd/gen/alp/v1"
	"github.com/alpd-project/alpd/internal/bus"
	"github.com/alpd-project/alpd/internal/ledgerlog"
	"github.com/alpd-project/alpd/services/ledger/storage"
	"github.com/alpd-project/alpd/services/ledger/storage/jsstore"
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

// IssueReceipt signs a receipt for a leaf of the person's log, to give to
// counterparty (their ledger origin): the latest checkpoint covering the
// leaf (signed at once if the batched rounds have not covered it yet), the
// inclusion proof, the whole signed with the tenant's ledger key. It then
// records a receipt.issued entry holding the receipt in the same log.
//
// The entry is appended here, by the calling replica, through the same
// append as the partition writers (jsstore.Store.Append): what keeps a log
// from forking is the expected-sequence append, not which process writes,
// so a direct append only costs a counted conflict when a partition
// writer on another replica appends to the same log at that instant, and
// the caller gets its answer without a round trip through the work queue.
// A retry of the same issuance (same leaf and counterparty) within the
// stream's dedupe window records nothing twice.
func (s *Service) IssueReceipt(ctx context.Context, tenant, personID string, ref LeafRef, counterparty string) (*ledgerlog.Receipt, error) {
	if s.store == nil {
		return nil, ErrNotStarted
	}
	index, leaf, err := s.findLeaf(ctx, tenant, personID, ref)
	if err != nil {
		return nil, err
	}
	cp, size, err := s.store.CheckpointNow(ctx, tenant, personID)
	if err != nil {
		return nil, err
	}
	if size <= index {
		return nil, fmt.Errorf("ledger: checkpoint of %d leaves does not cover leaf %d", size, index)
	}
	proof, err := s.store.InclusionProof(ctx, tenant, personID, index, size)
	if err != nil {
		return nil, err
	}
	key, err := s.Keys.Active(ctx, tenant, alpv1.KeyPurpose_KEY_PURPOSE_LEDGER)
	if err != nil {
		return nil, fmt.Errorf("ledger: key of %s: %w", tenant, err)
	}
	signer, err := s.Keys.Signer(ctx, tenant, alpv1.KeyPurpose_KEY_PURPOSE_LEDGER, key.KeyID)
	if err != nil {
		return nil, fmt.Errorf("ledger: key of %s: %w", tenant, err)
	}
	r, err := ledgerlog.IssueReceipt(signer, tenant, leaf, index, cp, proof, counterparty)
	if err != nil {
		return nil, err
	}
	source := commandID("receipt.issued", tenant, personID, r.LeafHash, counterparty)
	if _, err := s.appendReceipt(ctx, tenant, personID, ledgerlog.KindReceiptIssued, source, r, counterparty); err != nil {
		return nil, fmt.Errorf("ledger: receipt issued, but not recorded: %w", err)
	}
	return r, nil
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
	source := commandID("receipt.received", tenant, personID, r.Log, r.LeafHash, r.Signature)
	return s.appendReceipt(ctx, tenant, personID, ledgerlog.KindReceiptReceived, source, r, r.Log)
}

func (s *Service) appendReceipt(ctx context.Context, tenant, personID, kind, source string, r *ledgerlog.Receipt, counterparty string) (uint64, error) {
	entry := ledgerlog.Entry{V: ledgerlog.EntryVersion, Log: ledgerlog.Origin(tenant, personID), Kind: kind,
		SourceEvent: source, EnvelopeID: r.EnvelopeID, Counterparty: counterparty, Receipt: r,
		Time: ledgerlog.FormatTime(time.Now())}
	res, err := s.store.Append(ctx, jsstore.Request{Tenant: tenant, Person: personID, SourceID: source, Correlation: r.EnvelopeID,
		Build: func(index uint64) ([]byte, []byte, error) {
			e := entry
			e.Index = index
			leaf, err := e.Canonical()
			if err != nil {
				return nil, nil, fmt.Errorf("%w: %v", storage.ErrInvalid, err)
			}
			return leaf, nil, nil
		}})
	return res.Index, err
}

func (s *Service) findLeaf(ctx context.Context, tenant, personID string, ref LeafRef) (uint64, []byte, error) {
	if ref.ByIndex {
		leaf, err := s.store.Leaf(ctx, tenant, personID, ref.Index)
		return ref.Index, leaf, err
	}
	if ref.EnvelopeID == "" {
		return 0, nil, fmt.Errorf("%w: no envelope id or index", storage.ErrInvalid)
	}
	return s.store.FindEnvelope(ctx, tenant, personID, ref.EnvelopeID, func(e ledgerlog.Entry) bool {
		return ledgerlog.IsEnvelopeKind(e.Kind) && e.Commitment != ""
	})
}

// commandID derives the source id of a command from what it is about, so
// that a retried command is recognised as the same one.
func commandID(parts ...string) string { return parts[0] + ":" + bus.HashID(parts...) }
