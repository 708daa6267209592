package ledger

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/google/uuid"
	"golang.org/x/mod/sumdb/tlog"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	ledgerv1 "github.com/alpd-project/alpd/gen/alp/ledger/v1"
	"github.com/alpd-project/alpd/internal/alp"
	"github.com/alpd-project/alpd/internal/ledgerlog"
	"github.com/alpd-project/alpd/services/ledger/receipts"
	"github.com/alpd-project/alpd/services/ledger/storage"
	"github.com/alpd-project/alpd/services/ledger/storage/jsstore"
)

// Federation's methods of LedgerService: what the ledger does for an
// exchange with another broker (docs/ledger.md, "Across brokers"). They act
// for the broker, so the request names tenant and person; mTLS lets only
// federation call them (internal/mtls.DefaultPolicy).
//
// Errors are status errors whose message starts with a stable code (the
// trailer alp-error-code carries it too), as the read methods' do.

// Stable codes of the federation methods' errors.
const (
	CodeNotRecorded         = "not_recorded"          // NOT_FOUND: the entry is not in the log yet; retry
	CodeNoCommitment        = "no_commitment"         // FAILED_PRECONDITION: the entry has no commitment
	CodeInvalidRequest      = "invalid_request"       // INVALID_ARGUMENT
	CodeTenantNotHosted     = "tenant_not_hosted"     // NOT_FOUND
	CodeInvalidCheckpoint   = "invalid_checkpoint"    // INVALID_ARGUMENT: not signed by the given keys, or malformed
	CodeWitnessSizeMismatch = "witness_size_mismatch" // FAILED_PRECONDITION: old_size is not the size the witness holds
	CodeSplitView           = "split_view"            // FAILED_PRECONDITION: inconsistent with what the witness cosigned
	CodeRetry               = "retry"                 // ABORTED: a concurrent call changed the state; retry
	CodeUnavailable         = "not_ready"             // UNAVAILABLE
)

// MetadataWitnessSize is the trailer giving the size a witness holds.
const MetadataWitnessSize = "alp-witness-size"

func rpcError(ctx context.Context, c codes.Code, code, format string, args ...any) error {
	_ = grpc.SetTrailer(ctx, metadata.Pairs("alp-error-code", code))
	return status.Error(c, code+": "+fmt.Sprintf(format, args...))
}

// checkCall refuses a call before Start or for a tenant the ledger does
// not host, and (unless persons is empty) for malformed person ids.
func (s *Service) checkCall(ctx context.Context, tenant string, persons ...string) error {
	if s.store == nil {
		return rpcError(ctx, codes.Unavailable, CodeUnavailable, "the ledger has not started")
	}
	if !s.Tenants.Hosts(tenant) {
		return rpcError(ctx, codes.NotFound, CodeTenantNotHosted, "this broker does not keep ledgers of %q", tenant)
	}
	for _, p := range persons {
		if err := alp.ValidatePersonID(p); err != nil {
			return rpcError(ctx, codes.InvalidArgument, CodeInvalidRequest, "person_id: %v", err)
		}
	}
	return nil
}

// storeError maps what the store answers for a federation call.
func storeError(ctx context.Context, err error, what string) error {
	switch {
	case errors.Is(err, storage.ErrNotHosted):
		return rpcError(ctx, codes.NotFound, CodeTenantNotHosted, "%s: %v", what, err)
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return rpcError(ctx, codes.Unavailable, CodeUnavailable, "%s took too long; retry", what)
	}
	return status.Errorf(codes.Internal, "%s: %v", what, err)
}

