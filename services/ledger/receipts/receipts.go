// Package receipts signs the ledger's receipts and records receipt entries:
// the one place where a receipt is made over a leaf of a person's log (the
// latest signed checkpoint covering it, the inclusion proof, the tenant's
// ledger key) and where receipt.issued and receipt.received entries are
// appended. The service's IssueReceipt and RecordReceipt (federation's
// calls) and the partition writers (a same-broker delivery's receipt) use
// it.
//
// Entries are appended here, by the calling process, through the same
// append as every leaf (jsstore.Store.Append): what keeps a log from
// forking is the expected-sequence append, not which process writes, so a
// direct append to any person's log — another partition's included — only
// costs a counted conflict when a partition writer appends to the same
// log at that instant.
package receipts

import (
	"context"
	"crypto"
	"fmt"
	"time"

	alpv1 "github.com/alpd-project/alpd/gen/alp/v1"
	"github.com/alpd-project/alpd/internal/bus"
	"github.com/alpd-project/alpd/internal/keystore"
	"github.com/alpd-project/alpd/internal/ledgerlog"
	"github.com/alpd-project/alpd/services/ledger/storage"
	"github.com/alpd-project/alpd/services/ledger/storage/jsstore"
)

// Issuer signs and records receipts.
type Issuer struct {
	Store *jsstore.Store
	Keys  keystore.KeyStore
}

// Issue signs a receipt for leaf index of the person's log (leaf: its
// bytes), to give to counterparty (their ledger origin), and records it in
// that log as a receipt.issued entry. One leaf and counterparty get one
// entry: a retry records nothing more and returns the receipt recorded
// first (whose checkpoint may be older than the one a retry would sign).
// since, when not zero, is the earliest time an earlier attempt can have
// recorded it: the log is searched from then on, for a retry beyond the
// stream's dedupe window. It returns the receipt and the index of its
// receipt.issued entry.
func (i *Issuer) Issue(ctx context.Context, tenant, personID string, index uint64, leaf []byte, counterparty string, since time.Time) (*ledgerlog.Receipt, uint64, error) {
	cp, size, err := i.Store.CheckpointNow(ctx, tenant, personID)
	if err != nil {
		return nil, 0, err
	}
	if size <= index {
		return nil, 0, fmt.Errorf("ledger: checkpoint of %d leaves does not cover leaf %d", size, index)
	}
	proof, err := i.Store.InclusionProof(ctx, tenant, personID, index, size)
	if err != nil {
		return nil, 0, err
	}
	signer, err := i.Signer(ctx, tenant)
	if err != nil {
		return nil, 0, err
	}
	r, err := ledgerlog.IssueReceipt(signer, tenant, leaf, index, cp, proof, counterparty)
	if err != nil {
		return nil, 0, err
	}
	source := CommandID(ledgerlog.KindReceiptIssued, tenant, personID, r.LeafHash, counterparty)
	res, err := i.appendEntry(ctx, tenant, personID, ledgerlog.KindReceiptIssued, source, r, counterparty, since)
	if err != nil {
		return nil, 0, fmt.Errorf("ledger: receipt issued, but not recorded: %w", err)
	}
	if !res.Duplicate {
		return r, res.Index, nil
	}
	// Recorded before: the receipt given out is that one.
	stored, err := i.Store.Leaf(ctx, tenant, personID, res.Index)
	if err != nil {
		return nil, 0, fmt.Errorf("ledger: reading the receipt recorded before: %w", err)
	}
	e, err := ledgerlog.ParseEntry(stored)
	if err != nil || e.Kind != ledgerlog.KindReceiptIssued || e.Receipt == nil {
		return nil, 0, fmt.Errorf("ledger: leaf %d of %s/%s is not the receipt recorded before: %v", res.Index, tenant, personID, err)
	}
	return e.Receipt, res.Index, nil
}

// Signer is the tenant's active ledger key: it signs checkpoints,
// receipts and, as the tenant's witness, cosignatures.
func (i *Issuer) Signer(ctx context.Context, tenant string) (crypto.Signer, error) {
	key, err := i.Keys.Active(ctx, tenant, alpv1.KeyPurpose_KEY_PURPOSE_LEDGER)
	if err != nil {
		return nil, fmt.Errorf("ledger: key of %s: %w", tenant, err)
	}
	signer, err := i.Keys.Signer(ctx, tenant, alpv1.KeyPurpose_KEY_PURPOSE_LEDGER, key.KeyID)
	if err != nil {
		return nil, fmt.Errorf("ledger: key of %s: %w", tenant, err)
	}
	return signer, nil
}

// Append appends an entry the caller built (all but its index) to the
// person's log, once per source: Build fills in the index. It is how the
// federation entries and cosignatures are recorded.
func (i *Issuer) Append(ctx context.Context, tenant, personID, source, correlation string, since time.Time, entry ledgerlog.Entry) (jsstore.Result, error) {
	return i.Store.Append(ctx, jsstore.Request{Tenant: tenant, Person: personID, SourceID: source, Correlation: correlation, Since: since,
		Build: func(index uint64) ([]byte, []byte, error) {
			e := entry
			e.Index = index
			leaf, err := e.Canonical()
			if err != nil {
				return nil, nil, fmt.Errorf("%w: %v", storage.ErrInvalid, err)
			}
			return leaf, nil, nil
		}})
}

// Record appends r, a receipt another log issued for one of the person's
// envelopes, to the person's log as a receipt.received entry, and returns
// the leaf's index. source names the recording (CommandID of what it is
// about): one source, one entry. since is as for Issue.
func (i *Issuer) Record(ctx context.Context, tenant, personID string, r *ledgerlog.Receipt, source string, since time.Time) (uint64, error) {
	if r == nil {
		return 0, fmt.Errorf("%w: no receipt", storage.ErrInvalid)
	}
	res, err := i.appendEntry(ctx, tenant, personID, ledgerlog.KindReceiptReceived, source, r, r.Log, since)
	return res.Index, err
}

func (i *Issuer) appendEntry(ctx context.Context, tenant, personID, kind, source string, r *ledgerlog.Receipt, counterparty string, since time.Time) (jsstore.Result, error) {
	entry := ledgerlog.Entry{V: ledgerlog.EntryVersion, Log: ledgerlog.Origin(tenant, personID), Kind: kind,
		SourceEvent: source, EnvelopeID: r.EnvelopeID, Counterparty: counterparty, Receipt: r,
		Time: ledgerlog.FormatTime(time.Now())}
	return i.Append(ctx, tenant, personID, source, r.EnvelopeID, since, entry)
}

// CommandID derives the source id of a command from what it is about
// (parts[0] names the command), so that a retried command is recognised
// as the same one.
func CommandID(parts ...string) string { return parts[0] + ":" + bus.HashID(parts...) }
