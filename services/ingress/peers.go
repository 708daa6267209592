package ingress

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	ledgerv1 "github.com/alpd-project/alpd/gen/alp/ledger/v1"
	policyv1 "github.com/alpd-project/alpd/gen/alp/policy/v1"
	alpv1 "github.com/alpd-project/alpd/gen/alp/v1"
	"github.com/alpd-project/alpd/internal/envelope"
	"github.com/alpd-project/alpd/internal/httpjson"
)

// What the agents' doors ask other services, over gRPC (Options.Peer):
// policy for a person's connections, the ledger for the head of a
// person's ledger. Errors are *httpjson.Error, ready for any binding.

// CodePolicyUnavailable is the code of the answer while policy cannot be
// reached (unavailable, for the policy service).
const CodePolicyUnavailable = "policy_unavailable"

// peerTimeout bounds one call to a peer: an agent waits for the answer.
const peerTimeout = 10 * time.Second

// Connection is one of a person's connections or connection requests as
// their agents see it: the other party by address.
type Connection struct {
	ID string
	// With is the other party's address.
	With string
	// State is "requested", "connected", "declined" or "blocked".
	State string
	// Direction is "incoming" when the other party asked, "outgoing" when
	// the person did.
	Direction string
	// Decided is zero while the request waits.
	Requested, Decided time.Time
}

// ConnectionRequestBody is the body of a connection.request/v1: the
// purpose, why (free text) and who referred the person. A member left
// empty is left out, so the type's schema names what is missing.
func ConnectionRequestBody(purpose, message, referredBy string) []byte {
	body := map[string]string{}
	for name, v := range map[string]string{"purpose": purpose, "message": message, "referred_by": referredBy} {
		if v != "" {
			body[name] = v
		}
	}
	raw, _ := json.Marshal(body) // a map of strings always encodes
	return raw
}

// Connections are snd's person's connections, as policy holds them, oldest
// request first (ties by id), an order a page's cursor can stand on.
func (s *Service) Connections(ctx context.Context, snd Sender) ([]Connection, error) {
	conn, err := s.peer(alpv1.Role_ROLE_POLICY)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, peerTimeout)
	defer cancel()
	res, err := policyv1.NewPolicyServiceClient(conn).ListConnections(ctx,
		&policyv1.ListConnectionsRequest{Tenant: snd.Tenant, PersonId: snd.PersonID})
	if err != nil {
		return nil, peerError("policy", err, nil)
	}
	out := make([]Connection, 0, len(res.GetConnections()))
	for _, c := range res.GetConnections() {
		pc := Connection{ID: c.GetId(), With: c.GetWith(), State: c.GetState(), Direction: c.GetDirection()}
		if c.GetRequested() != nil {
			pc.Requested = c.GetRequested().AsTime()
		}
		if c.GetDecided() != nil {
			pc.Decided = c.GetDecided().AsTime()
		}
		out = append(out, pc)
	}
	slices.SortFunc(out, func(x, y Connection) int {
		if c := x.Requested.Compare(y.Requested); c != 0 {
			return c
		}
		return strings.Compare(x.ID, y.ID)
	})
	return out, nil
}

// LedgerHead is where the ledger of the person whose bearer credential
// authorization is (the value of an Authorization header) stands. The
// ledger authenticates that credential itself, as over HTTP: it is passed
// in the call's "authorization" metadata (services/ledger/api), never
// swapped for a broker credential, so the ledger reads only that person's
// log and needs alp.read. A refusal keeps the ledger's status, code and
// challenge.
func (s *Service) LedgerHead(ctx context.Context, authorization string) (*ledgerv1.GetHeadResponse, error) {
	conn, err := s.peer(alpv1.Role_ROLE_LEDGER)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, peerTimeout)
	defer cancel()
	ctx = metadata.AppendToOutgoingContext(ctx, "authorization", authorization)
	var trailer metadata.MD
	res, err := ledgerv1.NewLedgerServiceClient(conn).GetHead(ctx, &ledgerv1.GetHeadRequest{}, grpc.Trailer(&trailer))
	if err != nil {
		return nil, peerError("ledger", err, trailer)
	}
	return res, nil
}

func (s *Service) peer(role alpv1.Role) (grpc.ClientConnInterface, error) {
	name := envelope.ServiceName(role)
	if s.opts.Peer == nil {
		return nil, unavailable(name, fmt.Errorf("no peer connections configured"))
	}
	conn, err := s.opts.Peer(role)
	if err != nil {
		return nil, unavailable(name, err)
	}
	return conn, nil
}

func unavailable(service string, cause error) *httpjson.Error {
	return &httpjson.Error{Status: http.StatusServiceUnavailable, Code: service + "_unavailable", RetryAfter: 1, Cause: cause,
		Message: "the broker's " + service + " service cannot be reached right now; retry in a moment"}
}

// peerError turns a peer's gRPC refusal into the agent's answer. The
// ledger's refusals carry their HTTP code in the alp-error-code trailer
// and their message as "<code>: <message>" (services/ledger/api); those
// are passed on, with the challenge and retry delay. Anything else is
// the service being unavailable.
func peerError(service string, err error, trailer metadata.MD) *httpjson.Error {
	st, _ := status.FromError(err)
	code := first(trailer, "alp-error-code")
	statusOf := map[codes.Code]int{
		codes.InvalidArgument: http.StatusBadRequest, codes.Unauthenticated: http.StatusUnauthorized,
		codes.PermissionDenied: http.StatusForbidden, codes.NotFound: http.StatusNotFound,
		codes.FailedPrecondition: http.StatusConflict, codes.ResourceExhausted: http.StatusTooManyRequests,
		codes.Unavailable: http.StatusServiceUnavailable,
	}
	httpStatus, known := statusOf[st.Code()]
	if code == "" || !known {
		return unavailable(service, err)
	}
	e := &httpjson.Error{Status: httpStatus, Code: code, Message: strings.TrimPrefix(st.Message(), code+": "),
		Challenge: first(trailer, "www-authenticate")}
	if ra, err := strconv.Atoi(first(trailer, "retry-after")); err == nil && ra > 0 {
		e.RetryAfter = ra
	}
	return e
}

func first(md metadata.MD, key string) string {
	if v := md.Get(key); len(v) > 0 {
		return v[0]
	}
	return ""
}