// findEnvelopeEntry finds the person's entry of kind for the envelope:
// NOT_FOUND while there is none (no log yet, or not recorded yet).
func (s *Service) findEnvelopeEntry(ctx context.Context, tenant, person, envelopeID, kind string) (uint64, ledgerlog.Entry, []byte, error) {
	if err := checkID(envelopeID); err != nil {
		return 0, ledgerlog.Entry{}, nil, rpcError(ctx, codes.InvalidArgument, CodeInvalidRequest, "envelope_id: %v", err)
	}
	i, leaf, err := s.store.FindEnvelope(ctx, tenant, person, envelopeID, earliestEntry(envelopeID), func(e ledgerlog.Entry) bool { return e.Kind == kind })
	// FindEnvelope's ErrInvalid, for a request checked first, is "none".
	if errors.Is(err, storage.ErrNoLog) || errors.Is(err, storage.ErrInvalid) {
		return 0, ledgerlog.Entry{}, nil, rpcError(ctx, codes.NotFound, CodeNotRecorded, "the log of %s has no %s entry of envelope %s yet", person, kind, envelopeID)
	}
	if err != nil {
		return 0, ledgerlog.Entry{}, nil, storeError(ctx, err, "reading the log")
	}
	e, err := ledgerlog.ParseEntry(leaf)
	if err != nil {
		return 0, ledgerlog.Entry{}, nil, status.Errorf(codes.Internal, "entry %d of %s: %v", i, person, err)
	}
	return i, e, leaf, nil
}

// idClockSkew is how far the clock that made an envelope id may run ahead
// of the one recording the envelope: federation's skew (5 min), twice.
const idClockSkew = 10 * time.Minute

// earliestEntry bounds the search for an envelope's entry: an envelope id
// is a UUIDv7 (its creation time, on the sender's broker's clock), and no
// entry of it is recorded before then, so a search for an entry not
// recorded yet stops there instead of reading the whole log (federation
// asks again while the ledger catches up). Zero for another id: the whole
// log.
func earliestEntry(envelopeID string) time.Time {
	u, err := uuid.Parse(envelopeID)
	if err != nil || u.Version() != 7 {
		return time.Time{}
	}
	sec, nsec := u.Time().UnixTime()
	return time.Unix(sec, nsec).Add(-idClockSkew)
}

func checkID(id string) error {
	switch {
	case id == "":
		return errors.New("empty")
	case len(id) > 128:
		return errors.New("longer than 128 bytes")
	}
	return nil
}

// EnvelopeCommitment implements LedgerService.EnvelopeCommitment.
func (s *Service) EnvelopeCommitment(ctx context.Context, req *ledgerv1.EnvelopeCommitmentRequest) (*ledgerv1.EnvelopeCommitmentResponse, error) {
	if err := s.checkCall(ctx, req.GetTenant(), req.GetPersonId()); err != nil {
		return nil, err
	}
	i, e, _, err := s.findEnvelopeEntry(ctx, req.GetTenant(), req.GetPersonId(), req.GetEnvelopeId(), ledgerlog.KindSendRequested)
	if err != nil {
		return nil, err
	}
	if e.Commitment == "" {
		return nil, rpcError(ctx, codes.FailedPrecondition, CodeNoCommitment, "the sender's entry %d of envelope %s has no commitment (erased first): send without one", i, req.GetEnvelopeId())
	}
	return &ledgerv1.EnvelopeCommitmentResponse{Commitment: e.Commitment, Index: i}, nil
}

// IssueReceipt implements LedgerService.IssueReceipt: the receipt for the
// recipient's envelope.received entry, once per entry and counterparty.
func (s *Service) IssueReceipt(ctx context.Context, req *ledgerv1.IssueReceiptRequest) (*ledgerv1.IssueReceiptResponse, error) {
	tenant, person := req.GetTenant(), req.GetPersonId()
	if err := s.checkCall(ctx, tenant, person); err != nil {
		return nil, err
	}
	if err := checkCounterparty(req.GetCounterparty()); err != nil {
		return nil, rpcError(ctx, codes.InvalidArgument, CodeInvalidRequest, "counterparty: %v", err)
	}
	i, e, leaf, err := s.findEnvelopeEntry(ctx, tenant, person, req.GetEnvelopeId(), ledgerlog.KindReceived)
	if err != nil {
		return nil, err
	}
	if e.Commitment == "" {
		return nil, rpcError(ctx, codes.FailedPrecondition, CodeNoCommitment, "the received entry %d of envelope %s has no commitment (the sender gave none): no receipt", i, req.GetEnvelopeId())
	}
	// An earlier issuance was recorded after the entry: search from its
	// time, so a retry beyond the dedupe window still finds it.
	since, _ := time.Parse(ledgerlog.TimeLayout, e.Time)
	r, at, err := s.receipts.Issue(ctx, tenant, person, i, leaf, req.GetCounterparty(), since)
	if err != nil {
		return nil, storeError(ctx, err, "issuing the receipt")
	}
	b, err := r.JSON()
	if err != nil {
		return nil, status.Errorf(codes.Internal, "receipt: %v", err)
	}
	return &ledgerv1.IssueReceiptResponse{Receipt: b, Index: at}, nil
}

