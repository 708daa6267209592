package api

import (
	"context"
	"io"
	"net/http"
	"strconv"
	"time"

	"golang.org/x/mod/sumdb/tlog"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	ledgerv1 "github.com/alpd-project/alpd/gen/alp/ledger/v1"
	"github.com/alpd-project/alpd/internal/httpjson"
	"github.com/alpd-project/alpd/services/ledger/storage"
)

// The gRPC read methods of LedgerService. They are for services that act
// for a person (in split mode, mTLS decides which roles may call them:
// internal/mtls.DefaultPolicy); whose ledger is read always comes from the
// person's bearer credential in the "authorization" metadata, exactly as
// over HTTP. A web session cannot be used here.
//
// Errors carry the gRPC code of the HTTP status, the message "<code>:
// <message>", and trailers alp-error-code, www-authenticate (refused
// credentials) and retry-after.

// Metadata keys.
const (
	MetadataAuthorization = "authorization"
	MetadataErrorCode     = "alp-error-code"
)

// grpcReader authenticates a call.
func (a *API) grpcReader(ctx context.Context) (reader, *httpjson.Error) {
	md, _ := metadata.FromIncomingContext(ctx)
	vals := md.Get(MetadataAuthorization)
	if len(vals) > 1 {
		return reader{}, httpjson.Errorf(http.StatusBadRequest, CodeInvalidParameter, "send one authorization value")
	}
	authz := ""
	if len(vals) == 1 {
		authz = vals[0]
	}
	return a.bearer(ctx, authz)
}

// grpcError turns e into a status error, with its code and challenge in
// the trailer.
func (a *API) grpcError(ctx context.Context, method string, e *httpjson.Error) error {
	if e.Status >= 500 && e.Cause != nil {
		a.log.Error("ledger api: read failed", "method", method, "code", e.Code, "err", e.Cause)
	}
	md := metadata.Pairs(MetadataErrorCode, e.Code)
	if e.Challenge != "" {
		md.Append("www-authenticate", e.Challenge)
	}
	if e.RetryAfter > 0 {
		md.Append("retry-after", strconv.Itoa(e.RetryAfter))
	}
	_ = grpc.SetTrailer(ctx, md)
	return status.Error(grpcCode(e.Status), e.Code+": "+e.Message)
}

func checkpointProto(c checkpoint) *ledgerv1.Checkpoint {
	return &ledgerv1.Checkpoint{Note: c.Note, Origin: c.Origin, Size: c.Size, Root: c.Root[:]}
}

func hashBytes(hs []tlog.Hash) [][]byte {
	out := make([][]byte, len(hs))
	for i := range hs {
		out[i] = hs[i][:]
	}
	return out
}

// timestamp is t, or nil for the zero time.
func timestamp(t time.Time) *timestamppb.Timestamp {
	if t.IsZero() {
		return nil
	}
	return timestamppb.New(t)
}

// GetHead implements LedgerService.GetHead.
func (a *API) GetHead(ctx context.Context, _ *ledgerv1.GetHeadRequest) (*ledgerv1.GetHeadResponse, error) {
	rd, e := a.grpcReader(ctx)
	if e != nil {
		return nil, a.grpcError(ctx, "GetHead", e)
	}
	h, e := a.readHead(ctx, rd)
	if e != nil {
		return nil, a.grpcError(ctx, "GetHead", e)
	}
	keys, e := h.keys(ctx)
	if e != nil {
		return nil, a.grpcError(ctx, "GetHead", e)
	}
	res := &ledgerv1.GetHeadResponse{Origin: h.Origin, Size: h.Size, Root: h.Root[:], Checkpoint: checkpointProto(h.Checkpoint)}
	for _, k := range keys {
		res.PublicKeys = append(res.PublicKeys, keyProto(k))
	}
	return res, nil
}

func keyProto(k storage.PublicKey) *ledgerv1.PublicKey {
	return &ledgerv1.PublicKey{KeyId: k.KeyID, Name: k.Name, VerifierKey: k.VerifierKey, PublicKey: k.PublicKey, State: k.State,
		Created:       timestamp(k.Created),
		CompromisedAt: timestamp(k.CompromisedAt)}
}

