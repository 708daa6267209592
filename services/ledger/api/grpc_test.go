package api_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"strings"
	"testing"

	"golang.org/x/mod/sumdb/tlog"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	grpcmd "google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"

	ledgerv1 "github.com/alpd-project/alpd/gen/alp/ledger/v1"
	"github.com/alpd-project/alpd/internal/ledgerlog"
	"github.com/alpd-project/alpd/services/ledger/api"
)

// grpcServer serves the API's read methods as the ledger service does
// (Ping from elsewhere; here unimplemented, one level deeper so that the
// API's methods win).
type grpcServer struct {
	unimplemented
	*api.API
}

type unimplemented struct {
	ledgerv1.UnimplementedLedgerServiceServer
}

func (r *rig) grpcClient(t testing.TB) ledgerv1.LedgerServiceClient {
	t.Helper()
	lis := bufconn.Listen(1 << 20)
	s := grpc.NewServer()
	ledgerv1.RegisterLedgerServiceServer(s, grpcServer{API: r.api})
	go func() { _ = s.Serve(lis) }()
	t.Cleanup(s.Stop)
	conn, err := grpc.NewClient("passthrough:///bufnet",
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return ledgerv1.NewLedgerServiceClient(conn)
}

func bearer(ctx context.Context, token string) context.Context {
	return grpcmd.AppendToOutgoingContext(ctx, "authorization", "Bearer "+token)
}

func TestGRPC(t *testing.T) {
	r := newRig(t, api.Limits{DefaultPage: 3, MaxPage: 5})
	r.store.add(ana, 4)
	held := r.store.sign(ana)
	r.store.add(ana, 6)
	r.store.sign(ana)
	r.store.add(ana, 1) // 11, checkpoint at 10
	c := r.grpcClient(t)
	ctx := bearer(t.Context(), anaRead)

	h, err := c.GetHead(ctx, &ledgerv1.GetHeadRequest{})
	if err != nil {
		t.Fatal(err)
	}
	cp := r.openCheckpoint(t, ana, string(h.GetCheckpoint().GetNote()))
	if h.GetOrigin() != ledgerlog.Origin(tenant, ana) || h.GetSize() != 11 || h.GetCheckpoint().GetSize() != 10 ||
		!bytes.Equal(h.GetCheckpoint().GetRoot(), cp.Root[:]) || len(h.GetPublicKeys()) != 1 || h.GetPublicKeys()[0].GetCreated() == nil {
		t.Fatalf("head %v", h)
	}

	var got []*ledgerv1.Entry
	for from := uint64(0); ; {
		p, err := c.ListEntries(ctx, &ledgerv1.ListEntriesRequest{FromIndex: from, Limit: 100})
		if err != nil {
			t.Fatal(err)
		}
		if len(p.GetEntries()) > 5 || p.GetCheckpoint().GetSize() != 10 {
			t.Fatalf("page of %d entries (cap 5), checkpoint %v", len(p.GetEntries()), p.GetCheckpoint())
		}
		got = append(got, p.GetEntries()...)
		if p.GetNextIndex() == 0 {
			break
		}
		from = p.GetNextIndex()
	}
	if len(got) != 11 {
		t.Fatalf("%d entries", len(got))
	}
	for i, e := range got {
		want := r.store.logs[ana].entries[i]
		lh := ledgerlog.LeafHash(want.Leaf)
		if e.GetIndex() != uint64(i) || !bytes.Equal(e.GetLeaf(), want.Leaf) || !bytes.Equal(e.GetLeafHash(), lh[:]) ||
			(e.GetOpening() != nil) != (want.Opening != nil) || e.GetErased() != want.Erased {
			t.Fatalf("entry %d: %v", i, e)
		}
	}
	if p, err := c.ListEntries(ctx, &ledgerv1.ListEntriesRequest{}); err != nil || len(p.GetEntries()) != 3 {
		t.Errorf("default page: %v, %v", p, err)
	}

	ip, err := c.GetInclusionProof(ctx, &ledgerv1.GetInclusionProofRequest{Index: 7})
	if err != nil {
		t.Fatal(err)
	}
	if err := ledgerlog.VerifyInclusion(hashes(ip.GetProof()), cp, 7, tlog.Hash(ip.GetLeafHash())); err != nil || ip.GetTreeSize() != 10 {
		t.Fatalf("inclusion: %v %v", ip, err)
	}

	older, _ := ledgerlog.CheckpointText(held)
	for _, req := range []*ledgerv1.GetConsistencyProofRequest{{FromSize: 4}, {Checkpoint: held}} {
		cr, err := c.GetConsistencyProof(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		if err := ledgerlog.VerifyConsistency(hashes(cr.GetProof()), older, cp); err != nil || cr.GetFromSize() != 4 || cr.GetToSize() != 10 {
			t.Fatalf("consistency %v: %v %v", req, cr, err)
		}
	}

	stream, err := c.Export(ctx, &ledgerv1.ExportRequest{})
	if err != nil {
		t.Fatal(err)
	}
	var doc bytes.Buffer
	for i := 0; ; i++ {
		m, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if (m.GetCheckpoint() != nil) != (i == 0) {
			t.Errorf("message %d: checkpoint %v", i, m.GetCheckpoint())
		}
		doc.Write(m.GetChunk())
	}
	x, err := ledgerlog.ReadExport(&doc)
	if err != nil {
		t.Fatal(err)
	}
	if rep, err := ledgerlog.Verify(x, &older); err != nil || rep.Entries != 11 || !rep.Consistent {
		t.Fatalf("gRPC export: %+v %v", rep, err)
	}
}

func hashes(bs [][]byte) []tlog.Hash {
	out := make([]tlog.Hash, len(bs))
	for i, b := range bs {
		out[i] = tlog.Hash(b)
	}
	return out
}

func TestGRPCErrors(t *testing.T) {
	r := newRig(t, api.Limits{})
	r.store.add(ana, 4)
	r.store.sign(ana)
	c := r.grpcClient(t)

	for _, tc := range []struct {
		name string
		ctx  context.Context
		call func(context.Context) error
		code codes.Code
		alp  string
	}{
		{"no token", t.Context(), head(c), codes.Unauthenticated, api.CodeAuthRequired},
		{"bad token", bearer(t.Context(), "nope"), head(c), codes.Unauthenticated, "invalid_token"},
		{"no scope", bearer(t.Context(), anaSend), head(c), codes.PermissionDenied, "insufficient_scope"},
		{"two tokens", bearer(bearer(t.Context(), anaRead), anaRead), head(c), codes.InvalidArgument, api.CodeInvalidParameter},
		{"no log", bearer(t.Context(), boRead), head(c), codes.NotFound, api.CodeNoLog},
		{"out of range", bearer(t.Context(), anaRead), func(ctx context.Context) error {
			_, err := c.GetInclusionProof(ctx, &ledgerv1.GetInclusionProofRequest{Index: 4})
			return err
		}, codes.InvalidArgument, api.CodeOutOfRange},
		{"from 0", bearer(t.Context(), anaRead), func(ctx context.Context) error {
			_, err := c.GetConsistencyProof(ctx, &ledgerv1.GetConsistencyProofRequest{})
			return err
		}, codes.InvalidArgument, api.CodeInvalidParameter},
		{"foreign checkpoint", bearer(t.Context(), anaRead), func(ctx context.Context) error {
			_, err := c.GetConsistencyProof(ctx, &ledgerv1.GetConsistencyProofRequest{Checkpoint: []byte("x\n1\nAAAA\n")})
			return err
		}, codes.InvalidArgument, api.CodeInvalidCheckpoint},
		{"export of nothing", bearer(t.Context(), boRead), func(ctx context.Context) error {
			s, err := c.Export(ctx, &ledgerv1.ExportRequest{})
			if err == nil {
				_, err = s.Recv()
			}
			return err
		}, codes.NotFound, api.CodeNoLog},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.call(tc.ctx)
			if err == nil {
				t.Fatal("no error")
			}
			st := status.Convert(err)
			if st.Code() != tc.code || !strings.HasPrefix(st.Message(), tc.alp+": ") {
				t.Fatalf("%v, want %v %s", err, tc.code, tc.alp)
			}
		})
	}

	// Trailers carry the code and the challenge.
	var trailer grpcmd.MD
	_, err := c.GetHead(t.Context(), &ledgerv1.GetHeadRequest{}, grpc.Trailer(&trailer))
	if status.Code(err) != codes.Unauthenticated || trailer.Get(api.MetadataErrorCode)[0] != api.CodeAuthRequired ||
		!strings.Contains(strings.Join(trailer.Get("www-authenticate"), ""), metadata) {
		t.Errorf("trailer %v (%v)", trailer, err)
	}
	r.backend.notReady = errors.New("not started")
	_, err = c.GetHead(bearer(t.Context(), anaRead), &ledgerv1.GetHeadRequest{}, grpc.Trailer(&trailer))
	if status.Code(err) != codes.Unavailable || trailer.Get("retry-after")[0] != "1" {
		t.Errorf("not ready: %v, trailer %v", err, trailer)
	}
}

func head(c ledgerv1.LedgerServiceClient) func(context.Context) error {
	return func(ctx context.Context) error {
		_, err := c.GetHead(ctx, &ledgerv1.GetHeadRequest{})
		return err
	}
}