// checkCounterparty accepts a ledger origin or a domain.
func checkCounterparty(c string) error {
	if _, _, err := ledgerlog.ParseOrigin(c); err == nil {
		return nil
	}
	if err := alp.ValidateTenant(c); err != nil {
		return fmt.Errorf("%q is neither a ledger origin nor a domain", c)
	}
	return nil
}

// Cosign implements LedgerService.Cosign: tenant witnesses another log's
// checkpoint, consistent with the last one it cosigned of that origin.
func (s *Service) Cosign(ctx context.Context, req *ledgerv1.CosignRequest) (*ledgerv1.CosignResponse, error) {
	witness := req.GetTenant()
	if err := s.checkCall(ctx, witness); err != nil {
		return nil, err
	}
	body, err := ledgerlog.CheckpointText(req.GetCheckpoint())
	if err != nil {
		return nil, rpcError(ctx, codes.InvalidArgument, CodeInvalidCheckpoint, "%v", err)
	}
	vs, err := ledgerlog.Verifiers(req.GetLogKeys()...)
	if err != nil {
		return nil, rpcError(ctx, codes.InvalidArgument, CodeInvalidRequest, "log_keys: %v", err)
	}
	cp, err := ledgerlog.OpenCheckpoint(req.GetCheckpoint(), body.Origin, vs)
	if err != nil {
		return nil, rpcError(ctx, codes.InvalidArgument, CodeInvalidCheckpoint, "%v", err)
	}
	prev, err := s.store.Witnessed(ctx, witness, cp.Origin)
	if err != nil {
		return nil, storeError(ctx, err, "reading the witness state")
	}
	sizeTrailer := func() {
		_ = grpc.SetTrailer(ctx, metadata.Pairs(MetadataWitnessSize, strconv.FormatUint(prev.Size, 10)))
	}
	if req.GetOldSize() != prev.Size {
		sizeTrailer()
		return nil, rpcError(ctx, codes.FailedPrecondition, CodeWitnessSizeMismatch, "the witness holds size %d of %s, not %d", prev.Size, cp.Origin, req.GetOldSize())
	}
	switch {
	case cp.Size < prev.Size:
		sizeTrailer()
		return nil, rpcError(ctx, codes.FailedPrecondition, CodeWitnessSizeMismatch, "checkpoint of size %d is older than the size %d the witness holds", cp.Size, prev.Size)
	case cp.Size == prev.Size && cp.Root != prev.Root:
		return nil, rpcError(ctx, codes.FailedPrecondition, CodeSplitView, "%s has another root at size %d than the checkpoint this witness cosigned: two histories", cp.Origin, cp.Size)
	case cp.Size > prev.Size && prev.Size > 0:
		proof := make(tlog.TreeProof, len(req.GetConsistencyProof()))
		for i, h := range req.GetConsistencyProof() {
			if len(h) != tlog.HashSize {
				return nil, rpcError(ctx, codes.InvalidArgument, CodeInvalidRequest, "consistency_proof[%d] is not a SHA-256 hash", i)
			}
			proof[i] = tlog.Hash(h)
		}
		old := ledgerlog.Checkpoint{Origin: cp.Origin, Size: prev.Size, Root: prev.Root}
		if err := ledgerlog.VerifyConsistency(proof, old, cp); err != nil {
			return nil, rpcError(ctx, codes.FailedPrecondition, CodeSplitView, "the checkpoint does not extend the one of size %d this witness cosigned: %v", prev.Size, err)
		}
	}
	if cp.Size > prev.Size || prev.Revision == 0 {
		// Bound to it before the cosignature leaves: a witness never
		// cosigns two checkpoints it has not checked against each other.
		if err := s.store.SetWitnessed(ctx, witness, cp.Origin, prev, jsstore.Witnessed{Size: cp.Size, Root: cp.Root}); err != nil {
			if errors.Is(err, jsstore.ErrWitnessConflict) {
				return nil, rpcError(ctx, codes.Aborted, CodeRetry, "another cosigning of %s changed the witness state; retry", cp.Origin)
			}
			return nil, storeError(ctx, err, "saving the witness state")
		}
	}
	signer, err := s.receipts.Signer(ctx, witness)
	if err != nil {
		return nil, storeError(ctx, err, "the witness key")
	}
	now := time.Now()
	line, err := ledgerlog.Cosign(signer, witness, cp, now)
	if err != nil {
		return nil, status.Errorf(codes.Internal, "cosigning: %v", err)
	}
	vkey, err := ledgerlog.CosignerKey(witness, ledgerlog.PublicKey(signer))
	if err != nil {
		return nil, status.Errorf(codes.Internal, "cosigner key: %v", err)
	}
	return &ledgerv1.CosignResponse{Cosignature: line, CosignerKey: vkey, Timestamp: uint64(now.Unix())}, nil
}

