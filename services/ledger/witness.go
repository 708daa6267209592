package ledger

import (
	"context"
	"errors"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	ledgerv1 "github.com/alpd-project/alpd/gen/alp/ledger/v1"
	"github.com/alpd-project/alpd/internal/ledgerlog"
	"github.com/alpd-project/alpd/services/ledger/storage"
)

// CodeCheckpointAhead: a witness holds a larger size of the log than its
// latest signed checkpoint.
const CodeCheckpointAhead = "checkpoint_ahead"

// WitnessProof implements LedgerService.WitnessProof: what the log's broker
// submits to a witness, the person's latest signed checkpoint with the
// consistency proof from the size the witness holds. The proof is checked
// against the checkpoint before it leaves: a witness refusing a proof of
// ours would read as a split view.
func (s *Service) WitnessProof(ctx context.Context, req *ledgerv1.WitnessProofRequest) (*ledgerv1.WitnessProofResponse, error) {
	tenant, person := req.GetTenant(), req.GetPersonId()
	if err := s.checkCall(ctx, tenant, person); err != nil {
		return nil, err
	}
	h, err := s.store.Head(ctx, tenant, person)
	if errors.Is(err, storage.ErrNoLog) {
		return nil, rpcError(ctx, codes.NotFound, CodeNotRecorded, "the log of %s has no entries yet", person)
	} else if err != nil {
		return nil, storeError(ctx, err, "reading the log")
	}
	if len(h.SignedCheckpoint) == 0 || h.CheckpointSize < max(req.GetMinSize(), 1) {
		return nil, rpcError(ctx, codes.NotFound, CodeNotRecorded, "the log of %s has no signed checkpoint of %d entries yet", person, req.GetMinSize())
	}
	cp, err := ledgerlog.CheckpointText(h.SignedCheckpoint)
	if err != nil || cp.Size != h.CheckpointSize || cp.Origin != ledgerlog.Origin(tenant, person) {
		return nil, status.Errorf(codes.Internal, "the latest checkpoint of %s/%s disagrees with its head: %v", tenant, person, err)
	}
	old := req.GetOldSize()
	if old > cp.Size {
		s.Logger.Warn("ledger: a witness holds a larger size of a log than its latest checkpoint", "origin", cp.Origin, "held", old, "checkpoint", cp.Size)
		return nil, rpcError(ctx, codes.FailedPrecondition, CodeCheckpointAhead, "the witness holds size %d of %s, beyond its latest checkpoint of %d entries", old, cp.Origin, cp.Size)
	}
	res := &ledgerv1.WitnessProofResponse{Checkpoint: &ledgerv1.Checkpoint{Note: h.SignedCheckpoint, Origin: cp.Origin, Size: cp.Size, Root: cp.Root[:]}}
	if old == 0 || old == cp.Size {
		return res, nil
	}
	hr, err := s.store.HashReader(ctx, tenant, person)
	if err != nil {
		return nil, storeError(ctx, err, "reading the tree")
	}
	oldRoot, err := ledgerlog.TreeHash(hr, old)
	if err != nil {
		return nil, storeError(ctx, err, "reading the tree")
	}
	proof, err := s.store.ConsistencyProof(ctx, tenant, person, old, cp.Size)
	if err != nil {
		return nil, storeError(ctx, err, "proving consistency")
	}
	if err := ledgerlog.VerifyConsistency(proof, ledgerlog.Checkpoint{Origin: cp.Origin, Size: old, Root: oldRoot}, cp); err != nil {
		return nil, status.Errorf(codes.Internal, "the consistency proof %d→%d of %s does not verify: %v", old, cp.Size, cp.Origin, err)
	}
	for _, p := range proof {
		res.ConsistencyProof = append(res.ConsistencyProof, append([]byte(nil), p[:]...))
	}
	return res, nil
}