// ListEntries implements LedgerService.ListEntries.
func (a *API) ListEntries(ctx context.Context, req *ledgerv1.ListEntriesRequest) (*ledgerv1.ListEntriesResponse, error) {
	rd, e := a.grpcReader(ctx)
	if e != nil {
		return nil, a.grpcError(ctx, "ListEntries", e)
	}
	limit := int(req.GetLimit())
	switch {
	case limit == 0:
		limit = a.limits.DefaultPage
	case limit > a.limits.MaxPage:
		limit = a.limits.MaxPage
	}
	p, e := a.entries(ctx, rd, req.GetFromIndex(), limit)
	if e != nil {
		return nil, a.grpcError(ctx, "ListEntries", e)
	}
	res := &ledgerv1.ListEntriesResponse{NextIndex: p.Next, Size: p.Size, Checkpoint: checkpointProto(p.Checkpoint)}
	for _, x := range p.Entries {
		h := tlog.RecordHash(x.Leaf)
		pe := &ledgerv1.Entry{Index: x.Index, Leaf: x.Leaf, LeafHash: h[:], Time: timestamp(x.Time), Erased: x.Erased}
		if x.Opening != nil {
			pe.Opening = &ledgerv1.Opening{Salt: x.Opening.Salt, Digest: x.Opening.Digest}
		}
		res.Entries = append(res.Entries, pe)
	}
	return res, nil
}

// GetInclusionProof implements LedgerService.GetInclusionProof.
func (a *API) GetInclusionProof(ctx context.Context, req *ledgerv1.GetInclusionProofRequest) (*ledgerv1.GetInclusionProofResponse, error) {
	rd, e := a.grpcReader(ctx)
	if e != nil {
		return nil, a.grpcError(ctx, "GetInclusionProof", e)
	}
	p, e := a.inclusionProof(ctx, rd, req.GetIndex(), req.GetTreeSize())
	if e != nil {
		return nil, a.grpcError(ctx, "GetInclusionProof", e)
	}
	return &ledgerv1.GetInclusionProofResponse{Index: p.Index, TreeSize: p.TreeSize, LeafHash: p.LeafHash[:],
		Proof: hashBytes(p.Proof), Root: p.Root[:], Checkpoint: checkpointProto(p.Checkpoint)}, nil
}

// GetConsistencyProof implements LedgerService.GetConsistencyProof.
func (a *API) GetConsistencyProof(ctx context.Context, req *ledgerv1.GetConsistencyProofRequest) (*ledgerv1.GetConsistencyProofResponse, error) {
	rd, e := a.grpcReader(ctx)
	if e != nil {
		return nil, a.grpcError(ctx, "GetConsistencyProof", e)
	}
	var c *consistency
	if len(req.GetCheckpoint()) > 0 {
		c, e = a.consistencyFromHeld(ctx, rd, req.GetCheckpoint())
	} else {
		c, e = a.consistencyProof(ctx, rd, req.GetFromSize(), req.GetToSize())
	}
	if e != nil {
		return nil, a.grpcError(ctx, "GetConsistencyProof", e)
	}
	return &ledgerv1.GetConsistencyProofResponse{FromSize: c.From, ToSize: c.To, Proof: hashBytes(c.Proof),
		FromRoot: c.FromRoot[:], ToRoot: c.ToRoot[:], Checkpoint: checkpointProto(c.Checkpoint)}, nil
}

// Export implements LedgerService.Export: the export document in chunks,
// the checkpoint with the first.
func (a *API) Export(_ *ledgerv1.ExportRequest, stream grpc.ServerStreamingServer[ledgerv1.ExportResponse]) error {
	ctx := stream.Context()
	rd, e := a.grpcReader(ctx)
	if e != nil {
		return a.grpcError(ctx, "Export", e)
	}
	_, e = a.export(ctx, rd, func(h *head) io.Writer {
		return &chunkWriter{stream: stream, first: checkpointProto(h.Checkpoint)}
	})
	if e != nil {
		return a.grpcError(ctx, "Export", e)
	}
	return nil
}

// chunkWriter sends what is written as ExportResponse chunks. Send
// marshals before it returns, so the caller may reuse its buffer.
type chunkWriter struct {
	stream grpc.ServerStreamingServer[ledgerv1.ExportResponse]
	first  *ledgerv1.Checkpoint
}

func (w *chunkWriter) Write(p []byte) (int, error) {
	m := &ledgerv1.ExportResponse{Chunk: p, Checkpoint: w.first}
	if err := w.stream.Send(m); err != nil {
		return 0, err
	}
	w.first = nil
	return len(p), nil
}