// RecordCosignature implements LedgerService.RecordCosignature.
func (s *Service) RecordCosignature(ctx context.Context, req *ledgerv1.RecordCosignatureRequest) (*ledgerv1.RecordCosignatureResponse, error) {
	tenant, person := req.GetTenant(), req.GetPersonId()
	if err := s.checkCall(ctx, tenant, person); err != nil {
		return nil, err
	}
	origin := ledgerlog.Origin(tenant, person)
	keys, err := s.store.PublicKeys(ctx, tenant)
	if err != nil {
		return nil, storeError(ctx, err, "the ledger keys")
	}
	vkeys := make([]string, 0, len(keys))
	for _, k := range keys {
		vkeys = append(vkeys, k.VerifierKey)
	}
	vs, err := ledgerlog.Verifiers(vkeys...)
	if err != nil {
		return nil, status.Errorf(codes.Internal, "ledger keys: %v", err)
	}
	if _, err := ledgerlog.OpenCheckpoint(req.GetCheckpoint(), origin, vs); err != nil {
		return nil, rpcError(ctx, codes.InvalidArgument, CodeInvalidCheckpoint, "not a checkpoint this broker signed of %s: %v", origin, err)
	}
	cs, err := ledgerlog.ParseCosignature(req.GetCosignature())
	if err != nil {
		return nil, rpcError(ctx, codes.InvalidArgument, CodeInvalidRequest, "cosignature: %v", err)
	}
	line := ledgerlog.TrimSignatureLine(req.GetCosignature())
	entry := ledgerlog.Entry{V: ledgerlog.EntryVersion, Log: origin, Kind: ledgerlog.KindCheckpointCosigned,
		Counterparty: ledgerlog.WitnessTenant(cs.Name), Checkpoint: string(req.GetCheckpoint()), Cosignature: line,
		Time: ledgerlog.FormatTime(time.Now())}
	source := receipts.CommandID(ledgerlog.KindCheckpointCosigned, tenant, person, line)
	entry.SourceEvent = source
	if err := entry.Validate(); err != nil {
		return nil, rpcError(ctx, codes.InvalidArgument, CodeInvalidRequest, "%v", err)
	}
	// Made at its timestamp: an earlier recording of it is not older.
	res, err := s.receipts.Append(ctx, tenant, person, source, "", time.Unix(int64(min(cs.Time, 1<<62)), 0), entry)
	if err != nil {
		return nil, storeError(ctx, err, "recording the cosignature")
	}
	return &ledgerv1.RecordCosignatureResponse{Index: res.Index}, nil
}
